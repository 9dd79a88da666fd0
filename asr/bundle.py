"""Model bundles: one directory with everything needed to recognise, and one loader.

Layout: ``config.json`` (the shared :class:`Config`, with a format version),
``model.safetensors`` (weights), the tokenizer (``tokenizer.model`` for
sentencepiece or ``tokens.txt`` for symbols), ``cmvn.json`` (global feature
statistics), ``README.md`` (the model card), with the Whisper front end
``whisper_encoder.safetensors`` (its streaming encoder) and, optionally, ``lm.npz``
(a token n-gram model for shallow fusion, made by ``asr lm``), the full-attention teacher
``whisper_teacher.safetensors`` (two-pass finals), and Whisper's decoder and tokenizer
``whisper_decoder.safetensors`` and ``whisper_tokenizer.json`` (``asr import-whisper
--bundle``: two-pass finals written by Whisper's own decoder).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from asr.config import FORMAT_VERSION, Config
from asr.features import CMVN
from asr.frontend import BUNDLE_ENCODER_FILE, BUNDLE_TEACHER_FILE, frontend_dim, load_frontend
from asr.lm import LM_FILE
from asr.model import Seq2Seq
from asr.recognizer import Recognizer
from asr.tokenizer import load_tokenizer
from asr.whisper_decoder import DECODER_FILE
from asr.whisper_text import TOKENIZER_FILE

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
CMVN_FILE = "cmvn.json"
CARD = "README.md"
TOKENIZER_FILES = {"sentencepiece": "tokenizer.model", "symbols": "tokens.txt"}
HERE_MODEL = Path("models") / "default"
# the bundled model of the checkout this package runs from (an editable install)
CHECKOUT_MODEL = Path(__file__).resolve().parents[1] / HERE_MODEL


def default_model() -> Path:
    """The bundle to use when none is named: ``models/default`` under the working directory,
    as the README's commands run from the checkout; else the checkout's own, so that
    `asr transcribe` and `asr serve` work from any directory after ``pip install -e .``."""
    if HERE_MODEL.is_dir() or not CHECKOUT_MODEL.is_dir():
        return HERE_MODEL
    return CHECKOUT_MODEL


def save_bundle(
    directory: str | Path,
    config: Config,
    model: Seq2Seq,
    tokenizer_file: str | Path,
    cmvn: CMVN,
    card: str,
) -> Path:
    """Write a bundle; files are written beside and renamed, so a reader never sees half a bundle."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    model.set_cmvn(torch.from_numpy(cmvn.mean), torch.from_numpy(cmvn.std))
    tokenizer_name = TOKENIZER_FILES[config.model.tokenizer.kind]
    weights = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    meta = {"format_version": str(FORMAT_VERSION), "vocab_size": str(model.vocab_size)}
    writers = {
        CONFIG: lambda p: config.save(p),
        WEIGHTS: lambda p: save_file(weights, str(p), metadata=meta),
        CMVN_FILE: lambda p: cmvn.save(p),
        tokenizer_name: lambda p: shutil.copyfile(tokenizer_file, p),
        CARD: lambda p: Path(p).write_text(card),
    }
    if config.model.frontend == "whisper":
        frontend = load_frontend(config.model)
        writers[BUNDLE_ENCODER_FILE] = lambda p: shutil.copyfile(frontend.encoder_file, p)
        if config.decode.two_pass or config.model.whisper.carry_teacher:
            writers[BUNDLE_TEACHER_FILE] = lambda p: shutil.copyfile(frontend.teacher_file, p)
    for name, write in writers.items():
        tmp = out / f".{name}.tmp"
        write(tmp)
        tmp.replace(out / name)
    return out


def load_model(directory: str | Path) -> Recognizer:
    """Load a bundle; a missing, unreadable or mismatched file fails with an error naming it."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"model bundle {root} does not exist or is not a directory")
    config_path = _need(root, CONFIG)
    try:
        raw = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{config_path}: not valid JSON ({err})") from None
    version = raw.get("format_version") if isinstance(raw, dict) else None
    if version != FORMAT_VERSION:
        raise ValueError(
            f"{config_path}: format_version {version!r} is not supported (expected {FORMAT_VERSION})"
        )
    try:
        config = Config.from_dict(raw)
    except ValueError as err:
        raise ValueError(f"{config_path}: {err}") from None

    tokenizer_path = _need(root, TOKENIZER_FILES[config.model.tokenizer.kind])
    try:
        tokenizer = load_tokenizer(tokenizer_path)
    except (ValueError, OSError, RuntimeError) as err:
        raise ValueError(f"{tokenizer_path}: cannot load tokenizer ({err})") from None

    cmvn_path = _need(root, CMVN_FILE)
    try:
        cmvn = CMVN.load(cmvn_path)
    except (ValueError, OSError, KeyError) as err:
        raise ValueError(f"{cmvn_path}: cannot load CMVN statistics ({err})") from None
    if cmvn.dim != frontend_dim(config.model):
        raise ValueError(
            f"{cmvn_path}: dimension {cmvn.dim} does not match the {config.model.frontend} "
            f"front end's {frontend_dim(config.model)} in {CONFIG}"
        )
    if config.model.frontend == "whisper":
        _need(root, BUNDLE_ENCODER_FILE)
    frontend = load_frontend(config.model, root)

    weights_path = _need(root, WEIGHTS)
    try:
        weights = load_file(str(weights_path))
    except Exception as err:  # safetensors raises its own error types
        raise ValueError(f"{weights_path}: cannot read weights ({err})") from None
    model = Seq2Seq(config.model, tokenizer.vocab_size)
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise ValueError(
            f"{weights_path}: weights do not match {CONFIG} and {tokenizer_path.name} "
            f"(vocabulary {tokenizer.vocab_size}): {str(err).splitlines()[0]}"
        ) from None
    model.set_cmvn(torch.from_numpy(cmvn.mean), torch.from_numpy(cmvn.std))
    model.eval()
    lm_file = root / LM_FILE if (root / LM_FILE).is_file() else None
    whisper_files = (root / DECODER_FILE, root / TOKENIZER_FILE)
    has_whisper = config.model.frontend == "whisper" and all(p.is_file() for p in whisper_files)
    recognizer = Recognizer(
        config,
        model,
        tokenizer,
        lm_file,
        frontend=frontend,
        whisper_files=whisper_files if has_whisper else None,
        root=root,
    )
    recognizer.set_search()  # a config that wants the LM loads it (or fails) here, not later
    return recognizer


def _need(root: Path, name: str) -> Path:
    path = root / name
    if not path.is_file():
        raise FileNotFoundError(f"model bundle {root} is missing {name}")
    return path
