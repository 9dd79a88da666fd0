"""training.band_limit: a chosen share of utterances loses what lies above the new
Nyquist frequency and keeps what lies below; the manifest lists every utterance once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile

from training.band_limit import SAMPLE_RATE, band_limited, main


def tone(hz: float, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return np.sin(2 * np.pi * hz * t).astype(np.float32)


def power_at(samples: np.ndarray, hz: float) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples)))) ** 2
    freqs = np.fft.rfftfreq(len(samples), 1 / SAMPLE_RATE)
    return float(spectrum[np.abs(freqs - hz) < 20].sum())


def test_what_lies_above_the_new_nyquist_frequency_is_gone() -> None:
    mixed = 0.4 * tone(1000) + 0.4 * tone(7000)
    limited = band_limited(mixed, 11025)
    assert len(limited) == len(mixed)
    assert power_at(limited, 7000) < 1e-4 * power_at(mixed, 7000)
    assert abs(power_at(limited, 1000) / power_at(mixed, 1000) - 1) < 0.01


def test_a_share_is_limited_and_a_rerun_writes_nothing(tmp_path: Path) -> None:
    rows = []
    for i in range(20):
        wav = tmp_path / f"u{i}.wav"
        soundfile.write(wav, 0.4 * tone(1000) + 0.4 * tone(7000), SAMPLE_RATE)
        rows.append({"id": f"u{i}", "audio": str(wav), "text": "", "duration": 1.0})
    manifest = tmp_path / "in.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["--manifest", str(manifest), "--out", str(out), "--share", "0.5"]) == 0
    written = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [r["id"] for r in written] == [r["id"] for r in rows]
    limited = [r for r in written if r.get("band_limit") == 11025]
    assert 4 <= len(limited) <= 16
    for row in limited:
        samples, rate = soundfile.read(out / row["audio"], dtype="float32")
        assert rate == SAMPLE_RATE and power_at(samples, 7000) < 1e-3 * power_at(samples, 1000)
    for row in written:
        if row not in limited:
            assert row["audio"] == str(tmp_path / f"{row['id']}.wav")
    stamps = {p: p.stat().st_mtime_ns for p in (out / "audio").iterdir()}
    assert main(["--manifest", str(manifest), "--out", str(out), "--share", "0.5"]) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "audio").iterdir()} == stamps
