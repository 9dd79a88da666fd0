"""training/recipes/steps.sh, the resumable steps the recipes share: run for real in bash."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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


# A stand-in for `asr train`: notes what happens to it in <out>/events, takes half a second
# to "checkpoint" after Ctrl-C (a second SIGINT would cut that short) and fails at once
# when FAIL_KIND names its attention kind.
TRAINER = """#!/usr/bin/env python3
import os, signal, sys, time
from pathlib import Path

args = sys.argv[1:]
kind = next(a.split("=", 1)[1] for a in args if a.startswith("model.attention.kind="))
out = Path(args[args.index("--out") + 1])
out.mkdir(parents=True, exist_ok=True)


def note(event):
    with open(out / "events", "a") as f:
        f.write(event + "\\n")


def terminated(*_):
    note("terminated")
    sys.exit(143)


signal.signal(signal.SIGTERM, terminated)
catches = signal.getsignal(signal.SIGINT) is signal.default_int_handler
note(f"started {os.getpid()} {'catches' if catches else 'ignores'} SIGINT")
try:
    if os.environ.get("FAIL_KIND") == kind:
        note("failed")
        sys.exit(1)
    time.sleep(30)
    note("finished")
except KeyboardInterrupt:
    note("interrupted")
    time.sleep(0.5)
    note("saved")
    sys.exit(130)
"""


def events(run: Path) -> list[str]:
    path = run / "events"
    return path.read_text().splitlines() if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def side_by_side(tmp_path: Path, fail_kind: str = "") -> Iterator[tuple[subprocess.Popen, list]]:
    """train_side_by_side with the stand-in trainer, in its own session as a recipe run from
    a terminal is (its process group is what Ctrl-C signals), once both have started.
    Whatever the test found, nothing it started is left running afterwards."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "asr").write_text(TRAINER)
    (stub / "asr").chmod(0o755)
    exp = tmp_path / "exp"
    exp.mkdir()
    script = f"set -euo pipefail; source {STEPS}; train_side_by_side {exp} c.yaml"
    env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "FAIL_KIND": fail_kind}
    recipe = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, start_new_session=True)
    runs = [exp / "monotonic", exp / "softmax"]
    try:
        deadline = time.monotonic() + 20
        while not all(events(run) for run in runs) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield recipe, runs
    finally:
        if recipe.poll() is None:
            recipe.kill()
            recipe.wait()
        for pid in trainer_pids(runs):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def trainer_pids(runs: list[Path]) -> list[int]:
    return [int(events(run)[0].split()[1]) for run in runs if events(run)]


def finish(recipe: subprocess.Popen, runs: list[Path]) -> int:
    """The recipe's exit status, once it ended with no trainer left running."""
    try:
        code = recipe.wait(timeout=10)
    except subprocess.TimeoutExpired:
        raise AssertionError("the recipe was still waiting") from None
    orphans = [pid for pid in trainer_pids(runs) if alive(pid)]
    assert not orphans, f"trainers left running: {orphans}"
    return code


@pytest.mark.parametrize(
    ("how", "status", "last"),
    [("ctrl-c", 130, ["interrupted", "saved"]), ("term", 143, ["terminated"])],
)
def test_side_by_side_training_passes_ctrl_c_and_term_on_and_waits(
    tmp_path: Path, how: str, status: int, last: list[str]
) -> None:
    """Ctrl-C (SIGINT to the recipe's process group) reaches each trainer once, and the
    recipe ends after they have; so does a TERM sent to the recipe alone."""
    with side_by_side(tmp_path) as (recipe, runs):
        assert all(" catches SIGINT" in events(run)[0] for run in runs), [events(r) for r in runs]
        if how == "ctrl-c":
            os.killpg(recipe.pid, signal.SIGINT)
        else:
            recipe.send_signal(signal.SIGTERM)
        assert finish(recipe, runs) == status
        assert [events(run)[1:] for run in runs] == [last, last]


def test_a_failed_training_stops_the_other_before_the_recipe_exits(tmp_path: Path) -> None:
    with side_by_side(tmp_path, fail_kind="softmax") as (recipe, runs):
        assert finish(recipe, runs) == 1  # the failure's status, at once, not after the other
        assert events(runs[1])[1:] == ["failed"]
        assert events(runs[0])[1:] == ["interrupted", "saved"]  # stopped as by Ctrl-C, waited
