"""training/recipes/steps.sh, the resumable steps the recipes share: run for real in bash."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
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
    assert not (tmp_path / "steps.tsv.running").exists()

    # -e holds inside a step too: its first failing command ends it, and the recipe
    step = bash("two() { false; echo second; }; timed steps.tsv frames two; echo after", tmp_path)
    assert step.returncode != 0 and "second" not in step.stdout and "after" not in step.stdout
    assert rows(tmp_path / "steps.tsv")[-1][0] == "frames"
    assert not (tmp_path / "steps.tsv.running").exists()


def test_a_step_killed_with_its_session_counts_up_to_its_last_heartbeat(tmp_path: Path) -> None:
    """SIGKILL runs no trap: the next run settles the killed step from its heartbeat file."""
    running = tmp_path / "steps.tsv.running"
    started = int(time.time()) - 3600
    running.write_text(f"everyday supplement\t{started}\n")  # a name with a space
    os.utime(running, (started + 1800, started + 1800))  # last beat half an hour in
    done = bash("timed steps.tsv distillation true", tmp_path)
    assert done.returncode == 0, done.stderr
    (killed, seconds), (name, took) = rows(tmp_path / "steps.tsv")
    assert (killed, seconds) == ("everyday supplement", 1800)
    assert name == "distillation" and took <= 2  # a second boundary may pass under load
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
def side_by_side(
    tmp_path: Path, fail_kind: str = "", step: bool = False
) -> Iterator[tuple[subprocess.Popen, list]]:
    """train_side_by_side with the stand-in trainer, in its own session as a recipe run from
    a terminal is (its process group is what Ctrl-C signals), once both have started; with
    ``step``, as a recipe's timed step that then copies what they made (touches ``copied``).
    Whatever the test found, nothing it started is left running afterwards."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "asr").write_text(TRAINER)
    (stub / "asr").chmod(0o755)
    exp = tmp_path / "exp"
    exp.mkdir()
    script = f"set -euo pipefail; source {STEPS}; train_side_by_side {exp} c.yaml"
    if step:
        script = (
            f"set -euo pipefail; source {STEPS}; "
            f"train() {{ train_side_by_side {exp} c.yaml; touch copied; }}; "
            "timed steps.tsv training train; touch next-step"
        )
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


def test_an_interrupted_training_step_ends_the_recipe_there(tmp_path: Path) -> None:
    """The step's own next command (copying the best checkpoint into a bundle) and the
    recipe's next step never run on an unfinished training; the step's time still counts."""
    with side_by_side(tmp_path, step=True) as (recipe, runs):
        recipe.send_signal(signal.SIGTERM)
        assert finish(recipe, runs) == 143
    assert not (tmp_path / "copied").exists() and not (tmp_path / "next-step").exists()
    assert [name for name, _ in rows(tmp_path / "steps.tsv")] == ["training"]
    assert not (tmp_path / "steps.tsv.running").exists()


def test_a_failed_training_stops_the_other_before_the_recipe_exits(tmp_path: Path) -> None:
    with side_by_side(tmp_path, fail_kind="softmax") as (recipe, runs):
        assert finish(recipe, runs) == 1  # the failure's status, at once, not after the other
        assert events(runs[1])[1:] == ["failed"]
        assert events(runs[0])[1:] == ["interrupted", "saved"]  # stopped as by Ctrl-C, waited


