"""How the default recipe's held-out WER falls with its training compute, and how much
compute the issue's targets would need at that rate.

Trains a config (--config, training/configs/default.yaml by default; --set overrides)
once per --minutes of training time, --jobs at a time on one thread each, as the recipe
runs its two models; every run's cosine schedule spans its own budget, so each ends at its
low learning rate. Each best bundle is scored greedily on the corpus's held-out splits
(cached beside the run, as publish_model caches them). Compute is counted in training
steps (batches of train.max_batch_seconds of audio), not minutes: machines of the same
kind differ (the shipped model made 258 steps a minute; a later machine, 129 to 145). Per
split, WER over the --fit largest runs is fitted as a + b * log2(steps) by least squares
and solved for the target, and the steps are turned into hours at the rate measured here.
The largest runs give the slope where the model is now: small budgets can stop before
greedy decoding emits anything (WER 100%), which would steepen the line. Gains per
doubling shrink as a model nears what it can learn, so even that slope is the optimistic
reading: the compute it prints is a lower bound for this model and data.

    python bench/experiments/budget_scaling.py --data data/synth --out exp/scaling --minutes 19 38 \\
        --known models/first-gen --set train.seed=1 train.tokenizer=models/first-gen/tokenizer.model

--known BUNDLE adds a published bundle (its metrics.json gives its steps; the shipped one
was trained by this recipe with seed 1 and that tokenizer) as a point without training
it again. Rerunning resumes: finished runs and fresh evaluations are reused, and a
cut-off run continues (--resume).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from training.recipes.gather import SPLITS, evaluate_run, training_facts  # noqa: E402

TARGETS = {"test_seen_voices": 0.10, "test_unseen_voices": 0.20}  # issue #5


def train_command(
    config: Path, data: Path, run: Path, minutes: float, overrides: list[str]
) -> list[str]:
    """The recipe's `asr train` line for one budget (with --resume when the run has begun)."""
    command = [
        sys.executable, "-m", "asr.cli", "train", "--config", str(config),
        f"train.train_manifest={data / 'train.jsonl'}",
        f"train.valid_manifest={data / 'dev.jsonl'}",
        f"train.max_minutes={minutes:g}", "train.threads=1", *overrides, "--out", str(run),
    ]  # fmt: skip
    return command + (["--resume"] if (run / "last.pt").is_file() else [])


def finished(run: Path, minutes: float) -> bool:
    """Whether the run has used its whole budget (its checkpoint's training clock)."""
    return (run / "last.pt").is_file() and training_facts(run)["minutes"] >= minutes - 0.05


