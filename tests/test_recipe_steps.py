"""training/recipes/steps.sh, the resumable steps the recipes share: run for real in bash."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = REPO / "training" / "recipes" / "steps.sh"


def bash(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The script after sourcing steps.sh, with -e as the recipes run."""
    command = f"set -euo pipefail; source {STEPS}; {script}"
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def rows(tsv: Path) -> list[tuple[str, int]]:
    return [
        (name, int(s)) for name, s in (line.split("\t") for line in tsv.read_text().splitlines())
    ]


def test_a_timed_step_adds_its_wall_time_and_keeps_its_status(tmp_path: Path) -> None:
    done = bash("timed steps.tsv corpus sleep 1; timed steps.tsv frames true", tmp_path)
    assert done.returncode == 0, done.stderr
    assert [name for name, _ in rows(tmp_path / "steps.tsv")] == ["corpus", "frames"]
    assert 1 <= rows(tmp_path / "steps.tsv")[0][1] <= 3
    assert "== " in done.stdout and " corpus" in done.stdout
    assert not (tmp_path / "steps.tsv.running").exists()

    failed = bash("timed steps.tsv training false; echo after", tmp_path)
    assert failed.returncode != 0 and "after" not in failed.stdout  # -e stops the recipe
    assert rows(tmp_path / "steps.tsv")[-1][0] == "training"  # its time still counts


def test_a_step_killed_with_its_session_counts_up_to_its_last_heartbeat(tmp_path: Path) -> None:
    """SIGKILL runs no trap: the next run settles the killed step from its heartbeat file."""
    running = tmp_path / "steps.tsv.running"
    started = int(time.time()) - 3600
    running.write_text(f"everyday supplement\t{started}\n")  # a name with a space
    os.utime(running, (started + 1800, started + 1800))  # last beat half an hour in
    done = bash("timed steps.tsv distillation true", tmp_path)
    assert done.returncode == 0, done.stderr
    assert rows(tmp_path / "steps.tsv") == [("everyday supplement", 1800), ("distillation", 0)]
    assert not running.exists()


def test_a_run_resumes_only_from_a_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    assert bash(f"resume_flag {run}", tmp_path).stdout == ""
    (run / "last.pt").write_bytes(b"")
    assert bash(f"resume_flag {run}", tmp_path).stdout.strip() == "--resume"


def test_a_finished_distillation_is_not_run_again(tmp_path: Path) -> None:
    student = tmp_path / "student"
    student.mkdir()
    (student / "distill.log").write_text("step 10: rel MSE 0.2\ndone: best held-out rel MSE 0.2\n")
    # asr is not on this PATH: reaching the command would fail the script
    done = bash(f"PATH=/usr/bin:/bin; distill_student {student} data/none; echo skipped", tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "skipped", done.stderr


def test_init_starts_each_run_from_its_bundle_at_init_lr_and_a_baseline_without_from_scratch(
    tmp_path: Path,
) -> None:
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "asr").write_text('#!/bin/bash\necho "$@"\n')  # prints what it was asked to do
    (stub / "asr").chmod(0o755)
    path = f"PATH={stub}:/usr/bin:/bin"
    cases = (  # INIT, BASELINE_INIT, INIT_LR; the monotonic run's and the baseline's settings
        ("", "", "", [], []),
        ("models/default", "", "", ["train.init=models/default"], []),
        (
            "models/default",
            "",
            "0.0005",
            ["train.init=models/default", "train.lr=0.0005"],
            [],
        ),
        (
            "models/default",
            "exp/softmax/best_bundle",
            "0.0005",
            ["train.init=models/default", "train.lr=0.0005"],
            ["train.init=exp/softmax/best_bundle", "train.lr=0.0005"],
        ),
    )
    for number, (init, baseline, lr, expected, expected_baseline) in enumerate(cases):
        exp = tmp_path / f"exp{number}"
        exp.mkdir()
        settings = f"INIT={init} BASELINE_INIT={baseline} INIT_LR={lr}"
        done = bash(f"{path} {settings} train_side_by_side {exp} c.yaml a=1", tmp_path)
        assert done.returncode == 0, done.stderr
        monotonic = (exp / "monotonic.log").read_text().split()
        softmax = (exp / "softmax.log").read_text().split()
        assert [w for w in monotonic if w.startswith(("train.init", "train.lr"))] == expected
        assert [w for w in softmax if w.startswith(("train.init", "train.lr"))] == expected_baseline
        assert "a=1" in monotonic and "model.attention.kind=softmax" in softmax
