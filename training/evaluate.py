"""Evaluate a model bundle on a manifest: WER and CER (PER with --phones), per-utterance results, plots.

Every utterance is decoded through the recognizer's offline path (a streaming
session fed the whole file), so the figures are those streaming gives.
Writes OUT/results.jsonl (id, ref, hyp, errors), OUT/summary.json and, for
each --plot id, OUT/<id>.png: the teacher-forced soft alignment with the hard
monotonic path of greedy decoding drawn over it. With --train-manifest the summary
also splits the reference words by how often they occur in that training text
(never, 1-4, 5-49, 50-499, 500+ times) with the error rate of each band. With
--by FIELD it also scores each value of that manifest field apart (the synthetic
corpus records engine and voice; other corpora may record speaker or condition).

Examples:
  asr eval --model models/default --manifest data/test.jsonl --out exp/eval
  asr eval --model exp/timit/bundle --manifest data/timit/test.jsonl --phones
  asr eval --model models/default --manifest data/test.jsonl --plot utt001 utt002 --beam 4
  asr eval --model models/default --manifest data/synth/test_seen_voices.jsonl \
      --train-manifest data/synth/train.jsonl
  asr eval --model models/default --manifest data/synth/test_unseen_voices.jsonl --by engine voice
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from asr.bundle import load_model
from asr.decoding import decode_batch
from asr.recognizer import Recognizer, add_search_arguments
from asr.scoring import errors_by_frequency, score
from training.dataset import entry_audio
from training.manifest import Entry, read_manifest
from training.plots import plot_alignment
from training.recipes.textnorm import normalize


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, required=True, help="model bundle directory")
    parser.add_argument("--manifest", type=Path, required=True, help="JSON lines manifest")
    parser.add_argument("--out", type=Path, help="output directory (default: eval-<manifest>)")
    parser.add_argument(
        "--phones", action="store_true", help="score PER after TIMIT 39-phone folding"
    )
    parser.add_argument("--plot", nargs="+", default=[], metavar="ID", help="utterances to plot")
    add_search_arguments(parser)
    parser.add_argument(
        "--train-manifest",
        type=Path,
        help="the model's training manifest: also score words by their frequency in its text",
    )
    parser.add_argument(
        "--by",
        nargs="+",
        default=[],
        metavar="FIELD",
        help="also score each value of these manifest fields apart (e.g. engine voice speaker)",
    )


def run(args: argparse.Namespace) -> int:
    recognizer = load_model(args.model)
    recognizer.set_search_arguments(args)
    if args.train_manifest and args.phones:
        raise ValueError(
            "--train-manifest scores words by frequency; it does not apply to --phones"
        )
    entries, _ = read_manifest(args.manifest)
    if not entries:
        raise ValueError(f"{args.manifest}: no usable utterances")
    # Read before decoding: a missing field should not cost a whole evaluation.
    groupings = {name: field_values(entries, name, args.manifest) for name in args.by}
    by_id = {e.id: e for e in entries}
    unknown = [i for i in args.plot if i not in by_id]
    if unknown:
        raise ValueError(f"--plot: {', '.join(unknown)} not in {args.manifest}")
    out = args.out or Path(f"eval-{args.manifest.stem}")
    out.mkdir(parents=True, exist_ok=True)

    counts = train_word_counts(args.train_manifest) if args.train_manifest else None
    summary, records = evaluate(recognizer, entries, args.phones)
    if "skipped" in summary:
        kept = {r["id"] for r in records}
        groupings = {
            name: [v for e, v in zip(entries, values, strict=True) if e.id in kept]
            for name, values in groupings.items()
        }
    if counts is not None:
        summary["by_train_frequency"] = errors_by_frequency(
            [r["ref"] for r in records], [r["hyp"] for r in records], counts
        )
    if groupings:
        summary["by_field"] = {
            name: errors_by_field(records, values, args.phones)
            for name, values in groupings.items()
        }
    with open(out / "results.jsonl", "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    summary.update(model=str(args.model), manifest=str(args.manifest))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(summary_table(summary))
    for uid in args.plot:
        path = plot_utterance(recognizer, by_id[uid], out / f"{uid}.png")
        print(f"plot: {path}")
    print(f"results: {out / 'results.jsonl'}, summary: {out / 'summary.json'}")
    return 0


def evaluate(
    recognizer: Recognizer, entries: list[Entry], phones: bool = False
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Decode every entry and score: (summary, per-utterance records)."""
    rate = recognizer.config.model.features.sample_rate
    decoded, hyps, skipped, audio_seconds = [], [], [], 0.0
    started = time.monotonic()
    cache: dict[str, np.ndarray] = {}
    for entry in tqdm(entries, desc="decoding", unit="utt", file=sys.stderr):
        # The manifest check reads headers only: audio that fails to decode costs its own
        # utterance (reported, and counted in the summary), not the hours decoded before it.
        try:
            samples = entry_audio(entry, rate, cache)
            hyps.append(recognizer.transcribe(samples, rate))
        except ValueError as err:
            skipped.append({"id": entry.id, "reason": str(err)})
            tqdm.write(f"skipping {entry.id}: {err}", file=sys.stderr)
            continue
        decoded.append(entry)
        audio_seconds += len(samples) / rate
    if not decoded:
        raise ValueError(f"none of the {len(entries)} utterances could be decoded")
    elapsed = time.monotonic() - started
    refs = [e.text.lower() for e in decoded]
    if not phones:  # finals by Whisper's decoder are cased and punctuated, digits for numbers
        hyps = [normalize(h) for h in hyps]
    summary, records = score([e.id for e in decoded], refs, hyps, phones=phones)
    if skipped:
        summary["skipped"] = skipped
    summary["audio_seconds"] = round(audio_seconds, 2)
    summary["real_time_factor"] = round(elapsed / max(audio_seconds, 1e-9), 4)
    return summary, records