# Stand-ins for `python -m ...` and `asr ...` in training/recipes/real_student.sh: each notes
# its command line in $CALLS and writes what the recipe's next steps read.
STAND_IN = """#!/usr/bin/env python3
import os, sys
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["CALLS"], "a") as f:
    f.write(" ".join([Path(sys.argv[0]).name, *args]) + "\\n")
out = Path(args[args.index("--out") + 1]) if "--out" in args else None
what = args[1] if args[0] in ("-m", "prepare") else args[0]


def write(path, text="x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


if what == "training.recipes.synth_corpus":
    write(out / "train.jsonl")
    write(out / "dev.jsonl")
    hours = float(args[args.index("--hours") + 1])
    write(out / "plan.json", '{\\n "hours": %s,\\n "seed": 5\\n}' % hours)
elif what == "training.recipes.distill_mix":
    write(out / "train_manifests.txt", f"[{out}/real_en.jsonl,{out}/synth-11k/manifest.jsonl]")
elif what in ("pseudo-label", "merge"):
    write(out)
elif what == "distill":
    write(out / "student" / "encoder.safetensors", f"student of {out}")
    write(out / "distill.log", "done: best held-out rel MSE 0.2\\n")
elif what == "blend-students":
    tuned = Path(args[args.index("--tuned") + 1]) / "encoder.safetensors"
    weight = args[args.index("--weight") + 1]
    write(out / "encoder.safetensors", f"blend at {weight} of {tuned.read_text()}")
elif what == "train":
    for name in ("model.safetensors", "cmvn.json"):
        write(out / "best_bundle" / name, f"{name} of {out}")
elif what in ("tune-speller", "train-speller"):
    kind = "adapter" if what == "tune-speller" else "policy"
    write(out / f"speller_{kind}.safetensors", f"{kind} of {out}")
elif out is not None:
    out.mkdir(parents=True, exist_ok=True)
"""


