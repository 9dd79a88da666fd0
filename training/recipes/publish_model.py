"""Publish a trained run as the bundled model, with every figure of its card measured here.

Two cards, chosen by the run's config. The first generation (fbank front end): evaluates
the run and its softmax baseline on both held-out splits (greedy and with the language
model, through the streaming recognizer, exactly as `asr eval`), copies the run's best
bundle to --out, writes ``metrics.json`` and the model card, and ships a small held-out
sample (FLAC + manifest) under tests/data/heldout for the test that checks the bundled
model. The second generation (model.frontend=whisper, issue #17) adds columns, goals,
benchmarks and step times (whisper_publish). What both gather is in gather.py; each card
is rendered from metrics.json alone (first_gen_card, whisper_card).
Evaluations are cached in each run directory, so a rerun after an interruption only does
what is missing.

  python -m training.recipes.publish_model --run exp/monotonic --baseline exp/softmax \\
      --data data/synth --out models/first-gen
  python -m training.recipes.publish_model --run exp/live/monotonic --baseline exp/live/softmax \\
      --data data/live --real DIR --steps exp/live/steps.tsv
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from asr.bundle import load_model
from asr.config import Config
from training.recipes.first_gen_card import write_card
from training.recipes.gather import (
    LM_WEIGHT,
    REPO,
    SPLITS,
    add_lm,
    copy_bundle,
    corpus_facts,
    evaluate_run,
    ship_sample,
    shown,
    training_facts,
)
from training.recipes.synth_corpus import LM_TEXT
from training.recipes.whisper_publish import RECIPE, publish


def build_parser() -> argparse.ArgumentParser:
    """Both generations' options; the run's config chooses the card (model.frontend)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="the monotonic run directory")
    parser.add_argument("--baseline", type=Path, required=True, help="the softmax run directory")
    parser.add_argument("--data", type=Path, required=True, help="corpus with the test manifests")
    parser.add_argument("--out", type=Path, default=REPO / "models" / "default")
    parser.add_argument(
        "--sample",
        type=int,
        default=12,
        help="held-out files per split to ship under tests/data/heldout (0: leave it alone)",
    )
    parser.add_argument("--sample-max-seconds", type=float, default=4.0)
    whisper = parser.add_argument_group("second generation (model.frontend=whisper) only")
    whisper.add_argument(
        "--first-gen",
        type=Path,
        default=REPO / "models" / "first-gen",
        help="the first-generation bundle, a column of the results (left out if absent)",
    )
    whisper.add_argument(
        "--real",
        type=Path,
        help="the directory `python bench/real_speech.py --manifests DIR` wrote (all.jsonl)",
    )
    whisper.add_argument("--steps", type=Path, help="the recipe's steps.tsv (step wall times)")
    whisper.add_argument(
        "--recipe",
        default=RECIPE,
        help="the command that made --run from the corpus (the card's training section names it)",
    )
    whisper.add_argument(
        "--speller",
        type=Path,
        help="a bundle whose streaming speller (its adapters and learnt policy, for --run's "
        "student) the published bundle carries: publishing copies --run's best bundle only",
    )
    whisper.add_argument("--no-rtf", action="store_true", help="skip bench/streaming.py")
    whisper.add_argument("--no-load", action="store_true", help="skip bench/load.py")
    whisper.add_argument(
        "--no-word-latency", action="store_true", help="skip bench/word_latency.py"
    )
    whisper.add_argument("--no-long-stream", action="store_true", help="skip bench/long_stream.py")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = args.run / "best_bundle" / "config.json"
    if not config.is_file():
        parser.error(f"--run {args.run}: no best_bundle/config.json (not a finished training run)")
    if Config.load(config).model.frontend == "whisper":
        return publish(parser, args)
    return publish_first_gen(args)


def publish_first_gen(args: argparse.Namespace) -> int:
    """The first-generation (fbank) card: greedy and LM-fused columns, word-frequency bands."""
    metrics: dict[str, Any] = {}
    for name, run in (("monotonic", args.run), ("softmax", args.baseline)):
        add_lm(run / "best_bundle", args.data)
        metrics[name] = {
            "eval": evaluate_run(run, args.data),
            "eval_lm": evaluate_run(run, args.data, LM_WEIGHT),
            "training": training_facts(run),
        }
    bundle = args.run / "best_bundle"
    copy_bundle(bundle, args.out)
    weights = args.out / "model.safetensors"
    metrics["megabytes"] = weights.stat().st_size / 1e6
    metrics["parameters"] = load_model(args.out).model.num_parameters()
    if args.sample:
        metrics["sample"] = ship_sample(args.data, args.sample, args.sample_max_seconds)
    metrics["corpus"] = corpus_facts(args.data)
    metrics["lm_sentences"] = sum(
        1 for line in (args.data / LM_TEXT).open(encoding="utf-8") if line.strip()
    )
    metrics["publish_command"] = (
        f"python -m training.recipes.publish_model --run {args.run} --baseline {args.baseline} \\\n"
        f"      --data {args.data} --out {shown(args.out)}"
    )
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    write_card(args.out, metrics)
    print(f"published {bundle} -> {args.out}")
    for name in ("monotonic", "softmax"):
        for split in SPLITS:
            print(
                f"  {name:<9} {split:<18} WER {100 * metrics[name]['eval'][split]['wer']['rate']:.2f}%"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