def field_values(entries: list[Entry], name: str, manifest: Path) -> list[str]:
    """Each entry's value of the manifest field ``name`` (beyond id, audio, text, times), as text."""
    values = []
    for entry in entries:
        value = entry.extra.get(name)
        if value is None or isinstance(value, (dict, list)):
            raise ValueError(
                f"--by {name}: utterance {entry.id} of {manifest} has "
                + ("no such field" if value is None else "a list or object there, not a value")
            )
        values.append(str(value))
    return values


def errors_by_field(
    records: list[dict[str, Any]], values: list[str], phones: bool = False
) -> list[dict[str, Any]]:
    """The error rates of the utterances of each value (most utterances first)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record, value in zip(records, values, strict=True):
        groups.setdefault(value, []).append(record)
    rows = []
    for value, group in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        summary, _ = score(
            [r["id"] for r in group], [r["ref"] for r in group], [r["hyp"] for r in group], phones
        )
        rows.append({"value": value, **summary})
    return rows


def train_word_counts(manifest: Path) -> Counter[str]:
    """How often each word occurs in a training manifest's (lower-cased) texts: its text
    alone is read, so the counts need no copy of the training audio."""
    entries, _ = read_manifest(manifest, check_audio=False)
    if not entries:
        raise ValueError(f"--train-manifest {manifest}: no usable utterances")
    return Counter(word for e in entries for word in e.text.lower().split())


def summary_table(summary: dict[str, Any]) -> str:
    """A plain-text table of the error rates in ``summary``."""
    header = f"{'metric':<6} {'rate':>8} {'errors':>7} {'sub':>6} {'del':>6} {'ins':>6} {'ref':>7}"
    lines = [header, "-" * len(header)]
    for key in ("wer", "cer", "per"):
        if key in summary:
            c = summary[key]
            lines.append(
                f"{key.upper():<6} {100 * c['rate']:>7.2f}% {c['errors']:>7} "
                f"{c['substitutions']:>6} {c['deletions']:>6} {c['insertions']:>6} "
                f"{c['reference_length']:>7}"
            )
    lines.append(
        f"{summary['utterances']} utterances, {summary['audio_seconds']:.1f} s of audio, "
        f"real-time factor {summary['real_time_factor']:.3f}"
    )
    if "skipped" in summary:
        lines.append(
            f"{len(summary['skipped'])} more could not be decoded and are not scored "
            "(summary.json lists them)"
        )
    if "by_train_frequency" in summary:
        lines.append("times in training text  share of words  word error (sub+del)")
        for band in summary["by_train_frequency"]:
            lines.append(
                f"{band['band']:>23} {100 * band['share']:>14.1f}% {100 * band['rate']:>20.1f}%"
            )
    for name, rows in summary.get("by_field", {}).items():
        width = max(len(name), *(len(row["value"]) for row in rows))
        keys = [key for key in ("wer", "cer", "per") if key in rows[0]]
        lines.append(
            f"{name:<{width}} {'utterances':>10}" + "".join(f"{k.upper():>9}" for k in keys)
        )
        for row in rows:
            lines.append(
                f"{row['value']:<{width}} {row['utterances']:>10}"
                + "".join(f"{100 * row[k]['rate']:>8.2f}%" for k in keys)
            )
    return "\n".join(lines)


@torch.no_grad()
def plot_utterance(recognizer: Recognizer, entry: Entry, out: Path) -> Path:
    """Soft alignment under teacher forcing on the reference, and the greedy hard path."""
    model, tokenizer, config = recognizer.model, recognizer.tokenizer, recognizer.config
    model.eval()
    frontend = recognizer.frontend
    assert frontend is not None
    samples = entry_audio(entry, frontend.sample_rate)
    feats = torch.from_numpy(frontend.compute(samples)).unsqueeze(0)
    lens = torch.tensor([feats.shape[1]])
    reference = tokenizer.encode(entry.text)
    targets = torch.tensor([reference], dtype=torch.long)
    weights = model.attention_maps(feats, lens, targets, torch.tensor([len(reference)]))[0]
    # the greedy path of attention alone: neither the beam nor the bundle's LM has a path
    greedy = dataclasses.replace(config.decode, beam_size=1, lm_weight=0.0)
    segments = decode_batch(model, feats, lens, greedy)[0]
    path, row, hyp = [], 0, []
    for segment in segments:
        for position in segment.positions:
            if position >= 0:
                path.append((row, position))
            row += 1
        hyp.extend(segment.tokens)
    seconds = model.encoder.reduction * frontend.frame_seconds
    title = f"{entry.id}\nref: {entry.text}\nhyp: {tokenizer.decode(hyp)}"
    labels = tokenizer.pieces(reference) + ["<eos>"]
    return plot_alignment(weights.numpy(), labels, path, out, title, seconds)
