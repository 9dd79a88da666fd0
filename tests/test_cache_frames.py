"""training.cache_frames: shards fill a shared frame cache with what a training computes
itself, and a training pointed at that cache computes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asr.audio import read_audio, resample
from asr.config import Config
from asr.frontend import load_frontend
from tests.conftest import WHISPER_OVERRIDES
from tests.test_train import TINY, run_training, train_command, write_manifest

REPO = Path(__file__).resolve().parents[1]


def test_shards_fill_the_cache_a_training_reads(tmp_path: Path, speech_dir: Path) -> None:
    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir, count=5)
    cache = tmp_path / "frames"
    settings = [*WHISPER_OVERRIDES, f"train.feature_cache={cache}"]
    for shard in ("1/2", "2/2"):
        command = [sys.executable, "-m", "training.cache_frames", "--config", str(TINY)]
        command += [*settings, "--manifest", str(manifest), "--shard", shard]
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-2000:]
    files = sorted(cache.glob("*.npy"))
    assert len(files) == 5  # the two shards split the utterances between them

    frontend = load_frontend(Config.load(TINY, settings).model)
    cached = [np.load(f) for f in files]
    for wav in sorted(speech_dir.glob("utt0[0-4].wav")):
        frames = frontend.compute(resample(*read_audio(wav), 16000))
        assert sum(c.shape == frames.shape and np.array_equal(c, frames) for c in cached) == 1

    steps = ["train.max_steps=1", "train.max_batch_seconds=20", "train.valid_decode_max=0"]
    result = run_training(train_command(tmp_path / "run", manifest, *settings, *steps))
    assert "train features: 5 utterances (0 computed, rest cached)" in result.stdout
    assert not (tmp_path / "run" / "features").exists()


@pytest.mark.parametrize("shard", ["0/2", "3/2", "a/b", "1"])
def test_a_bad_shard_is_refused(shard: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "training.cache_frames", "--config", str(TINY)]
    command += [f"train.feature_cache={tmp_path}", "--manifest", str(TINY), "--shard", shard]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--shard" in result.stderr


def test_a_cache_directory_is_required(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "training.cache_frames", "--config", str(TINY)]
    command += ["--manifest", str(TINY)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "train.feature_cache is not set" in result.stderr


def test_the_cache_key_follows_what_the_frames_depend_on() -> None:
    def key(*overrides: str) -> dict:
        return load_frontend(Config.load(TINY, [*WHISPER_OVERRIDES, *overrides]).model).cache_key()

    base = key()
    assert key("model.whisper.carry_teacher=true", "model.whisper.teacher=elsewhere") == base
    for changed in ("model.whisper.chunk=16", "model.whisper.int8=true", "model.whisper.floor=-8"):
        assert key(changed) != base, changed
    rows = "model.whisper.quantization=rows"
    assert key(rows) == base  # float frames: no quantisation to tell apart
    assert key("model.whisper.int8=true", rows) != key("model.whisper.int8=true")


def test_teacher_states_are_cached_for_the_training_manifest_and_read(
    tmp_path: Path, speech_dir: Path
) -> None:
    """train.teacher_share: the shards also cache the full-attention teacher's states of the
    training manifest (what a two-pass final reads for the whole utterance, no more), and a
    training with the share finds both kinds cached."""
    import torch

    from asr.whisper_features import log_mel

    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir, count=4)
    dev = write_manifest(tmp_path / "dev.jsonl", speech_dir, count=2)
    cache = tmp_path / "frames"
    settings = [*WHISPER_OVERRIDES, f"train.feature_cache={cache}", "train.teacher_share=1.0"]
    settings += [f"train.train_manifest={manifest}"]
    command = [sys.executable, "-m", "training.cache_frames", "--config", str(TINY), *settings]
    result = subprocess.run(
        [*command, "--manifest", str(manifest), str(dev)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # 4 student + 4 teacher for train; dev's 2 utterances are train's first 2: no new file
    assert len(list(cache.glob("*.npy"))) == 8

    frontend = load_frontend(Config.load(TINY, settings).model)
    teacher = frontend.teacher_view()
    assert teacher.cache_key() != frontend.cache_key()
    with pytest.raises(ValueError, match="cannot stream"):
        teacher.stream()
    samples = resample(*read_audio(speech_dir / "utt00.wav"), 16000)
    with torch.no_grad():
        second_pass, _ = frontend.full_attention()(torch.from_numpy(log_mel(samples, -7.0))[None])
    computed = teacher.compute(samples)
    assert np.allclose(computed, second_pass[0].numpy(), atol=1e-5)
    cached = [np.load(f) for f in cache.glob("*.npy")]
    assert sum(np.array_equal(c, computed) for c in cached if c.shape == computed.shape) == 1

    steps = ["train.max_steps=2", "train.max_batch_seconds=20", "train.valid_decode_max=0"]
    result = run_training(train_command(tmp_path / "run", manifest, *settings, *steps))
    assert "teacher train features: 4 utterances (0 computed, rest cached)" in result.stdout
    assert "train features: 4 utterances (0 computed, rest cached)" in result.stdout


def test_a_teacher_share_needs_the_whisper_front_end(tmp_path: Path, speech_dir: Path) -> None:
    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir, count=2)
    command = train_command(tmp_path / "run", manifest, "train.teacher_share=0.5")
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "teacher_share needs model.frontend=whisper" in result.stderr
    command = train_command(tmp_path / "run", manifest, "train.teacher_share=1.5")
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "teacher_share must be within 0..1" in result.stderr
