"""Publish a streaming speller into the bundled model: carry in the adapters and learnt
policy of a bundle that shares its student, then measure every figure of the card's
section on the streaming pass by Whisper's decoder, and record them.

A speller (``asr tune-speller``'s adapters, ``asr train-speller``'s policy) can be learnt
again over the bundled model's own student without training anything else; publishing the
whole model (``publish_model --speller``) would measure and rewrite everything. Here the
speller's files are checked (each loads, and their student is the bundle's byte for byte),
copied in, and loaded again from there, as serving loads them; then the benchmarks of
``finals_metrics``'s spelled figures run on the bundle, one thread, each kept as its --json
in --work; last ``finals_metrics`` records them in metrics.json and renders the card and
the README's table again. A rerun after an interruption runs only the benchmarks whose
figures are missing or older than the speller carried in.

    python -m training.recipes.publish_speller --speller exp/bundle-words \\
        --real REAL --prototype exp/prototype.safetensors --work exp/publish-speller

REAL is the real recordings' manifests (``bench/real_speech.py --manifests REAL``, outside
the repository); the prototype is the first prototype's policy, a baseline of the card
(``python bench/monotonic_speller.py ... --save exp/prototype.safetensors``, as the card
says).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from asr.speller import ADAPTER_FILE, POLICY_FILE
from training.recipes import finals_metrics
from training.recipes.gather import REPO, shown
from training.recipes.results_table import README
from training.recipes.whisper_publish import bench, carry_speller, check_speller

SPLITS = ["test_seen_voices", "test_unseen_voices", "test_short"]
BASELINE_UTTERANCES = 50
RECORDED = [  # finals_metrics' option, and the benchmarks' figures it records
    ("--spelled-real", ["spelled_real"]),
    ("--spelled-synthetic", ["spelled_synthetic"]),
    ("--spelled-word-latency", ["spelled_latency"]),
    ("--spelled-rtf", ["spelled_rtf"]),
    ("--spelled-capacity", ["spelled_capacity_steady", "spelled_capacity"]),
    ("--spelled-baselines", ["spelled_baselines", "spelled_baselines_real"]),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--speller",
        type=Path,
        required=True,
        help="a bundle whose adapters and learnt policy were learnt over --out's student",
    )
    parser.add_argument("--out", type=Path, default=REPO / "models" / "default")
    parser.add_argument("--data", type=Path, default=REPO / "data" / "live", help="test splits")
    parser.add_argument("--real", type=Path, required=True, help="real recordings' manifests")
    parser.add_argument(
        "--prototype", type=Path, required=True, help="the first prototype's policy (a baseline)"
    )
    parser.add_argument(
        "--work", type=Path, required=True, help="each benchmark's figures (resumable)"
    )
    parser.add_argument("--readme", type=Path, default=README, help="its results table")
    return parser


def check_inputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every input there and fitting, before anything is copied or measured."""
    if args.speller.resolve() == args.out.resolve():
        parser.error(f"--speller {args.speller} is --out: nothing to carry in")
    try:
        check_speller(args.speller, args.out)
    except (OSError, ValueError) as err:
        parser.error(f"--speller {args.speller}: {err}")
    wanted = [args.real / "all.jsonl", *(args.data / f"{split}.jsonl" for split in SPLITS)]
    for path in [*wanted, args.prototype]:
        if not path.is_file():
            parser.error(f"{path}: no such file")


def benchmarks(args: argparse.Namespace) -> dict[str, tuple[str, list[str]]]:
    """Per figure: the benchmark and its arguments, as finals_metrics' docstring gives them,
    on ``--out``."""
    out = shown(args.out)
    splits = [str(args.data / f"{split}.jsonl") for split in SPLITS]
    one_pass = ["--no-whisper", "--no-two-pass", "--streaming-decoder", "whisper"]
    one_pass += ["--beam", "1", "--lm-weight", "0", "--model", out]
    capacity = ["--model", out, "--capacity", "--no-two-pass", "--streaming-decoder", "whisper"]
    policies = [
        "attention:24",
        f"learnt:{out}/{POLICY_FILE}",
        f"prototype:{shown(args.prototype)}",
    ]
    baselines = ["--model", out, "--limit", str(BASELINE_UTTERANCES), "--policy", *policies]
    return {
        "spelled_real": ("real_speech", one_pass),
        "spelled_synthetic": ("real_speech", [*one_pass, "--manifest", *splits]),
        "spelled_latency": (
            "word_latency",
            ["--model", f"{out}:greedy", f"{out}:whisper", "--manifest", splits[0]],
        ),
        "spelled_rtf": ("streaming", ["--model", out, "--streaming-decoder", "whisper"]),
        "spelled_capacity_steady": ("load", [*capacity, "--steady"]),
        "spelled_capacity": ("load", capacity),
        "spelled_baselines": ("streaming_speller", [*baselines, "--manifest", *splits[:2]]),
        "spelled_baselines_real": (
            "streaming_speller",
            [*baselines, "--manifest", str(args.real / "all.jsonl")],
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_inputs(parser, args)
    carry_speller(args.speller, args.out)  # files already there are left as they are
    print(f"{shown(args.out)} serves {shown(args.speller)}'s speller", flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    inputs = [args.out / name for name in (ADAPTER_FILE, POLICY_FILE, "config.json")]
    inputs = [path for path in inputs if path.is_file()]
    for name, (script, bench_argv) in benchmarks(args).items():
        bench(script, bench_argv, args.work / f"{name}.json", inputs)
    recorded = ["--metrics", str(args.out / "metrics.json"), "--readme", str(args.readme)]
    for option, names in RECORDED:
        recorded += [option, *(str(args.work / f"{name}.json") for name in names)]
    return finals_metrics.main(recorded)


if __name__ == "__main__":
    raise SystemExit(main())