def train_all(
    config: Path, data: Path, out: Path, budgets: list[float], overrides: list[str], jobs: int
) -> None:
    """Run the unfinished budgets, at most ``jobs`` at once; each logs to OUT/m<M>.log."""
    waiting = [m for m in budgets if not finished(out / f"m{m:g}", m)]
    running: dict[float, subprocess.Popen[bytes]] = {}
    while waiting or running:
        while waiting and len(running) < jobs:
            minutes = waiting.pop(0)
            run, log = out / f"m{minutes:g}", out / f"m{minutes:g}.log"
            print(f"training {minutes:g} minutes -> {run} (log: {log})", flush=True)
            with log.open("ab") as sink:
                running[minutes] = subprocess.Popen(
                    train_command(config, data, run, minutes, overrides), stdout=sink, stderr=sink
                )
        time.sleep(5)
        for minutes, process in list(running.items()):
            if process.poll() is None:
                continue
            del running[minutes]
            if process.returncode:
                raise RuntimeError(
                    f"training {minutes:g} minutes failed: see {out}/m{minutes:g}.log"
                )
            print(f"trained {minutes:g} minutes", flush=True)


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares a, b of y = a + b * x."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def log2_fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """a, b of WER = a + b * log2(steps), fitted to (steps, WER) points."""
    return fit_line([math.log2(n) for n, _ in points], [w for _, w in points])


def needed_steps(a: float, b: float, target: float) -> float:
    """The training steps where the fitted line reaches ``target`` (inf if WER does not fall
    with steps)."""
    return 2 ** ((target - a) / b) if b < 0 else math.inf


def known_facts(bundle: Path) -> dict[str, Any]:
    """Steps, epochs and minutes of a published bundle (its metrics.json, publish_model's)."""
    metrics = bundle / "metrics.json"
    if not (bundle / "model.safetensors").is_file() or not metrics.is_file():
        raise SystemExit(
            f"--known {bundle}: expected a published bundle (model.safetensors, metrics.json)"
        )
    return json.loads(metrics.read_text())["monotonic"]["training"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--config", type=Path, default=ROOT / "training" / "configs" / "default.yaml"
    )
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "synth")
    parser.add_argument("--out", type=Path, default=ROOT / "exp" / "scaling")
    parser.add_argument("--minutes", type=float, nargs="*", default=[19, 38, 75])
    parser.add_argument(
        "--known", type=Path, nargs="*", default=[], help="published bundles, not trained again"
    )
    parser.add_argument("--set", nargs="*", default=[], help="config overrides for every run")
    parser.add_argument("--jobs", type=int, default=2, help="trainings at once (one thread each)")
    parser.add_argument("--fit", type=int, default=2, help="fit the line to this many largest runs")
    args = parser.parse_args(argv)
    known = {bundle.resolve(): known_facts(bundle) for bundle in args.known}
    if args.fit < 2:
        raise SystemExit("--fit: a line needs two runs or more")
    if not args.minutes or len(args.minutes) + len(known) < 2:
        raise SystemExit(
            "needs two points or more, one of them trained here (--minutes) for this machine's rate"
        )
    for split in ("train", "dev", *SPLITS):
        if not (args.data / f"{split}.jsonl").is_file():
            raise SystemExit(
                f"{args.data / split}.jsonl is missing: run training.recipes.synth_corpus"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    train_all(args.config, args.data, args.out, sorted(args.minutes), args.set, args.jobs)
    rows = []  # (label, run dir, training facts)
    for minutes in sorted(args.minutes):
        run = args.out / f"m{minutes:g}"
        rows.append((f"{minutes:g} min here", run, training_facts(run)))
    here = statistics.median(facts["steps"] / facts["minutes"] for _, _, facts in rows)
    for bundle, facts in known.items():
        run = args.out / f"known-{bundle.parent.name}-{bundle.name}"  # exp/a/best_bundle too
        run.mkdir(exist_ok=True)
        if not (run / "best_bundle").exists():
            (run / "best_bundle").symlink_to(bundle)
        rows.append((f"{facts['minutes']:g} min, {bundle.parent.name}/{bundle.name}", run, facts))
    rows.sort(key=lambda row: row[2]["steps"])
    wers = [
        {s: e["wer"]["rate"] for s, e in evaluate_run(run, args.data).items()} for _, run, _ in rows
    ]
    print("\n| run | steps | epochs | steps per minute | " + " | ".join(SPLITS) + " |")
    print("|---|---|---|---|" + "---|" * len(SPLITS))
    for (label, _, facts), wer in zip(rows, wers):
        cells = " | ".join(f"{100 * wer[s]:.2f}%" for s in SPLITS)
        rate = facts["steps"] / facts["minutes"]
        print(f"| {label} | {facts['steps']} | {facts['epochs']} | {rate:.0f} | {cells} |")
    print(f"\nthis machine: {here:.0f} steps per training minute (one thread, runs side by side)")
    fitted = list(zip(rows, wers))[-args.fit :]
    print(f"fitted to the {len(fitted)} largest runs: {', '.join(row[0] for row, _ in fitted)}")
    for split in SPLITS:
        a, b = log2_fit([(facts["steps"], wer[split]) for (_, _, facts), wer in fitted])
        need = needed_steps(a, b, TARGETS[split])
        print(
            f"{split}: {100 * b:+.2f} WER points per doubling of steps; "
            f"{100 * TARGETS[split]:.0f}% at {need:,.0f} steps, {need / here / 60:,.0f} h of "
            "training on this machine"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
