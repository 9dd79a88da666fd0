"""bench/word_latency.py: when each word settles in a real streaming session of the bundled
model, and the comparison of two models over a manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile

from asr.bundle import load_model
from tests.conftest import load_bench

REPO = Path(__file__).resolve().parents[1]
HELDOUT = REPO / "tests" / "data" / "heldout"
MODEL = REPO / "models" / "default"


def test_words_settle_while_the_audio_still_streams() -> None:
    bench = load_bench("word_latency")
    recognizer = load_model(MODEL)
    rows = [
        json.loads(line) for line in (HELDOUT / "test_seen_voices.jsonl").read_text().splitlines()
    ]
    checked = 0
    for row in rows:
        samples, rate = soundfile.read(HELDOUT / row["audio"], dtype="float32")
        words, times = bench.shown_times(recognizer, samples, rate, rate // 50)
        assert words == recognizer.transcribe(samples, rate).split()
        duration = len(samples) / rate
        assert all(0 < t <= duration for t in times)
        if len(words) >= 3:  # a word followed by two more is shown before the audio ends
            assert times[0] < duration
            checked += 1
    assert checked >= 3


def test_a_model_against_itself_shows_every_word_at_the_same_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load_bench("word_latency")
    manifest = HELDOUT / "test_seen_voices.jsonl"
    args = ["--model", str(MODEL), "--baseline", str(MODEL), "--manifest", str(manifest)]
    assert bench.main([*args, "--limit", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 utterances" in out
    assert "median +0 ms, mean +0 ms" in out
    with pytest.raises(SystemExit):
        bench.main([*args, "--chunk-ms", "0"])
