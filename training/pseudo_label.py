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
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from asr.bundle import default_model, load_model
from asr.scoring import wer
from asr.whisper_features import SAMPLE_RATE, log_mel
from asr.whisper_finals import FinalText
from training.dataset import entry_audio
from training.manifest import Entry, read_manifest, write_manifest
from training.recipes.textnorm import normalize

MAX_SECONDS = 30.0  # Whisper's window


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manifest", type=Path, required=True, help="clips to label")
    parser.add_argument("--out", type=Path, required=True, help="the labelled manifest")
    parser.add_argument("--model", type=Path, default=None, help="bundle (default: models/default)")
    parser.add_argument("--beam", type=int, default=5, help="beam of Whisper's decoder")
    parser.add_argument("--min-logprob", type=float, default=-1.0)
    parser.add_argument("--batch", type=int, default=8, help="clips decoded together")


def label(entries: list[Entry], args: argparse.Namespace) -> list[FinalText | None]:
    """Whisper's reading of each clip (None: longer than 30 s or not English)."""
    recognizer = load_model(args.model or default_model())
    finals = recognizer.whisper_finals()
    if finals is None or recognizer.two_pass_problem() is not None:
        raise ValueError(
            f"{args.model or default_model()} carries no Whisper decoder and teacher "
            "(asr import-whisper --bundle)"
        )
    options = dataclasses.replace(
        recognizer.config.decode.whisper_finals, beam_size=args.beam, beam_max_s=MAX_SECONDS
    )
    out: list[FinalText | None] = [None] * len(entries)
    wanted = [
        i
        for i, e in enumerate(entries)
        if e.duration <= MAX_SECONDS and e.extra.get("language", "en") == "en"
    ]
    for start in tqdm(range(0, len(wanted), args.batch), unit="batch", file=sys.stderr):
        chunk = wanted[start : start + args.batch]
        mels = [
            torch.from_numpy(log_mel(entry_audio(entries[i], SAMPLE_RATE), -7.0)) for i in chunk
        ]
        for i, final in zip(chunk, finals.transcribe(mels, options)):
            out[i] = final
    return out


def sure(final: FinalText | None, min_logprob: float) -> bool:
    return (
        final is not None
        and bool(final.text)
        and not final.fallback
        and final.avg_logprob >= min_logprob
    )


def run(args: argparse.Namespace) -> int:
    if args.beam < 1 or args.batch < 1:
        raise ValueError("--beam and --batch must be at least 1")
    entries, _ = read_manifest(args.manifest, require_text=False)
    finals = label(entries, args)
    kept = []
    for entry, final in zip(entries, finals):
        if sure(final, args.min_logprob):
            assert final is not None
            extra = {**entry.extra, "avg_logprob": round(final.avg_logprob, 3)}
            extra |= {"reference": entry.text} if entry.text else {}
            kept.append(dataclasses.replace(entry, text=normalize(final.text), extra=extra))
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
