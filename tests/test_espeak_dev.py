"""bench/experiments/espeak_dev.py: a dev split spoken by espeak-ng variants the corpus
neither trains on nor tests with, over given sentences; the same seed gives the same split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf

from tests.conftest import load_bench
from training.recipes.engines import ESPEAK_ACCENTS


def test_a_split_in_unused_variants_is_made_again_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    probe = load_bench("experiments/espeak_dev")
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("one two", "good night")))
    texts = ("the cat sat", "red door", "a blue kite", "seven")
    second.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    argv = ["--manifest", str(first), str(second), "--limit", "0", "2"]
    assert probe.main([*argv, "--out", str(tmp_path / "x")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "x" / "dev.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows[:2]] == ["one two", "good night"]  # all, in order
    assert len(rows) == 4 and {r["text"] for r in rows[2:]} < set(texts)  # a draw of two
    for row in rows:
        accent, variant = row["voice"].split("+")
        assert accent in ESPEAK_ACCENTS and variant in probe.UNUSED
        samples, rate = sf.read(tmp_path / "x" / row["audio"])
        assert rate == 16000 and abs(len(samples) / rate - row["duration"]) < 1e-3
        assert row["duration"] > 0.2
    assert probe.main([*argv, "--out", str(tmp_path / "y")]) == 0  # the same seed: the same
    assert (tmp_path / "y" / "dev.jsonl").read_text() == (tmp_path / "x" / "dev.jsonl").read_text()
    with pytest.raises(SystemExit):
        probe.main(["--manifest", str(first), "--limit", "0", "1", "--out", str(tmp_path / "z")])
    assert "one count of at least 0 per --manifest" in capsys.readouterr().err
