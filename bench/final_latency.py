"""Final latency: from the end of a segment's audio to its final, per segment length.

A user who stops speaking waits for the final: the rest of the streaming pass (the end
padding through the encoders and the search), and with two-pass finals the full-attention
teacher over the whole segment and Whisper's decoder writing it. This times exactly that,
on one thread: each clip streams through a session in 100 ms chunks as fast as it can,
then ``finish()`` (what a client's ``stop`` runs) is timed. Clips of 2, 5, 10 and 20 s are
cut from the shipped held-out synthetic utterances (tests/data/heldout) joined with 0.1 s
gaps; the first pass's end-of-sentence endpoints are off, so that each clip is one segment
of its stated length (a final's cost depends on its segment's length alone).

    python bench/final_latency.py                         # models/default, one- and two-pass
    python bench/final_latency.py --lengths 10 --clips 20 --final-beam 5
    python bench/final_latency.py --precision float32     # Whisper's finals in float32
    python bench/final_latency.py --final-window 30       # Whisper's whole 30 s window

Prints p50 and p95 per length and mode, in milliseconds, and with --json writes them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.audio import read_audio  # noqa: E402
from asr.bundle import load_model  # noqa: E402
from asr.config import SessionOptions  # noqa: E402
from asr.recognizer import Recognizer  # noqa: E402

HELDOUT = ROOT / "tests" / "data" / "heldout"
RATE = 16000
CHUNK = RATE // 10  # 100 ms
GAP = np.zeros(RATE // 10, dtype=np.float32)


def speech() -> list[np.ndarray]:
    """The shipped held-out utterances at 16 kHz, in manifest order."""
    clips = []
    for manifest in sorted(HELDOUT.glob("*.jsonl")):
        for line in manifest.read_text().splitlines():
            samples, rate = read_audio(manifest.parent / json.loads(line)["audio"])
            assert rate == RATE, f"{manifest}: {rate} Hz"
            clips.append(samples.astype(np.float32))
    return clips


def clip(utterances: list[np.ndarray], seconds: float, index: int) -> np.ndarray:
    """``seconds`` of speech: utterances from the ``index``-th on, joined with short gaps."""
    parts, total, k = [], 0, index
    while total < seconds * RATE:
        utterance = utterances[k % len(utterances)]
        parts += [utterance, GAP]
        total += len(utterance) + len(GAP)
        k += 1
    return np.concatenate(parts)[: int(seconds * RATE)]


def finish_seconds(recognizer: Recognizer, audio: np.ndarray, two_pass: bool) -> float:
    """Wall time of ``finish()`` after the clip streamed in 100 ms chunks; the final it
    returns must cover the clip."""
    session = recognizer.stream(RATE, SessionOptions(two_pass=two_pass))
    for start in range(0, len(audio), CHUNK):
        session.accept(audio[start : start + CHUNK])
    started = time.perf_counter()
    events = session.finish()
    took = time.perf_counter() - started
    assert any(e.final for e in events), "the clip's segment gave no final at finish"
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "default")
    parser.add_argument("--lengths", type=float, nargs="+", default=[2, 5, 10, 20])
    parser.add_argument("--clips", type=int, default=10, help="clips per length")
    parser.add_argument("--modes", nargs="+", choices=["one-pass", "two-pass"])
    parser.add_argument(
        "--final-beam", type=int, help="beam of Whisper's finals (default: bundle's)"
    )
    parser.add_argument(
        "--final-window",
        type=float,
        metavar="SECONDS",
        help="segments encoded with Whisper's padding up to this length (default: bundle's)",
    )
    parser.add_argument(
        "--final-beam-max",
        type=float,
        metavar="SECONDS",
        help="longer segments are decoded greedily (default: bundle's)",
    )
    parser.add_argument(
        "--precision",
        choices=["float32", "bfloat16"],
        help="Whisper's finals: decoder and teacher (default: bundle's)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    recognizer = load_model(args.model)
    decode = recognizer.config.decode
    decode.endpoint_on_eos = False  # one segment per clip (see the docstring)
    if args.precision:
        decode.whisper_finals = replace(decode.whisper_finals, precision=args.precision)
    recognizer.set_search(
        1,
        0.0,
        final_beam=args.final_beam,
        final_window=args.final_window,
        final_beam_max=args.final_beam_max,
    )
    modes = args.modes or (
        ["one-pass", "two-pass"] if recognizer.two_pass_problem() is None else ["one-pass"]
    )
    utterances = speech()
    finish_seconds(recognizer, clip(utterances, 2, 0), "two-pass" in modes)  # warm up
    figures: dict[str, dict[str, dict[str, float]]] = {}
    print("| segment | " + " | ".join(f"{m} p50 | {m} p95" for m in modes) + " |")
    print("|---|" + "---|---|" * len(modes))
    for seconds in args.lengths:
        cells = []
        for mode in modes:
            times = [
                finish_seconds(recognizer, clip(utterances, seconds, i * 7), mode == "two-pass")
                for i in range(args.clips)
            ]
            p50, p95 = (1000 * np.percentile(times, [50, 95])).tolist()
            figures.setdefault(f"{seconds:g}s", {})[mode] = {"p50_ms": p50, "p95_ms": p95}
            cells += [f"{p50:.0f} ms", f"{p95:.0f} ms"]
        print(f"| {seconds:g} s | " + " | ".join(cells) + " |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