def real_student_recipe(tmp_path: Path, **more: str) -> Callable[[], list[list[str]]]:
    """training/recipes/real_student.sh over stand-ins (``more``: its settings), on a base
    bundle in ``tmp_path/base``: a run of it gives the command lines it ran."""
    stub = tmp_path / "bin"
    stub.mkdir()
    for name in ("python", "asr"):
        (stub / name).write_text(STAND_IN)
        (stub / name).chmod(0o755)
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("x")
    for name in ("whisper_encoder", "speller_adapter", "speller_policy", "model"):
        (base / f"{name}.safetensors").write_text(f"the base's {name}")
    (base / "README.md").write_text("the base's card")
    calls = tmp_path / "calls.txt"
    env = {
        **os.environ,
        "PATH": f"{stub}:/usr/bin:/bin",
        "CALLS": str(calls),
        "DATA": str(tmp_path / "live"),
        "BASE": str(base),
        "MIX": str(tmp_path / "mix"),
        "REAL_AUDIO": str(tmp_path / "real"),
        "EXP": str(tmp_path / "exp"),
        **more,
    }
    recipe = REPO / "training" / "recipes" / "real_student.sh"

    def run() -> list[list[str]]:
        calls.write_text("")
        done = subprocess.run(
            ["bash", str(recipe)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return [line.split() for line in calls.read_text().splitlines()]

    return run


def test_the_real_student_recipe_runs_in_order_keeps_held_out_sentences_out_and_resumes(
    tmp_path: Path,
) -> None:
    data, base = tmp_path / "live", tmp_path / "base"
    for path in (data / "dev.jsonl", data / "test_short.jsonl"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    run = real_student_recipe(tmp_path)
    first = run()
    order = [c[2] if c[1] == "-m" else c[1] for c in first]
    assert order.index("training.recipes.real_audio") < order.index("training.recipes.distill_mix")
    assert order.index("training.recipes.distill_mix") < order.index("distill")
    assert order.index("pseudo-label") < order.index("train")
    # the speller reads the student alone: its adapters, policy and figures come first
    assert order.index("distill") < order.index("blend-students") < order.index("tune-speller")
    assert order.index("tune-speller") < order.index("train-speller")
    (adapters,) = [c for c in first if c[1] == "tune-speller"]
    assert adapters[adapters.index("--numbers") + 1] == "words"  # as the open segment writes
    (policy,) = [c for c in first if c[1] == "train-speller"]
    assert policy[-4:] == ["--agreement", "2", "--patience", "32"]  # patient agreement
    assert order.index("train-speller") < order.index("bench/real_speech.py")
    assert order.index("bench/real_speech.py") < order.index("pseudo-label")
    held = {str(data / "dev.jsonl"), str(data / "test_short.jsonl")}
    draws = [c for c in first if "training.recipes.synth_corpus" in c]
    # the corpus's 12 h first (its train split was missing), then the mix's speech, two dev
    # splits and three supplements
    corpus = draws.pop(0)
    assert first.index(corpus) == 0 and corpus[corpus.index("--out") + 1] == str(data)
    assert corpus[corpus.index("--hours") + 1 :][:3] == ["12", "--seed", "5"]
    assert len(draws) == 6
    # the larger synthetic dev split speaks nothing the layers or the speller learn from, and
    # none of the supplements' everyday text
    (synth_dev,) = [d for d in draws if d[d.index("--out") + 1].endswith("synth-dev")]
    assert {str(data / "train.jsonl"), str(tmp_path / "mix" / "synth" / "train.jsonl")} <= set(
        synth_dev
    )
    assert "everyday" not in " ".join(synth_dev)
    # the speller's synthetic speech leaves a group of voices out for a dev split of theirs,
    # whose sentences nothing else speaks
    (speech,) = [d for d in draws if d[d.index("--out") + 1].endswith("mix/synth")]
    assert speech[speech.index("--unseen-dev-size") + 1] == "300"
    unseen_dev = str(tmp_path / "mix" / "synth" / "dev_unseen_voices.jsonl")
    assert unseen_dev in synth_dev
    for draw in draws:
        assert held <= set(draw[draw.index("--exclude") + 1 :])
    supplements = [d for d in draws if "everyday" in d[d.index("--text") + 1]]
    for draw in supplements[1:]:  # the dev sets that choose are never spoken either
        assert {str(tmp_path / "mix" / "real_dev.jsonl"), unseen_dev} <= set(draw)
    epoch, student = [c for c in first if c[1] == "distill"]
    assert f"distill.init={tmp_path}/exp/epoch/student/encoder.safetensors" in student
    assert f"distill.init={base}/whisper_encoder.safetensors" in epoch
    assert f"distill.train_manifests=[{tmp_path}/mix/real_en.jsonl," in " ".join(student)
    # the LAS layers from the base's weights, their softmax baseline beside them from scratch
    monotonic, softmax = sorted(
        (c for c in first if c[1] == "train"), key=lambda c: "kind=softmax" in " ".join(c)
    )
    assert f"train.init={base}" in monotonic and "train.lr=0.0005" in monotonic
    assert "model.attention.kind=monotonic" in monotonic
    assert not any(a.startswith("train.init=") for a in softmax)
    assert "model.attention.kind=softmax" in softmax
    # they learn the corpus's own sentences too, as the base's layers did
    (layers_set,) = [
        c for c in first if c[1:3] == ["prepare", "merge"] and c[-1].endswith("las/train.jsonl")
    ]
    assert str(data / "train.jsonl") in layers_set
    bundle = tmp_path / "exp" / "bundle"
    # the distilled student blended with the base's, half and half
    (blend,) = [c for c in first if c[1] == "blend-students"]
    assert f"{base}/whisper_encoder.safetensors" in blend
    served = f"blend at 0.5 of student of {tmp_path}/exp/student"
    assert (bundle / "whisper_encoder.safetensors").read_text() == served
    ceiling = next(c for c in first if c[1] == "bench/decoder_ceiling.py")
    assert ceiling[ceiling.index("--model") + 1] == str(bundle)  # as the candidate serves them
    students = ceiling[ceiling.index("--students") + 1 : ceiling.index("--manifest")]
    assert students[1:] == [f"{tmp_path}/exp/student/student", f"{tmp_path}/exp/blend"]
    assert (bundle / "model.safetensors").read_text().startswith("model.safetensors of")
    assert (bundle / "speller_adapter.safetensors").read_text().startswith("adapter of")
    assert (bundle / "speller_policy.safetensors").read_text().startswith("policy of")
    assert not (bundle / "README.md").exists()  # the base's card is not this bundle's
    passes = [c for c in first if c[1] == "bench/real_speech.py"]
    assert len(passes) == 3 and all(c[3:5] == [str(base), str(bundle)] for c in passes)
    for manifest in passes[0][passes[0].index("--manifest") + 1 :]:
        assert not Path(manifest).name.startswith("test_")  # dev sets choose, not test ones
    # the dev splits made as the test splits are (everyday text among them), there already
    made_like_tests = [str(tmp_path / "mix" / d / "dev.jsonl") for d in ("everyday2", "short")]
    assert all(set(made_like_tests) <= set(c) for c in passes)
    assert max(i for i, c in enumerate(first) if "training.recipes.synth_corpus" in c) < next(
        i for i, c in enumerate(first) if c[1] == "bench/real_speech.py"
    )
    assert all(str(tmp_path / "mix" / "synth-dev" / "dev.jsonl") in c for c in passes)
    assert all(unseen_dev in c for c in passes)
    latencies = [c for c in first if c[1] == "bench/word_latency.py"]
    assert len(latencies) == 3
    assert all(
        c[-3:] == [str(tmp_path / "mix" / "synth-dev" / "dev.jsonl"), "--limit", "0"]
        for c in latencies
    )
    figures = {
        str(p.relative_to(tmp_path / "exp" / "dev"))
        for p in (tmp_path / "exp" / "dev").rglob("*.txt")
    }
    assert figures == {
        "early/whisper_latency.txt",
        "early/whisper_pass.txt",
        "lstm_latency.txt",
        "lstm_pass.txt",
        "students.txt",
        "whisper_latency.txt",
        "whisper_pass.txt",
    }
    again_calls = run()
    again = [c[2] if c[1] == "-m" else c[1] for c in again_calls]
    # the corpus's draw again, as planned: it resumes an interrupted draw, whose manifests
    # are written as it goes
    assert [c for c in again_calls if "--out" in c and c[c.index("--out") + 1] == str(data)] == [
        corpus
    ]
    for finished in ("distill", "blend-students", "pseudo-label", "training.recipes.distill_mix"):
        assert finished not in again
    assert "tune-speller" not in again and "train-speller" not in again
    assert "bench/real_speech.py" not in again
    # a distilled student redone after the blend is blended again
    later = time.time() + 5
    os.utime(tmp_path / "exp" / "student" / "student" / "encoder.safetensors", (later, later))
    assert "blend-students" in [c[1] for c in run()]


def test_the_speller_alone_is_learnt_over_the_base_student_and_read_beside_it(
    tmp_path: Path,
) -> None:
    """SPELLER_ONLY=1 on a fresh machine: the corpus's held-out splits drawn alone first, the
    mix's speech, then the speller's adapters and policy over the base's own student, and
    the dev figures of both bundles; no distillation, blend, pseudo-labels or LAS layers."""
    run = real_student_recipe(tmp_path, SPELLER_ONLY="1")
    first = run()
    data, base, mix = tmp_path / "live", tmp_path / "base", tmp_path / "mix"
    draws = [c for c in first if "training.recipes.synth_corpus" in c]
    held_out = draws[0]
    assert held_out[held_out.index("--out") + 1] == str(data)
    assert held_out[held_out.index("--hours") + 1 :][:3] == ["0", "--seed", "5"]
    assert first.index(held_out) == 0 and len(draws) == 4  # and the mix's three
    order = [c[2] if c[1] == "-m" else c[1] for c in first]
    for skipped in ("distill", "blend-students", "pseudo-label", "train", "prepare"):
        assert skipped not in order
    assert order.index("tune-speller") < order.index("train-speller")
    assert order.index("train-speller") < order.index("bench/real_speech.py")
    bundle = tmp_path / "exp" / "bundle"
    assert (bundle / "whisper_encoder.safetensors").read_text() == "the base's whisper_encoder"
    assert (bundle / "model.safetensors").read_text() == "the base's model"
    assert (bundle / "speller_policy.safetensors").read_text().startswith("policy of")
    (dev,) = [c for c in first if c[1] == "bench/real_speech.py"]
    assert dev[3:5] == [str(base), str(bundle)]
    devs = dev[dev.index("--manifest") + 1 : dev.index("--out")]
    assert devs == [
        str(mix / "real_dev.jsonl"),
        str(data / "dev.jsonl"),
        str(mix / "synth-dev" / "dev.jsonl"),
        str(mix / "short-dev" / "train.jsonl"),
        str(mix / "synth" / "dev_unseen_voices.jsonl"),
    ]
    assert len([c for c in first if c[1] == "bench/word_latency.py"]) == 1
    assert (tmp_path / "exp" / "dev" / "whisper_pass.txt").is_file()
    again = {c[2] if c[1] == "-m" else c[1] for c in run()}  # the data recipes resume alone
    assert again == {"training.recipes.real_audio", "training.recipes.synth_corpus"}


@pytest.mark.parametrize("speller_only", ["1", ""])
def test_the_corpus_is_drawn_again_as_planned_and_a_corpus_of_ones_own_is_read_as_it_is(
    tmp_path: Path, speller_only: str
) -> None:
    """A draw begun here is drawn again, which resumes it, with the hours it planned (a
    SPELLER_ONLY run never shrinks a 12 h corpus to its held-out splits); a corpus with no
    plan.json is the user's, never drawn into."""
    data = tmp_path / "live"
    data.mkdir()
    (data / "plan.json").write_text('{\n "hours": 12.0,\n "seed": 5\n}')
    (data / "dev.jsonl").write_text("x")
    (data / "train.jsonl").write_text("x")  # written as the draw went, before its end
    run = real_student_recipe(tmp_path, SPELLER_ONLY=speller_only)
    (draw,) = [c for c in run() if "--out" in c and c[c.index("--out") + 1] == str(data)]
    assert float(draw[draw.index("--hours") + 1]) == 12
    (data / "plan.json").unlink()
    assert not [c for c in run() if "--out" in c and c[c.index("--out") + 1] == str(data)]


@pytest.mark.parametrize(("speller_only", "prime"), [("1", "16"), ("", "16"), ("", "0")])
def test_a_candidates_config_carries_its_prime_and_end_pad(
    tmp_path: Path, speller_only: str, prime: str
) -> None:
    """The candidate bundle's config says its prime (PRIME=N) and its end pad before its
    speller learns over it; a primed whole line also distils the student and trains the LAS
    layers on primed states."""
    first = real_student_recipe(tmp_path, SPELLER_ONLY=speller_only, PRIME=prime)()
    bundle = tmp_path / "exp" / "bundle"
    setting = ["python", "-m", "training.recipes.bundle_config", f"{bundle}.tmp"]
    (call,) = [c for c in first if c[:4] == setting]
    assert call[4:] == [f"model.whisper.prime={prime}", "decode.end_pad_s=0.6"]
    assert first.index(call) < [c[1] for c in first].index("tune-speller")
    learners = [c for c in first if c[1] in ("distill", "train") or "training.cache_frames" in c]
    assert len(learners) == (0 if speller_only else 6)  # 2 epochs, 2 shards of frames, 2 runs
    assert all(f"model.whisper.prime={prime}" in c for c in learners)


def test_bundle_config_writes_checked_settings_into_a_bundle(tmp_path: Path) -> None:
    from asr.config import Config
    from training.recipes.bundle_config import main as bundle_config

    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "config.json").write_text((REPO / "models/default/config.json").read_text())
    before = Config.load(bundle / "config.json")
    assert bundle_config([str(bundle), "model.whisper.prime=32"]) == 0
    after = Config.load(bundle / "config.json")
    assert after.differences(before, ("model", "decode", "train", "distill")) == {
        "model.whisper.prime": (32, 0)
    }
    assert bundle_config([str(bundle), "model.whisper.prime=8"]) == 2  # not whole chunks
    assert bundle_config([str(bundle), "model.whisper.prim=16"]) == 2
    assert Config.load(bundle / "config.json") == after  # a refused setting changes nothing
    with pytest.raises(SystemExit):
        bundle_config([str(tmp_path / "nowhere"), "model.whisper.prime=16"])
