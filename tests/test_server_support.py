"""Helpers shared by the server, client and browser tests (no tests of its own here)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import soundfile as sf


def speechlike(seconds: float, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """A deterministic voiced-sounding signal on the int16 grid.

    Syllable-like bursts of a harmonic tone with a moving pitch, plus a little
    noise, and short pauses; on the int16 grid so pcm_s16le, f32le and a
    16-bit WAV all carry exactly the same samples.
    """
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    pitch = 120 + 40 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = np.clip(np.sin(2 * np.pi * 2.5 * t + rng.uniform(0, 6)), 0, None) ** 0.5
    x = 0.25 * voiced * envelope + 0.01 * rng.standard_normal(t.size)
    x = np.clip(x / max(1.0, np.abs(x).max() / 0.9), -1, 1)
    return (np.round(x * 32767) / 32768).astype(np.float32)


def write_wav(path: Path, samples: np.ndarray, rate: int, subtype: str = "PCM_16") -> Path:
    sf.write(path, samples, rate, subtype=subtype)
    return path


@functools.lru_cache(maxsize=4)
def recognizer(bundle: str):
    from asr import load_model

    return load_model(bundle)


def offline_text(bundle: Path, samples: np.ndarray, rate: int) -> str:
    """What offline transcription of the whole signal says: the reference for every stream."""
    return recognizer(str(bundle)).transcribe(samples, rate)


def s16le(samples: np.ndarray) -> bytes:
    return np.round(samples * 32768).clip(-32768, 32767).astype("<i2").tobytes()
