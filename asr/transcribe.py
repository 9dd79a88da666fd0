"""Transcribe audio files with a model bundle (offline; the same search as streaming).

Prints one line per file: ``FILE<TAB>text``, or with --json one JSON object per
line with the file, the text and its segments (text, pieces, start and end in
seconds). A file that cannot be read or decoded is reported on stderr and the
others go on; the exit status is then non-zero.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_MODEL = Path("models") / "default"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="WAV, FLAC or SPHERE")
    parser.add_argument(
        "--model",
        type=Path,
        default=DEFAULT_MODEL,
        help=f"model bundle directory (default: {DEFAULT_MODEL})",
    )
    parser.add_argument("--beam", type=int, default=None, help="beam size (default: the bundle's)")
    parser.add_argument(
        "--lm-weight", type=float, help="shallow-fusion LM weight (default: the bundle's)"
    )
    parser.add_argument("--json", action="store_true", help="JSON lines with segments")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: decoding is many small steps, more threads only contend)",
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from asr.audio import read_audio
    from asr.bundle import load_model

    torch.set_num_threads(max(1, args.threads))

    if not args.model.is_dir():
        raise FileNotFoundError(
            f"no model bundle at {args.model}: pass --model DIR with a bundle directory "
            "(config.json, model.safetensors, tokenizer, cmvn.json), or train one with "
            "`asr train` (see README.md) and put it there"
        )
    recognizer = load_model(args.model)
    recognizer.set_search(args.beam, args.lm_weight)

    failed = 0
    for path in args.files:
        try:
            samples, rate = read_audio(path)
            segments = recognizer.transcribe_segments(samples, rate)
        except (OSError, ValueError, RuntimeError) as err:
            failed += 1
            print(f"asr transcribe: {path}: {err}", file=sys.stderr)
            continue
        text = " ".join(e.text for e in segments if e.text)
        if args.json:
            record = {
                "file": str(path),
                "text": text,
                "segments": [
                    {
                        "segment": e.segment,
                        "text": e.text,
                        "tokens": e.tokens,
                        "start": e.start,
                        "end": e.end,
                    }
                    for e in segments
                ],
            }
            print(json.dumps(record, ensure_ascii=False), flush=True)
        else:
            print(f"{path}\t{text}", flush=True)
    if failed:
        print(f"asr transcribe: {failed} of {len(args.files)} file(s) failed", file=sys.stderr)
    return 1 if failed else 0
