"""The distillation's acoustic changes against their definitions: each keeps the frames'
timing, does what its parameters say on mel power, and leaves padding alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asr.whisper_features import N_MELS, log_mel
from training.augment import FRAME_S, augment, augment_one, colour, noise, reverb, warp

FLOOR = -7.0


def _tone(hz: float, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def test_warp_moves_a_tone_to_the_band_of_its_scaled_frequency() -> None:
    """A 1 kHz tone's peak band, warped by alpha, is the band of alpha kHz, as a 1 kHz * alpha
    tone's own front end puts it; alpha 1 changes nothing."""
    frames = log_mel(_tone(1000.0), FLOOR).astype(np.float64) * 4 - 4
    assert np.array_equal(warp(frames, 1.0), frames)
    for alpha in (0.88, 1.12):
        warped = warp(frames, alpha)
        real = log_mel(_tone(1000.0 * alpha), FLOOR).astype(np.float64) * 4 - 4
        assert warped.shape == frames.shape
        assert abs(int(warped[50].argmax()) - int(real[50].argmax())) <= 1
        assert warped[50].argmax() != frames[50].argmax()


def test_colour_adds_the_gain_and_curve_in_decibels() -> None:
    frames = np.zeros((5, N_MELS))
    assert np.allclose(colour(frames, -10.0, np.zeros(3)), -1.0)  # -10 dB: a decade of power
    curved = colour(frames, 0.0, np.array([4.0, 0.0, 0.0]))
    assert curved[0, 0] == pytest.approx(0.4) and curved[0, -1] == pytest.approx(-0.4)


def test_reverb_decays_at_its_rate_and_holds_its_direct_to_reverberant_ratio() -> None:
    power = np.zeros((200, N_MELS))
    power[10] = 1.0
    rt60, drr = 0.5, 6.0
    out = reverb(power, rt60, drr)
    assert np.allclose(out[:10], 0.0, atol=1e-12) and out[10, 0] == pytest.approx(1.0)
    per_frame = out[12, 0] / out[11, 0]
    assert per_frame == pytest.approx(10.0 ** (-6.0 * FRAME_S / rt60), rel=1e-6)
    reverberant = out[11:, 0].sum()
    assert 10 * np.log10(1.0 / reverberant) == pytest.approx(drr, abs=1e-3)
    # the tail ends rt60 after the sound, 60 dB down
    assert np.abs(out[10 + round(rt60 / FRAME_S) + 1 :]).max() < 1e-12


def test_noise_sits_its_snr_below_the_speech() -> None:
    rng = np.random.default_rng(0)
    power = np.random.default_rng(1).uniform(0.5, 1.5, (3000, N_MELS))
    for snr in (5.0, 20.0):
        added = noise(power, snr, -1.0, rng) - power
        assert added.min() > 0
        ratio = 10 * np.log10(power.sum(1).mean() / added.sum(1).mean())
        assert ratio == pytest.approx(snr, abs=0.1)
        assert added[:, 0].mean() / added[:, -1].mean() == pytest.approx(10.0, rel=0.05)


def test_a_batch_keeps_its_padding_floor_and_draws() -> None:
    mels = [log_mel(_tone(hz, s), FLOOR) for hz, s in ((440.0, 1.0), (900.0, 0.6))]
    lengths = torch.tensor([len(m) for m in mels])
    batch = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(m) for m in mels], batch_first=True)
    kinds = ["warp", "colour", "reverb", "noise"]
    out = augment(batch, lengths, kinds, 1.0, FLOOR, np.random.default_rng(3))
    again = augment(batch, lengths, kinds, 1.0, FLOOR, np.random.default_rng(3))
    assert torch.equal(out, again)  # a resumed run draws the same changes
    assert out.shape == batch.shape and not torch.equal(out, batch)
    assert torch.equal(out[1, lengths[1] :], batch[1, lengths[1] :])  # padding untouched
    assert float(out[:, : lengths[1]].min()) >= (FLOOR + 4) / 4 - 1e-6
    assert torch.equal(augment(batch, lengths, kinds, 0.0, FLOOR, np.random.default_rng(3)), batch)


def test_silence_stays_at_the_floor_unless_noise_is_added() -> None:
    silence = np.full((50, N_MELS), (FLOOR + 4) / 4, dtype=np.float32)
    rng = np.random.default_rng(0)
    for kinds in (["warp"], ["reverb"], ["warp", "reverb"]):
        assert np.allclose(augment_one(silence, kinds, FLOOR, rng), silence)
    speech = log_mel(_tone(300.0), FLOOR)
    speech[40:60] = (FLOOR + 4) / 4  # a pause
    noisy = augment_one(speech, ["noise"], FLOOR, rng)
    assert noisy[40:60].min() > (FLOOR + 4) / 4  # the noise fills the pause
