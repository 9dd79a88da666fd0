"""Long streams: several sentences read in one session, with pauses, against each alone.

A user reads sentence after sentence into one session, while every utterance the model
learnt from began with nothing before it. This benchmark measures what the long context
costs: the held-out sentences of each --manifest, ordered by voice (a session is one speaker,
but for where a voice runs out), are joined --sentences at a time into one stream, each
sentence followed by --pause seconds of quiet, with white noise at --noise-db dBFS under
the whole stream (a room's noise floor; none with --noise-db off), all scaled by
--gain-db (a microphone's level). Each stream is transcribed by a session fed the
whole file (streaming equals offline), and so is every sentence alone with its pause; the
WERs over the same words, and their difference, are printed for each --restart setting
(decode.restart_pause_s: after that much silence the encoders and the segment start
afresh; 0: one context for the whole stream).

Greedy by default, as the card's streaming figures; --beam, --lm-weight and --two-pass
set the search as in ``asr eval``.

    python bench/long_stream.py --manifest data/live/test_unseen_voices.jsonl
    python bench/long_stream.py --manifest data/live/test_*.jsonl --restart 0 0.3 0.6 --json F
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.bundle import load_model  # noqa: E402
from asr.recognizer import Recognizer, add_search_arguments  # noqa: E402
from asr.scoring import ErrorCounts, wer  # noqa: E402
from training.dataset import entry_audio  # noqa: E402
from training.manifest import Entry, read_manifest  # noqa: E402

SAMPLE_RATE = 16000


def sessions(entries: Sequence[Entry], per_session: int) -> list[list[Entry]]:
    """The entries ordered by voice (a manifest's "voice" field; stable), then cut into sessions of ``per_session``."""
    ordered = sorted(entries, key=lambda e: str(e.extra.get("voice", "")))
    return [list(ordered[i : i + per_session]) for i in range(0, len(ordered), per_session)]


def pieces(
    sentences: Sequence[np.ndarray],
    pause_s: float,
    noise_db: float | None,
    seed: int,
    gain_db: float = 0.0,
) -> list[np.ndarray]:
    """Each sentence followed by ``pause_s`` of quiet, white noise at ``noise_db`` dBFS RMS
    under all of it (None: no noise), all scaled by ``gain_db``: one stream's pieces."""
    rng = np.random.default_rng(seed)
    pause = np.zeros(int(round(pause_s * SAMPLE_RATE)), np.float32)
    out = []
    for sentence in sentences:
        piece = np.concatenate([sentence, pause])
        if noise_db is not None:
            piece = piece + (rng.standard_normal(len(piece)) * 10 ** (noise_db / 20))
        out.append((piece * 10 ** (gain_db / 20)).astype(np.float32))
    return out


def measure(
    recognizer: Recognizer, groups: Sequence[Sequence[Entry]], streams: Sequence[list[np.ndarray]]
) -> tuple[ErrorCounts, ErrorCounts]:
    """(WER of each piece alone, WER of each stream of pieces) over the same references."""
    refs = [" ".join(e.text for e in group) for group in groups]
    alone = [" ".join(recognizer.transcribe(x, SAMPLE_RATE) for x in parts) for parts in streams]
    long = [recognizer.transcribe(np.concatenate(parts), SAMPLE_RATE) for parts in streams]
    return wer(refs, alone), wer(refs, long)


def row(label: str, counts: ErrorCounts) -> str:
    return (
        f"{label:<8} {100 * counts.rate:6.2f}%  (S {counts.substitutions}, "
        f"D {counts.deletions}, I {counts.insertions} of {counts.reference_length} words)"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=str(ROOT / "models" / "default"))
    parser.add_argument(
        "--manifest", nargs="+", required=True, help="held-out sentences (JSONL), one or more"
    )
    parser.add_argument("--sentences", type=int, default=6, help="sentences per stream")
    parser.add_argument("--pause", type=float, default=1.5, help="seconds after each sentence")
    parser.add_argument(
        "--noise-db",
        default="-60",
        help="white noise under the whole stream in dBFS, or 'off' for none (default -60)",
    )
    parser.add_argument(
        "--gain-db",
        type=float,
        default=0.0,
        help="scale every stream, noise too, by this many dB (-30: a quietly set microphone)",
    )
    parser.add_argument(
        "--restart",
        type=float,
        nargs="+",
        help="decode.restart_pause_s values to compare (default: 0 and the bundle's)",
    )
    parser.add_argument("--limit", type=int, default=0, help="first N sentences (0: all)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    add_search_arguments(parser, greedy=True)
    args = parser.parse_args(argv)
    if args.sentences < 2:
        parser.error(f"--sentences must be at least 2, got {args.sentences}")
    if args.pause < 0:
        parser.error(f"--pause must be >= 0, got {args.pause}")
    if args.restart is not None and any(r < 0 for r in args.restart):
        parser.error(f"--restart values must be >= 0, got {args.restart}")
    try:
        args.noise_db = None if args.noise_db == "off" else float(args.noise_db)
    except ValueError:
        parser.error(f"--noise-db takes a level in dBFS or 'off', got {args.noise_db!r}")
    if not Path(args.model).is_dir():
        parser.error(f"no such bundle directory: {args.model}")
    for manifest in args.manifest:
        if not Path(manifest).is_file():
            parser.error(f"no such manifest: {manifest}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    recognizer = load_model(args.model)
    recognizer.set_search_arguments(args)
    decode = recognizer.config.decode
    settings = args.restart or sorted({0.0, decode.restart_pause_s})
    noise = "no noise" if args.noise_db is None else f"noise at {args.noise_db:g} dBFS"
    noise += " under all"
    if args.gain_db:
        noise += f", everything scaled by {args.gain_db:+g} dB"
    print(
        f"{args.model}: streams of up to {args.sentences} sentences by one voice, each "
        f"followed by {args.pause:g} s of quiet, {noise}; beam {decode.beam_size}, LM weight "
        f"{decode.lm_weight:g}, two-pass {decode.two_pass}"
    )
    result: dict[str, Any] = {
        "model": args.model,
        "sentences": args.sentences,
        "pause_s": args.pause,
        "noise_db": args.noise_db,
        "gain_db": args.gain_db,
        "beam": decode.beam_size,
        "lm_weight": decode.lm_weight,
        "two_pass": decode.two_pass,
        "manifests": [],
    }
    for manifest in args.manifest:
        entries, _ = read_manifest(manifest)
        if args.limit:
            entries = entries[: args.limit]
        groups = sessions(entries, args.sentences)
        streams = [
            pieces(
                [entry_audio(e, SAMPLE_RATE) for e in group],
                args.pause,
                args.noise_db,
                seed,
                args.gain_db,
            )
            for seed, group in enumerate(groups)
        ]
        print(f"{manifest}: {len(entries)} sentences in {len(groups)} streams")
        rows = []
        for restart in settings:
            decode.restart_pause_s = restart
            alone, long = measure(recognizer, groups, streams)
            print(f"  restart_pause_s {restart:g}:")
            print("    " + row("alone", alone))
            print("    " + row("stream", long))
            gap = 100 * (long.rate - alone.rate)
            print(f"    gap      {gap:+6.2f} points", flush=True)
            rows.append(
                {"restart_pause_s": restart, "alone": alone.as_dict(), "stream": long.as_dict()}
            )
        result["manifests"].append(
            {"manifest": manifest, "sentences": len(entries), "streams": len(groups), "rows": rows}
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
