"""Pseudo-labels: Whisper-base offline writes transcripts of unlabelled English clips.

Real speech from packages (``python -m training.recipes.real_audio``) mostly comes without
transcripts. Whisper-base, as the bundle carries it (the full-attention teacher and
Whisper's own decoder, ``asr.whisper_finals``, with a beam and its no-speech and loop
checks), writes one for each clip of at most 30 s; a clip it is unsure of is dropped:
no text, a loop, or an average log-probability below ``--min-logprob`` (Whisper's own
threshold for a retry). Where the manifest has its own transcripts (Drascula's text
tables), the labels' WER against them is printed, so their quality is measured before
anything learns from them.

    asr pseudo-label --manifest data/real-audio/drascula/manifest.jsonl \\
        --out data/real-audio/drascula/labelled.jsonl

Only English clips are labelled (a manifest's ``language`` field, where it has one).
Each batch's readings are appended to ``OUT.progress.jsonl`` as they come, so an
interrupted run goes on where it stopped when started again with the same command (a
different ``--beam`` or model is refused: delete the progress file to start over);
``--min-logprob`` is applied at the end and may change between runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import NamedTuple

import torch
from tqdm import tqdm

from asr.bundle import default_model, load_model
from asr.scoring import wer
from asr.whisper_features import SAMPLE_RATE, log_mel
from training.dataset import entry_audio
from training.manifest import Entry, read_journal, read_manifest, write_manifest
from training.recipes.textnorm import normalize

MAX_SECONDS = 30.0  # Whisper's window


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manifest", type=Path, required=True, help="clips to label")
    parser.add_argument("--out", type=Path, required=True, help="the labelled manifest")
    parser.add_argument("--model", type=Path, default=None, help="bundle (default: models/default)")
    parser.add_argument("--beam", type=int, default=5, help="beam of Whisper's decoder")
    parser.add_argument("--min-logprob", type=float, default=-1.0)
    parser.add_argument("--batch", type=int, default=8, help="clips decoded together")


class Reading(NamedTuple):
    """What decides whether a clip's label is kept: Whisper's text and its checks."""

    text: str
    avg_logprob: float
    fallback: bool


def progress_path(out: Path) -> Path:
    return out.with_name(out.stem + ".progress.jsonl")


def read_progress(path: Path, settings: dict[str, object]) -> dict[str, Reading]:
    """The readings an earlier run of the same settings wrote, by clip id."""
    rows = read_journal(path)
    if rows and rows[0] != settings:
        raise ValueError(
            f"{path} was written with {rows[0]}, not {settings}: run with those settings "
            "or delete it to label again"
        )
    return {r["id"]: Reading(r["text"], r["avg_logprob"], r["fallback"]) for r in rows[1:]}


def label(entries: list[Entry], args: argparse.Namespace) -> dict[str, Reading]:
    """Whisper's reading of each English clip of at most 30 s, by id; earlier runs'
    readings from the progress file, the rest decoded and appended to it batch by batch."""
    model = args.model or default_model()
    settings: dict[str, object] = {"model": str(model), "beam": args.beam}
    progress = progress_path(args.out)
    readings = read_progress(progress, settings)
    wanted = [
        e
        for e in entries
        if e.duration <= MAX_SECONDS
        and e.extra.get("language", "en") == "en"
        and e.id not in readings
    ]
    if not wanted:
        return readings
    recognizer = load_model(model)
    finals = recognizer.whisper_finals()
    if finals is None or recognizer.two_pass_problem() is not None:
        raise ValueError(
            f"{model} carries no Whisper decoder and teacher (asr import-whisper --bundle)"
        )
    options = dataclasses.replace(
        recognizer.config.decode.whisper_finals, beam_size=args.beam, beam_max_s=MAX_SECONDS
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if not progress.exists() or not progress.stat().st_size:  # none, or only a torn line
        progress.write_text(json.dumps(settings) + "\n")
    with progress.open("a") as log:
        if len(readings):
            print(f"{progress}: {len(readings)} clips read before", file=sys.stderr)
        for start in tqdm(range(0, len(wanted), args.batch), unit="batch", file=sys.stderr):
            chunk = wanted[start : start + args.batch]
            mels = [torch.from_numpy(log_mel(entry_audio(e, SAMPLE_RATE), -7.0)) for e in chunk]
            for entry, final in zip(chunk, finals.transcribe(mels, options)):
                reading = Reading(final.text, final.avg_logprob, final.fallback)
                readings[entry.id] = reading
                log.write(json.dumps({"id": entry.id, **reading._asdict()}) + "\n")
            log.flush()
    return readings


def sure(reading: Reading | None, min_logprob: float) -> bool:
    return (
        reading is not None
        and bool(reading.text)
        and not reading.fallback
        and reading.avg_logprob >= min_logprob
    )


def run(args: argparse.Namespace) -> int:
    if args.beam < 1 or args.batch < 1:
        raise ValueError("--beam and --batch must be at least 1")
    entries, _ = read_manifest(args.manifest, require_text=False)
    readings = label(entries, args)
    kept = []
    for entry in entries:
        reading = readings.get(entry.id)
        if sure(reading, args.min_logprob):
            assert reading is not None
            extra = {**entry.extra, "avg_logprob": round(reading.avg_logprob, 3)}
            extra |= {"reference": entry.text} if entry.text else {}
            kept.append(dataclasses.replace(entry, text=normalize(reading.text), extra=extra))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_manifest(args.out, kept)
    print(f"{args.out}: {len(kept)} of {len(entries)} clips labelled")
    scored = [e for e in kept if e.extra.get("reference")]
    if scored:
        refs = [normalize(e.extra["reference"]) for e in scored]
        counts = wer(refs, [e.text for e in scored])
        print(
            f"labels against the manifest's own transcripts: WER {100 * counts.rate:.2f}% "
            f"({len(scored)} clips, {counts.reference_length} words)"
        )
    return 0
