"""bench/experiments/teacher_reading.py: Whisper's reading of a clip from its own states
alone beside its reading in the finals' window, scored against what was said."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_bench
from tests.test_bundled_model import HELDOUT, MODEL


def test_it_scores_both_readings_against_what_was_said(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Two short held-out clips: "flat seven o", read right both ways, and "nineteen eighty
    three", which its own states read as a nine-word sentence (3 substitutions and 6
    insertions over the 6 words said) and the 10 s window reads right."""
    probe = load_bench("experiments/teacher_reading")
    manifest = tmp_path / "short.jsonl"
    lines = (HELDOUT / "test_short.jsonl").read_text().splitlines()[:2]
    manifest.write_text("\n".join(lines).replace('"test_short/', f'"{HELDOUT}/test_short/') + "\n")
    code = probe.main(
        ["--model", str(MODEL), "--manifest", str(manifest), "--cache", str(tmp_path / "c")]
        + ["--windows", "10"]
    )
    assert code == 0
    out, err = capsys.readouterr()
    rows = [line for line in out.splitlines() if line.startswith("| short |")]
    assert rows == ["| short | 1-3 | 2 | 150.0% | 0.0% |", "| short | all | 2 | 150.0% | 0.0% |"]
    assert "'nineteen eighty three' -> clip alone: \"i'm going to be" in err


def test_a_window_of_zero_is_refused_for_the_clip_alone_is_always_read(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    probe = load_bench("experiments/teacher_reading")
    with pytest.raises(SystemExit) as exit_:
        probe.main(
            ["--manifest", str(tmp_path / "m.jsonl"), "--cache", str(tmp_path)]
            + ["--windows", "10", "0"]
        )
    assert exit_.value.code == 2
    assert "--windows must each be above 0 s, got [10.0, 0.0]" in capsys.readouterr().err
