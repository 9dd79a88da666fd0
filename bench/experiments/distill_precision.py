"""Distillation in float32 against bfloat16 autocast: time per step and where the student ends.

Both runs are ``asr distill`` itself (``training.distill.Distiller``) from the same starting
student over the same batches in the same order for ``--steps`` steps, one after the
other in this process; each is then measured on the same held-out audio in float32 (the
validation never runs under autocast). It prints the median wall time of a step (each
step timed around ``Distiller._step``), the held-out relative squared error before and
after, and the ratio of the step times.

    python bench/experiments/distill_precision.py --steps 40 distill.init=models/default/whisper_encoder.safetensors \\
        "distill.train_manifests=[data/live/train_long.jsonl]" distill.valid_manifest=data/live/dev_long.jsonl \\
        distill.warmup_steps=5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from asr.config import Config  # noqa: E402
from training.distill import Distiller  # noqa: E402

PRECISIONS = ("float32", "bfloat16")


class TimedDistiller(Distiller):
    """A Distiller that keeps the wall time of each step."""

    def __init__(self, config: Config, out: Path) -> None:
        super().__init__(config, out)
        self.step_seconds: list[float] = []

    def _step(self, items, state, seconds):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        loss = super()._step(items, state, seconds)
        self.step_seconds.append(time.perf_counter() - started)
        return loss


def run(config: Config, out: Path) -> dict[str, float]:
    distiller = TimedDistiller(config, out)
    distiller.fit()
    history = torch.load(out / "last.pt", weights_only=False)["history"]
    return {
        "steps": len(distiller.step_seconds),
        "step_s": statistics.median(distiller.step_seconds),
        "start": history[0]["rel_mse"],
        "end": history[-1]["rel_mse"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "training/configs/distill.yaml")
    parser.add_argument("--steps", type=int, default=40, help="steps of each run")
    parser.add_argument("--out", type=Path, help="keep the runs here (default: a temporary dir)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("overrides", nargs="*", help="section.key=value settings, as for distill")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        rows = {}
        for precision in PRECISIONS:
            settings = [
                *args.overrides,
                f"distill.precision={precision}",
                f"distill.max_steps={args.steps}",
                "distill.valid_every=1000000000",
                "distill.checkpoint_every=1000000000",
            ]
            rows[precision] = run(Config.load(args.config, settings), out / precision)
    print("| precision | steps | median step | held-out rel MSE: start | end |")
    print("|---|---|---|---|---|")
    for precision, row in rows.items():
        print(
            f"| {precision} | {row['steps']} | {row['step_s']:.2f} s | {row['start']:.4f} "
            f"| {row['end']:.4f} |"
        )
    ratio = rows["bfloat16"]["step_s"] / rows["float32"]["step_s"]
    print(f"bfloat16 / float32 step time: {ratio:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "step_time_ratio": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
