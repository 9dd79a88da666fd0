"""bench/frontend.py on real audio: every variant's frames, latency and RTF, and a probe that
really trains (a few epochs on espeak sentences) and scores CER."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from asr.audio import read_audio, resample
from tests.conftest import load_bench, speech_files

frontend = load_bench("frontend")


def test_variants_latency_and_real_time_factors(speech_dir: Path) -> None:
    samples, rate = read_audio(speech_files(speech_dir)[0][0])
    audio = [resample(samples, rate, 16000)]
    floats = {s: frontend.Variant(s) for s in ("fbank", "teacher", "masked:4")}
    assert floats["fbank"].latency_ms == 25.0
    assert floats["teacher"].latency_ms == float("inf")
    assert floats["masked:4"].latency_ms == 4 * 20 + 12.5
    frames = floats["masked:4"].frames(audio[0])
    assert frames.shape == ((len(audio[0]) // 160 + 1) // 2, 512)
    # the probe's frames (one masked pass) are the ones the RTF's stream makes, but rounding
    assert np.abs(floats["masked:4"].served(audio[0]) - frames).max() < 2e-3
    rtf = frontend.real_time_factors(floats, audio, repeats=1)
    assert all(rtf[s][0] > 0 for s in floats) and np.isnan(rtf["fbank"][1])
    assert rtf["masked:4"][1] > 0  # int8


def test_probe_learns_and_scores(speech_dir: Path) -> None:
    files = speech_files(speech_dir)[:8]
    fbank = frontend.Variant("fbank")
    feats = []
    for wav, _ in files:
        samples, rate = read_audio(wav)
        feats.append(torch.from_numpy(fbank.frames(resample(samples, rate, 16000))))
    texts = [text for _, text in files]
    probe, losses = frontend.train_probe(feats, texts, 0.01, epochs=15)
    assert losses[-1] < 0.7 * losses[0]  # the CTC loss falls
    # references are scored as the probe's alphabet sees them: case and punctuation aside
    shouted = frontend.probe_cer(probe, feats[:2], [t.upper() + "!" for t in texts[:2]])
    assert shouted == frontend.probe_cer(probe, feats[:2], texts[:2]) > 0
