"""How much later one model shows each word than another, through real streaming sessions.

Each utterance is fed to a streaming session of each model in --chunk-ms pieces. A word
counts as shown at the amount of audio fed when it reached its final place in the
transcript (finals so far plus the current partial) and stayed there to the end. The two
models' final transcripts are aligned word by word; for every word both got right in the
same place, the benchmark takes the difference of the times they showed it. No reference
timing is needed: the synthetic speech has none, and both models see the same audio.

    python bench/word_latency.py --model exp/delay2/best_bundle --baseline models/default \\
        --manifest data/synth/test_seen_voices.jsonl --limit 100
"""

from __future__ import annotations

import argparse
import difflib
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.bundle import load_model  # noqa: E402
from asr.recognizer import Recognizer  # noqa: E402
from training.dataset import entry_audio  # noqa: E402
from training.manifest import read_manifest  # noqa: E402


def shown_times(
    recognizer: Recognizer, samples: np.ndarray, rate: int, chunk: int
) -> tuple[list[str], list[float]]:
    """Final words and, per word, the seconds of audio fed when it settled in its place."""
    session = recognizer.stream(rate)
    finals: list[str] = []
    partial: list[str] = []
    history: list[tuple[float, list[str]]] = []  # (audio fed, transcript words then)
    for start in range(0, len(samples), chunk):
        events = session.accept(samples[start : start + chunk])
        fed = min(start + chunk, len(samples)) / rate
        for event in events:
            if event.final:
                finals += event.text.split()
                partial = []
            else:
                partial = event.text.split()
        history.append((fed, finals + partial))
    finals += [w for e in session.finish() if e.final for w in e.text.split()]
    history.append((len(samples) / rate, list(finals)))
    times = []
    for k, word in enumerate(finals):
        settled = history[-1][0]
        for fed, words in reversed(history):
            if k >= len(words) or words[k] != word:
                break
            settled = fed
        times.append(settled)
    return finals, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=100, help="utterances (0: all)")
    parser.add_argument("--chunk-ms", type=float, default=20.0)
    args = parser.parse_args(argv)
    if args.chunk_ms <= 0:
        parser.error("--chunk-ms must be positive")
    torch.set_num_threads(1)
    entries, _ = read_manifest(args.manifest)
    entries = entries[: args.limit or None]
    if not entries:
        parser.error(f"{args.manifest}: no usable utterances")
    model, baseline = load_model(args.model), load_model(args.baseline)
    rate = model.config.model.features.sample_rate
    chunk = max(1, int(args.chunk_ms * rate / 1000))
    lags: list[float] = []
    correct = [0, 0]
    for entry in entries:
        samples = entry_audio(entry, rate)
        words, times = shown_times(model, samples, rate, chunk)
        base_words, base_times = shown_times(baseline, samples, rate, chunk)
        reference = entry.text.lower().split()
        right = []
        for i, hyp in enumerate((words, base_words)):
            match = difflib.SequenceMatcher(a=reference, b=hyp, autojunk=False)
            right.append(
                {b + k: a + k for a, b, n in match.get_matching_blocks() for k in range(n)}
            )
            correct[i] += len(right[i])
        model_at = {ref: times[pos] for pos, ref in right[0].items()}
        for pos, ref in right[1].items():
            if ref in model_at:
                lags.append(model_at[ref] - base_times[pos])
    if not lags:
        print("no word was right in both models' transcripts: nothing to compare")
        return 1
    ms = sorted(1000 * x for x in lags)
    print(f"{len(entries)} utterances of {args.manifest}, {args.chunk_ms:g} ms chunks")
    print(f"words right: {args.model} {correct[0]}, {args.baseline} {correct[1]}; both: {len(ms)}")
    print(
        f"{args.model} shows a word right in both later than {args.baseline} by: "
        f"median {statistics.median(ms):+.0f} ms, mean {statistics.fmean(ms):+.0f} ms, "
        f"10th-90th percentile {ms[len(ms) // 10]:+.0f} / {ms[(9 * len(ms)) // 10]:+.0f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
