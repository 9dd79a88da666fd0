"""Fbank (stream equals batch, known spectral facts) and global CMVN against numpy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from asr.config import FeatureConfig
from asr.features import CMVN, Fbank, StreamingFbank

RATE = 16000


def _speechlike(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(RATE * seconds)) / RATE
    tone = 0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t))
    return (tone + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


def _stream(samples: np.ndarray, sizes: list[int]) -> np.ndarray:
    fbank = StreamingFbank(FeatureConfig())
    outs, start = [], 0
    for n in sizes:
        if start >= len(samples):
            break
        outs.append(fbank.accept(samples[start : start + n]))
        start += n
    assert start >= len(samples), "chunk sizes do not cover the signal"
    assert fbank.num_frames == sum(len(o) for o in outs)
    return np.concatenate(outs)


def test_batch_shape_and_frame_count() -> None:
    feats = Fbank(FeatureConfig()).compute(_speechlike(1.0))
    # snip_edges: 1 + (16000 - 400) // 160 whole 25 ms windows at a 10 ms shift
    assert feats.shape == (98, 80) and feats.dtype == np.float32
    assert Fbank(FeatureConfig()).compute(np.zeros(399, np.float32)).shape == (0, 80)
    assert Fbank(FeatureConfig(num_mel_bins=40)).compute(_speechlike(0.1)).shape == (8, 40)


@pytest.mark.parametrize("chunking", ["1ms", "10ms", "random", "odd"])
def test_streamed_frames_equal_batch_frames(chunking: str) -> None:
    samples = _speechlike(1.3, seed=1)
    n = len(samples)
    sizes = {
        "1ms": [16] * (n // 16 + 1),
        "10ms": [160] * (n // 160 + 1),
        "random": list(np.random.default_rng(5).integers(1, 3000, size=n // 1000)),
        "odd": [399, 1, 161, 7] * (n // 568 + 1),
    }[chunking]
    streamed = _stream(samples, [int(s) for s in sizes])
    np.testing.assert_array_equal(streamed, Fbank(FeatureConfig()).compute(samples))


def test_int16_input_matches_float_input() -> None:
    ints = (np.random.default_rng(2).standard_normal(4000) * 3000).astype(np.int16)
    fbank = Fbank(FeatureConfig())
    np.testing.assert_array_equal(fbank.compute(ints), fbank.compute(ints / np.float32(32768)))


def test_log_mel_facts() -> None:
    """Doubling the signal adds log(4) to every log power bin; a tone peaks in its mel bin."""
    fbank = Fbank(FeatureConfig())
    samples = _speechlike(0.5, seed=3)
    np.testing.assert_allclose(
        fbank.compute(2 * samples), fbank.compute(samples) + np.log(4.0), atol=1e-3
    )
    t = np.arange(RATE // 2) / RATE
    feats = fbank.compute((0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32))

    def mel(f: float) -> float:
        return 1127 * np.log(1 + f / 700)

    centres = mel(20) + np.arange(1, 81) * (mel(8000) - mel(20)) / 81
    assert set(feats.argmax(axis=1)) == {int(np.argmin(np.abs(centres - mel(1000))))}


def test_stream_drops_returned_frames() -> None:
    fbank = StreamingFbank(FeatureConfig())
    for _ in range(50):
        fbank.accept(_speechlike(0.1))
    assert fbank.num_frames > 400
    with pytest.raises(Exception, match="already removed"):
        fbank._extractor.get_frame(0)  # popped: an hour-long stream keeps no old frames


def test_dither_changes_features_only_when_asked() -> None:
    samples = _speechlike(0.3)
    plain = Fbank(FeatureConfig()).compute(samples)
    np.testing.assert_array_equal(plain, Fbank(FeatureConfig()).compute(samples))
    assert not np.array_equal(plain, Fbank(FeatureConfig(dither=1.0)).compute(samples))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"sample_rate": 100}, "sample rate"),
        ({"num_mel_bins": 0}, "num_mel_bins"),
        ({"frame_shift_ms": 30.0}, "frame_shift_ms"),
        ({"frame_shift_ms": 0.0}, "frame_shift_ms"),
        ({"dither": -1.0}, "dither"),
    ],
)
def test_bad_feature_config(settings: dict[str, float], message: str) -> None:
    """Refused when the settings are made (asr.config's bounds) or the frontend is built."""
    with pytest.raises(ValueError, match=message):
        Fbank(FeatureConfig(**settings))
    with pytest.raises(ValueError, match=message):
        StreamingFbank(FeatureConfig(**settings))


def test_bad_samples_leave_the_stream_usable() -> None:
    fbank = StreamingFbank(FeatureConfig())
    samples = _speechlike(0.2)
    first = fbank.accept(samples[:1000])
    for bad in (np.array([np.nan] * 10, np.float32), np.zeros((2, 5), np.float32), np.zeros(0)):
        with pytest.raises(ValueError):
            fbank.accept(bad)
    rest = fbank.accept(samples[1000:])
    np.testing.assert_array_equal(
        np.concatenate([first, rest]), Fbank(FeatureConfig()).compute(samples)
    )


def _feats(seed: int, frames: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((frames, 6)) * np.arange(1, 7) + np.arange(6) * 10).astype(
        np.float32
    )


def test_cmvn_matches_numpy_and_normalises() -> None:
    parts = [_feats(0, 50), _feats(1, 7), _feats(2, 120)]
    cmvn = CMVN()
    for part in parts:
        cmvn.accumulate(part)
    cmvn.accumulate(torch.from_numpy(_feats(3, 30)).reshape(3, 10, 6))
    everything = np.concatenate([*parts, _feats(3, 30)]).astype(np.float64)
    cmvn.finalize()
    assert cmvn.dim == 6 and cmvn.count == 207
    np.testing.assert_allclose(cmvn.mean, everything.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(cmvn.std, everything.std(axis=0), rtol=1e-10)
    normalised = cmvn.apply(everything.astype(np.float32))
    assert normalised.dtype == np.float32
    np.testing.assert_allclose(normalised.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(normalised.std(axis=0), 1, atol=1e-5)
    batch = torch.from_numpy(everything[:200].astype(np.float32)).reshape(4, 50, 6)
    as_tensor = cmvn.apply(batch)
    assert isinstance(as_tensor, torch.Tensor) and as_tensor.dtype == torch.float32
    np.testing.assert_allclose(as_tensor.reshape(200, 6).numpy(), normalised[:200], atol=1e-6)


def test_cmvn_constant_dimension_does_not_divide_by_zero() -> None:
    cmvn = CMVN()
    cmvn.accumulate(np.ones((10, 2), np.float32))
    cmvn.finalize()
    assert np.isfinite(cmvn.apply(np.ones((3, 2), np.float32))).all()


def test_cmvn_save_load_round_trip_and_resume(tmp_path: Path) -> None:
    cmvn = CMVN()
    cmvn.accumulate(_feats(0, 40))
    cmvn.finalize()
    cmvn.save(tmp_path / "cmvn.json")
    data = json.loads((tmp_path / "cmvn.json").read_text())
    assert data["dim"] == 6 and data["count"] == 40
    loaded = CMVN.load(tmp_path / "cmvn.json")
    np.testing.assert_array_equal(loaded.mean, cmvn.mean)
    np.testing.assert_array_equal(loaded.std, cmvn.std)
    loaded.accumulate(_feats(1, 60))
    loaded.finalize()
    both = np.concatenate([_feats(0, 40), _feats(1, 60)]).astype(np.float64)
    np.testing.assert_allclose(loaded.mean, both.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(loaded.std, both.std(axis=0), rtol=1e-8)


def test_cmvn_errors(tmp_path: Path) -> None:
    cmvn = CMVN()
    with pytest.raises(ValueError, match="not finalized"):
        cmvn.apply(_feats(0, 3))
    with pytest.raises(ValueError, match="not finalized"):
        cmvn.save(tmp_path / "x.json")
    with pytest.raises(ValueError, match="before any frames"):
        cmvn.finalize()
    with pytest.raises(ValueError, match=r"\[\.\.\., dim\]"):
        cmvn.accumulate(np.zeros(6))
    with pytest.raises(ValueError, match="NaN"):
        cmvn.accumulate(np.full((2, 6), np.nan))
    cmvn.accumulate(_feats(0, 5))
    with pytest.raises(ValueError, match="dimension 5 does not match the CMVN dimension 6"):
        cmvn.accumulate(np.zeros((3, 5)))
    cmvn.finalize()
    with pytest.raises(ValueError, match="dimension 80 does not match"):
        cmvn.apply(torch.zeros(2, 80))
    with pytest.raises(ValueError, match="numpy array or torch tensor"):
        cmvn.apply([[0.0] * 6])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "cannot read CMVN"),
        ('{"dim": 2, "mean": [0, 0]}', "needs the keys"),
        ('{"dim": 2, "count": 0, "mean": [0, 0], "std": [1, 1]}', "count must be"),
        ('{"dim": 3, "count": 5, "mean": [0, 0], "std": [1, 1]}', "dim=3"),
        ('{"dim": 2, "count": 5, "mean": [0, 0], "std": [1, 0]}', "positive"),
        ('{"dim": 2, "count": 5, "mean": ["a", 0], "std": [1, 1]}', "lists of numbers"),
    ],
)
def test_cmvn_load_rejects_bad_files(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "c.json").write_text(content)
    with pytest.raises(ValueError, match=message):
        CMVN.load(tmp_path / "c.json")
    with pytest.raises(ValueError, match="cannot read CMVN"):
        CMVN.load(tmp_path / "missing.json")
