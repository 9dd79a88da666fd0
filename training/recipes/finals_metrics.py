"""Record the figures of Whisper's decoder in the bundled model's metrics.json (two-pass
finals, and the streaming pass it spells under the learnt policy), then render its card
and the README's results table from it again.

Each figure comes from a benchmark's --json output (run on this machine, one thread):

    python bench/real_speech.py --compare-finals --pocketsphinx --beam 1 --lm-weight 0 \\
        --json real.json
    python bench/real_speech.py --compare-finals --pocketsphinx --beam 1 --lm-weight 0 \\
        --json synthetic.json \\
        --manifest data/live/test_seen_voices.jsonl data/live/test_unseen_voices.jsonl \\
        data/live/test_short.jsonl
    python bench/final_latency.py --json latency.json
    python bench/load.py --capacity --two-pass --steady --json capacity_two_pass_steady.json
    python bench/load.py --capacity --no-two-pass --steady --json capacity_one_pass_steady.json
    python bench/load.py --capacity --two-pass --json capacity_two_pass.json
    python bench/load.py --capacity --no-two-pass --json capacity_one_pass.json
    python bench/word_latency.py --model models/default:two-pass models/default:greedy \\
        --manifest data/live/test_seen_voices.jsonl --json word_latency.json

    python -m training.recipes.finals_metrics --real real.json --synthetic synthetic.json \\
        --latency latency.json --capacity capacity_two_pass_steady.json \\
        capacity_one_pass_steady.json capacity_two_pass.json capacity_one_pass.json \\
        --word-latency word_latency.json

and for the streaming pass by Whisper's decoder (``decode.streaming_decoder`` "whisper"):

    python bench/real_speech.py --no-whisper --no-two-pass --streaming-decoder whisper \\
        --beam 1 --lm-weight 0 --json spelled_real.json
    python bench/real_speech.py --no-whisper --no-two-pass --streaming-decoder whisper \\
        --beam 1 --lm-weight 0 --json spelled_synthetic.json --manifest data/live/test_*.jsonl
    python bench/word_latency.py --model models/default:greedy models/default:whisper \\
        --manifest data/live/test_seen_voices.jsonl --json spelled_latency.json
    python bench/streaming.py --streaming-decoder whisper --json spelled_rtf.json
    python bench/load.py --capacity --no-two-pass --streaming-decoder whisper --steady \\
        --json spelled_capacity_steady.json
    python bench/load.py --capacity --no-two-pass --streaming-decoder whisper \\
        --json spelled_capacity.json

    python bench/monotonic_speller.py --train data/synth-b/train.jsonl --train-limit 600 \\
        --minutes 15 --test data/live/dev.jsonl --test-limit 30 \\
        --save exp/prototype.safetensors
    python bench/streaming_speller.py --limit 50 --policy attention:24 \\
        learnt:models/default/speller_policy.safetensors prototype:exp/prototype.safetensors \\
        --json spelled_baselines.json \\
        --manifest data/live/test_seen_voices.jsonl data/live/test_unseen_voices.jsonl
    python bench/streaming_speller.py --limit 50 --policy attention:24 \\
        learnt:models/default/speller_policy.safetensors prototype:exp/prototype.safetensors \\
        --json spelled_baselines_real.json \\
        --manifest REAL/all.jsonl  # REAL: bench/real_speech.py --manifests REAL, outside

    python -m training.recipes.finals_metrics --spelled-real spelled_real.json \\
        --spelled-synthetic spelled_synthetic.json --spelled-word-latency spelled_latency.json \\
        --spelled-rtf spelled_rtf.json \\
        --spelled-capacity spelled_capacity_steady.json spelled_capacity.json \\
        --spelled-baselines spelled_baselines.json spelled_baselines_real.json

``python -m training.recipes.publish_speller`` carries a speller learnt over the bundle's
own student into it, then runs these and records them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from asr.config import Config
from asr.speller import ADAPTER_FILE, POLICY_FILE
from asr.whisper_encoder import weights_metadata
from training.recipes.gather import REAL, SYNTHETIC
from training.recipes.results_table import METRICS, README, rendered_readme
from training.recipes.whisper_card import write_card
from training.recipes.whisper_goals import evaluate_goals, goal_figures

MODELS = {"one-pass": "models/default one-pass", "two-pass": "models/default two-pass"}


def eval_figures(bench: dict[str, Any]) -> dict[str, Any]:
    """Per set: utterances, minutes, and the WER summary of one-pass finals, two-pass finals,
    Whisper-base offline and pocketsphinx (as bench/real_speech.py --compare-finals
    --pocketsphinx names them)."""
    out = {}
    for name, row in bench.items():
        wer = row["wer"]
        chosen = {mode: wer[label] for mode, label in MODELS.items() if label in wer}
        chosen |= {m: wer[m] for m in ("whisper-base", "pocketsphinx") if m in wer}
        out[name] = {"utterances": row["utterances"], "minutes": row["minutes"], "wer": chosen}
    return out


def gather(args: argparse.Namespace, before: dict[str, Any] | None) -> dict[str, Any]:
    """The figures given, over those recorded ``before`` (a rerun of one benchmark keeps the
    others' figures)."""
    read = lambda path: json.loads(path.read_text()) if path else None  # noqa: E731
    figures: dict[str, Any] = json.loads(json.dumps(before or {}))
    figures.setdefault("eval", {})
    measured = {}
    if args.real:  # every recording together, as the card's real-speech row
        measured[REAL] = eval_figures(read(args.real))["all"]
    if args.synthetic:
        synthetic = eval_figures(read(args.synthetic))
        measured |= {split: synthetic[split] for split in SYNTHETIC if split in synthetic}
    for split, new in measured.items():
        # a run of some rows (--no-whisper, say) keeps the others' figures of the same set
        old = figures["eval"].get(split)
        if old and (old["utterances"], round(old["minutes"], 3)) == (
            new["utterances"],
            round(new["minutes"], 3),
        ):
            new["wer"] = old["wer"] | new["wer"]
        figures["eval"][split] = new
    if args.latency:
        figures["final_latency"] = read(args.latency)
    for path in args.capacity or []:  # per finals mode, per load (steady, burst)
        result = read(path)
        if result["streaming_decoder"] is not None:  # the rows are the default streaming pass's
            raise SystemExit(f"{path}: measured with --streaming-decoder, not the rows' pass")
        modes = figures.setdefault("capacity", {})
        modes.setdefault(result["finals"], {})[result["load"]] = result["capacity"]
    if args.word_latency:
        models = read(args.word_latency)["models"]
        figures["word_times"] = next(m for m in models if m["two_pass"])
    return figures


def gather_spelled(args: argparse.Namespace, before: dict[str, Any] | None) -> dict[str, Any]:
    """The streaming pass spelled by Whisper's decoder: its WER per set (bench/real_speech.py
    run on the bundle alone, one-pass), its word latency (bench/word_latency.py's
    ``PATH:whisper`` row), one stream's real-time factor (bench/streaming.py), the streams
    carried (bench/load.py --capacity, per load) and, per set, the pass beside its
    baselines (bench/streaming_speller.py), over those recorded ``before``."""
    read = lambda path: json.loads(path.read_text()) if path else None  # noqa: E731
    figures: dict[str, Any] = json.loads(json.dumps(before or {}))
    sets = {}
    if args.spelled_real:
        sets[REAL] = read(args.spelled_real)["all"]
    if args.spelled_synthetic:
        synthetic = read(args.spelled_synthetic)
        sets |= {split: synthetic[split] for split in SYNTHETIC if split in synthetic}
    for name, row in sets.items():
        (rate,) = row["wer"].values()  # the one model the run scored
        figures.setdefault("eval", {})[name] = {"utterances": row["utterances"], "wer": rate}
    if args.spelled_word_latency:
        models = read(args.spelled_word_latency)["models"]
        figures["word_latency"] = next(m for m in models if m["model"].endswith(":whisper"))
    if args.spelled_rtf:
        figures["rtf"] = read(args.spelled_rtf)["rtf"]
    for path in args.spelled_baselines or []:  # per set, the systems side by side
        for result in read(path):
            name = Path(result["manifest"]).stem
            name = REAL if name == "all" else name  # bench/real_speech.py --manifests' all
            figures.setdefault("baselines", {})[name] = {
                "utterances": result["utterances"],
                "rows": result["rows"],
            }
    for path in args.spelled_capacity or []:
        result = read(path)
        if result["streaming_decoder"] != "whisper" or result["finals"] != "one-pass":
            raise SystemExit(f"{path}: not measured with --no-two-pass --streaming-decoder whisper")
        figures.setdefault("capacity", {})[result["load"]] = result["capacity"]
    return figures


def speller_settings(bundle: Path) -> dict[str, dict[str, str]]:
    """What the bundle's speller files say they were learnt with (their metadata, without
    the hashes that tie them to the student and the adapters), per file: the card gives
    them, so a speller published on its own says which it is."""
    settings = {}
    for kind, name in (("adapters", ADAPTER_FILE), ("policy", POLICY_FILE)):
        if (bundle / name).is_file():
            meta = weights_metadata(bundle / name)
            settings[kind] = {k: v for k, v in sorted(meta.items()) if not k.endswith("_sha1")}
    return settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--metrics", type=Path, default=METRICS)
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--real", type=Path, help="bench/real_speech.py --json (real speech)")
    parser.add_argument("--synthetic", type=Path, help="the same over the synthetic splits")
    parser.add_argument("--latency", type=Path, help="bench/final_latency.py --json")
    parser.add_argument("--capacity", type=Path, nargs="+", help="bench/load.py --capacity --json")
    parser.add_argument("--word-latency", type=Path, help="bench/word_latency.py --json")
    spelled = "(the streaming pass by Whisper's decoder)"
    parser.add_argument("--spelled-real", type=Path, help=f"bench/real_speech.py --json {spelled}")
    parser.add_argument("--spelled-synthetic", type=Path, help="the same over the synthetic splits")
    parser.add_argument(
        "--spelled-word-latency", type=Path, help=f"bench/word_latency.py --json {spelled}"
    )
    parser.add_argument("--spelled-rtf", type=Path, help=f"bench/streaming.py --json {spelled}")
    parser.add_argument(
        "--spelled-baselines",
        type=Path,
        nargs="+",
        help="bench/streaming_speller.py --json: the pass beside its baselines",
    )
    parser.add_argument(
        "--spelled-capacity",
        type=Path,
        nargs="+",
        help=f"bench/load.py --capacity --json {spelled}",
    )
    args = parser.parse_args(argv)
    spelled_given = (
        args.spelled_real,
        args.spelled_synthetic,
        args.spelled_word_latency,
        args.spelled_rtf,
        args.spelled_baselines,
        args.spelled_capacity,
    )
    metrics = json.loads(args.metrics.read_text())
    metrics["whisper_finals"] = gather(args, metrics.get("whisper_finals"))
    if any(spelled_given):
        metrics["whisper_streaming"] = gather_spelled(args, metrics.get("whisper_streaming"))
    bundle = args.metrics.parent
    decode = Config.load(bundle / "config.json").decode
    if args.real or args.synthetic or args.latency or args.capacity:
        # the settings these figures were measured with: the bundle's, as the benchmarks ran it
        metrics["whisper_finals"]["settings"] = dataclasses.asdict(decode.whisper_finals)
    metrics["goals"] = evaluate_goals(goal_figures(metrics))  # two-pass: Whisper's finals
    # which finals the bundle serves by default (its decode.two_pass, set once the goals held)
    metrics["model"]["two_pass_default"] = decode.two_pass
    if "whisper_streaming" in metrics:  # whether its decoder reads with adapters it learnt
        metrics["whisper_streaming"]["adapters"] = (bundle / ADAPTER_FILE).is_file()
        metrics["whisper_streaming"]["learnt_with"] = speller_settings(bundle)
        metrics["whisper_streaming"]["stall_s"] = decode.speller_stall_s
    # the bundle's size now counts Whisper's decoder and tokenizer
    shipped = {"README.md", "metrics.json"}
    files = {p.name: p.stat().st_size for p in sorted(bundle.iterdir()) if p.name not in shipped}
    metrics["files"], metrics["megabytes"] = files, sum(files.values()) / 1e6
    args.metrics.write_text(json.dumps(metrics, indent=2) + "\n")
    write_card(args.metrics.parent, metrics)
    _, updated = rendered_readme(args.readme, args.metrics)
    args.readme.write_text(updated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
