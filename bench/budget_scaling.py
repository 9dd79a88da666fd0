"""How the default recipe's held-out WER falls with its training budget, and what budget
the issue's targets would need at that rate.

Trains a config (--config, training/configs/default.yaml by default; --set overrides) once per --minutes of
training time, --jobs at a time on one thread each, as the recipe runs its two models;
every run's cosine schedule spans its own budget, so each ends at its low learning rate.
Each best bundle is scored greedily on the corpus's held-out splits (cached beside the
run, as publish_model caches them). Per split, WER is fitted as a + b * log2(minutes)
by least squares and the fit is solved for the target. Gains per doubling shrink as a
model nears what it can learn, so a straight line on a log axis is the optimistic
reading: the budget it prints is a lower bound for this model and data.

    python bench/budget_scaling.py --data data/synth --out exp/scaling --minutes 19 38 \\
        --known 75=models/default --set train.seed=1 train.tokenizer=models/default/tokenizer.model

--known M=BUNDLE adds a bundle already trained by this recipe for M minutes (the shipped
model: seed 1, its tokenizer) as a point without training it again. Rerunning resumes:
finished runs and fresh evaluations are reused, a cut-off run continues (--resume).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from training.recipes.publish_model import SPLITS, evaluate_run, training_facts  # noqa: E402

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


def needed_minutes(points: list[tuple[float, float]], target: float) -> float:
    """The budget where the log2-linear fit of (minutes, WER) reaches ``target`` (inf if it
    does not fall)."""
    a, b = fit_line([math.log2(m) for m, _ in points], [w for _, w in points])
    return 2 ** ((target - a) / b) if b < 0 else math.inf


def parse_known(items: list[str]) -> dict[float, Path]:
    known = {}
    for item in items:
        minutes, sep, bundle = item.partition("=")
        if not sep or not (Path(bundle) / "model.safetensors").is_file():
            raise SystemExit(
                f"--known {item}: expected MINUTES=BUNDLE_DIR with a model.safetensors"
            )
        known[float(minutes)] = Path(bundle).resolve()
    return known


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--config", type=Path, default=ROOT / "training" / "configs" / "default.yaml"
    )
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "synth")
    parser.add_argument("--out", type=Path, default=ROOT / "exp" / "scaling")
    parser.add_argument("--minutes", type=float, nargs="*", default=[19, 38, 75])
    parser.add_argument("--known", nargs="*", default=[], help="MINUTES=BUNDLE, not trained")
    parser.add_argument("--set", nargs="*", default=[], help="config overrides for every run")
    parser.add_argument("--jobs", type=int, default=2, help="trainings at once (one thread each)")
    args = parser.parse_args(argv)
    known = parse_known(args.known)
    for split in ("train", "dev", *SPLITS):
        if not (args.data / f"{split}.jsonl").is_file():
            raise SystemExit(
                f"{args.data / split}.jsonl is missing: run training.recipes.synth_corpus"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    train_all(args.config, args.data, args.out, sorted(args.minutes), args.set, args.jobs)
    for minutes, bundle in known.items():
        link = args.out / f"m{minutes:g}" / "best_bundle"
        link.parent.mkdir(exist_ok=True)
        if not link.exists():
            link.symlink_to(bundle)
    budgets = sorted({*args.minutes, *known})
    if len(budgets) < 2:
        raise SystemExit("needs at least two budgets (--minutes and --known together)")
    rows = []
    for minutes in budgets:
        run = args.out / f"m{minutes:g}"
        evals = evaluate_run(run, args.data)
        facts = training_facts(run) if (run / "last.pt").is_file() else None
        rows.append((minutes, facts, {s: evals[s]["wer"]["rate"] for s in SPLITS}))
    print("\n| minutes | steps | epochs | valid loss | " + " | ".join(SPLITS) + " |")
    print("|---|---|---|---|" + "---|" * len(SPLITS))
    for minutes, facts, wers in rows:
        trained = (
            f"{facts['steps']} | {facts['epochs']} | {facts['history'][-1]['valid_loss']:.3f}"
            if facts
            else "(given) | | "
        )
        cells = " | ".join(f"{100 * wers[s]:.2f}%" for s in SPLITS)
        print(f"| {minutes:g} | {trained} | {cells} |")
    print()
    for split in SPLITS:
        points = [(minutes, wers[split]) for minutes, _, wers in rows]
        a, b = fit_line([math.log2(m) for m, _ in points], [w for _, w in points])
        need = needed_minutes(points, TARGETS[split])
        print(
            f"{split}: WER {100 * a:.1f}% {100 * b:+.2f} points per doubling of minutes; "
            f"{100 * TARGETS[split]:.0f}% at {need:,.0f} minutes ({need / 60:,.1f} h) of one core"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
