"""Acoustic augmentation of cached log-mel frames, for distillation.

The student hears a changed recording of an utterance while it learns the teacher's states
of the clean one: another vocal tract length, another microphone, a room, noise. The
real speech it will meet comes from people, rooms and microphones that neither the
synthetic corpus nor the games' studio recordings hold, and the teacher, having heard
680,000 hours, already maps them near one another.

Every change keeps the frames' timing, so the teacher's cached states stay the target and
nothing is encoded again. Each works on mel power (the cached frames are Whisper's scaled
log10 mel power, ``(max(log10 P, floor) + 4) / 4``), and the result is scaled and floored
again as the front end does:

- **warp**: vocal tract length, as in VTLP (Jaitly and Hinton, 2013): band k takes the
  power found at its centre frequency divided by alpha, alpha in [0.88, 1.12];
- **colour**: a microphone and its level: a gain of -12 to +6 dB and a smooth random
  curve over the bands (three cosines, up to +-4 dB each);
- **reverb**: a room's late reverberation, as an exponentially decaying smear of power
  over later frames: reverberation time 0.15-0.8 s, direct-to-reverberant ratio 0-15 dB;
- **noise**: stationary noise of random spectral slope, each frame and band's power drawn
  around its level, at 5-30 dB below the utterance's mean power.
"""

from __future__ import annotations

import numpy as np
import torch

from asr.whisper_features import HOP, N_MELS, SAMPLE_RATE, hz_to_mel, mel_edges, scale

WARP = (0.88, 1.12)
GAIN_DB = (-12.0, 6.0)
CURVE_DB = 4.0
RT60_S = (0.15, 0.8)
DRR_DB = (0.0, 15.0)
SNR_DB = (5.0, 30.0)
NOISE_SLOPE = (-3.0, 0.5)  # log10 power from the lowest band to the highest
NOISE_SHAPE = 4.0  # gamma shape of a frame and band's noise power around its level

FRAME_S = HOP / SAMPLE_RATE
_CENTRES = mel_edges()[1:-1]
_CENTRE_MELS = hz_to_mel(_CENTRES)


def warp(log_power: np.ndarray, alpha: float) -> np.ndarray:
    """[T, 80] log10 mel power as if the vocal tract were 1 / alpha as long: band k reads
    the power at centre_k / alpha, interpolated between band centres on the mel scale."""
    source = hz_to_mel(_CENTRES / alpha)
    position = np.interp(source, _CENTRE_MELS, np.arange(N_MELS, dtype=np.float64))
    low = np.floor(position).astype(int).clip(0, N_MELS - 2)
    share = (position - low)[None, :]
    return (1 - share) * log_power[:, low] + share * log_power[:, low + 1]


def colour(log_power: np.ndarray, gain_db: float, curve_db: np.ndarray) -> np.ndarray:
    """A gain and a smooth curve over the bands: ``curve_db`` weights cos(pi m k / 79),
    m = 1, 2, ..."""
    bands = np.arange(N_MELS) / (N_MELS - 1)
    shape = sum(w * np.cos(np.pi * (m + 1) * bands) for m, w in enumerate(curve_db))
    return log_power + (gain_db + shape) / 10.0


def reverb(power: np.ndarray, rt60: float, drr_db: float) -> np.ndarray:
    """[T, 80] mel power plus late reverberation: frame t gets a * d^k of frame t - k's
    power (k >= 1), d the per-frame decay of a 60 dB fall in ``rt60`` seconds and a the
    level at which the reverberant energy is ``drr_db`` below the direct."""
    decay = 10.0 ** (-6.0 * FRAME_S / rt60)
    tail = int(np.ceil(rt60 / FRAME_S))  # 60 dB down: the rest is below the floor
    level = (1 - decay) / (decay * (1 - decay**tail)) * 10.0 ** (-drr_db / 10.0)
    kernel = np.concatenate([[1.0], level * decay ** np.arange(1, tail + 1)])
    n = len(power) + len(kernel) - 1
    size = 1 << int(np.ceil(np.log2(max(n, 1))))
    spectrum = np.fft.rfft(power, size, axis=0) * np.fft.rfft(kernel, size)[:, None]
    return np.maximum(np.fft.irfft(spectrum, size, axis=0)[: len(power)], 0.0)


def noise(power: np.ndarray, snr_db: float, slope: float, rng: np.random.Generator) -> np.ndarray:
    """Mel power plus noise whose mean power, summed over the bands, is ``snr_db`` below the
    utterance's (tilted by ``slope`` decades from the lowest band to the highest)."""
    shape = 10.0 ** (slope * np.arange(N_MELS) / (N_MELS - 1))
    level = power.sum(1).mean() / shape.sum() * 10.0 ** (-snr_db / 10.0)
    draws = rng.gamma(NOISE_SHAPE, 1.0 / NOISE_SHAPE, power.shape)
    return power + level * shape[None, :] * draws


def augment_one(
    frames: np.ndarray, kinds: list[str], floor: float, rng: np.random.Generator
) -> np.ndarray:
    """One utterance's scaled frames [T, 80] with ``kinds`` applied (warp, colour, reverb,
    noise), each with parameters drawn from ``rng``; scaled and floored again. Values at the
    floor only say the power was below it: they count as none, so a gain or a room does not
    lift silence into sound."""
    log_power = frames.astype(np.float64) * 4.0 - 4.0
    silent = (log_power <= floor + 1e-6).astype(np.float64)
    if "warp" in kinds:
        alpha = rng.uniform(*WARP)
        log_power, silent = warp(log_power, alpha), warp(silent, alpha)
    if "colour" in kinds:
        log_power = colour(log_power, rng.uniform(*GAIN_DB), rng.uniform(-1, 1, 3) * CURVE_DB)
    power = np.where(silent > 0.5, 0.0, 10.0**log_power)
    if "reverb" in kinds:
        power = reverb(power, rng.uniform(*RT60_S), rng.uniform(*DRR_DB))
    if "noise" in kinds:
        power = noise(power, rng.uniform(*SNR_DB), rng.uniform(*NOISE_SLOPE), rng)
    log_power = np.log10(np.maximum(power, 1e-30))
    return scale(log_power, floor)


def augment(
    mel: torch.Tensor,
    lengths: torch.Tensor,
    kinds: list[str],
    share: float,
    floor: float,
    rng: np.random.Generator,
) -> torch.Tensor:
    """A padded batch [B, T, 80] with each kind applied to each utterance with probability
    ``share``; padding and the utterances drawn no change are left as they were."""
    out = mel.clone()
    for b, length in enumerate(lengths.tolist()):
        chosen = [kind for kind in kinds if rng.random() < share]
        if chosen and length > 0:
            frames = mel[b, :length].numpy()
            out[b, :length] = torch.from_numpy(augment_one(frames, chosen, floor, rng))
    return out
