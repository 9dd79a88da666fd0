"""Transcribe audio files with a model bundle (offline; the same search as streaming).

--format tsv (the default) prints one line per file, FILE<TAB>text; json prints
one JSON object per file and line: the file, the text, the audio's duration and
the segments with their start and end, pieces and the time each piece was
emitted (--json is the same). txt, srt (SubRip) and vtt (WebVTT) print the
transcript of one file; with --out-dir every format writes DIR/NAME.FORMAT per
input instead. On a terminal a progress bar on stderr counts the seconds of
audio decoded; piped, nothing extra is written. A file that cannot be read or
decoded is reported on stderr and the others go on; the exit status is then
non-zero.

examples:
  asr transcribe talk.wav --format srt > talk.srt
  asr transcribe *.flac --format vtt --out-dir subtitles/
  asr transcribe a.wav b.wav --json --beam 4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from asr.bundle import default_model
from asr.formats import FORMATS, plain_text, render, transcript_record
from asr.recognizer import add_search_arguments

if TYPE_CHECKING:
    import numpy as np

    from asr.events import Event
    from asr.recognizer import Recognizer

LISTING = "tsv"  # FILE<TAB>text per line: a listing of many files, not a transcript format


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="WAV, FLAC or SPHERE")
    parser.add_argument(
        "--model",
        type=Path,
        default=default_model(),
        help=f"model bundle directory (default: {default_model()})",
    )
    add_search_arguments(parser)
    parser.add_argument(
        "--format",
        choices=(LISTING, *FORMATS),
        default=LISTING,
        help=f"output format (default: {LISTING}, FILE<TAB>text per line)",
    )
    parser.add_argument(
        "--json", dest="format", action="store_const", const="json", help="same as --format json"
    )
    parser.add_argument(
        "--out-dir", type=Path, metavar="DIR", help="write DIR/NAME.FORMAT for every input"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: decoding is many small steps, more threads only contend)",
    )


def _check_output(args: argparse.Namespace) -> None:
    """Refuse output choices that cannot work before any model loads."""
    if args.out_dir is not None:
        if args.format == LISTING:
            raise ValueError(
                f"--out-dir writes one file per input: give --format {', '.join(FORMATS)}"
            )
        stems: dict[str, Path] = {}
        for path in args.files:
            if stems.setdefault(path.stem, path) != path:
                raise ValueError(
                    f"{stems[path.stem]} and {path} would both be written to "
                    f"{args.out_dir / f'{path.stem}.{args.format}'}: transcribe them separately"
                )
    elif args.format not in (LISTING, "json") and len(args.files) > 1:
        raise ValueError(
            f"--format {args.format} prints the transcript of one file; for "
            f"{len(args.files)} files give --out-dir DIR"
        )


def run(args: argparse.Namespace) -> int:
    _check_output(args)

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
    recognizer.set_search_arguments(args)
    if args.out_dir is not None:
        args.out_dir.mkdir(parents=True, exist_ok=True)

    failed = 0
    for path in args.files:
        try:
            samples, rate = read_audio(path)
            duration = len(samples) / rate
            segments = _transcribe(recognizer, path.name, samples, rate)
            if args.out_dir is not None:
                out = args.out_dir / f"{path.stem}.{args.format}"
                out.write_text(render(args.format, segments, duration), encoding="utf-8")
        except (OSError, ValueError, RuntimeError) as err:
            failed += 1
            message = str(err)  # read_audio's errors name the file already
            if not message.startswith(f"{path}:"):
                message = f"{path}: {message}"
            print(f"asr transcribe: {message}", file=sys.stderr)
            continue
        if args.out_dir is not None:
            continue
        if args.format == LISTING:
            print(f"{path}\t{plain_text(segments)}", flush=True)
        elif args.format == "json":
            record = {"file": str(path), **transcript_record(segments, duration)}
            print(json.dumps(record, ensure_ascii=False), flush=True)
        else:
            print(render(args.format, segments, duration), end="", flush=True)
    if failed:
        print(f"asr transcribe: {failed} of {len(args.files)} file(s) failed", file=sys.stderr)
    return 1 if failed else 0


def _transcribe(recognizer: Recognizer, name: str, samples: np.ndarray, rate: int) -> list[Event]:
    """The final segments, with a progress bar on stderr when it is a terminal (tqdm's
    ``disable=None``) counting seconds of audio decoded."""
    from tqdm import tqdm

    with tqdm(
        total=round(len(samples) / rate, 1),
        desc=name,
        unit="s",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s of audio "
        "[{elapsed}<{remaining}]",
        file=sys.stderr,
        disable=None,
        leave=False,
    ) as bar:
        return recognizer.transcribe_segments(
            samples, rate, progress=lambda done: bar.update(round(done, 1) - bar.n)
        )
