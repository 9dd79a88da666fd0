"""How often the streaming speller's targets say what was spoken, by the clip's length.

The streaming speller (`asr tune-speller`, `asr train-speller`) learns Whisper's own greedy
reading of each clip (training.distill.cache_words). That reading was once Whisper's decoder
over the teacher's states of the clip alone, followed by encoded silence; Whisper learnt
from 30 s windows, and its finals pad a segment to ``decode.whisper_finals.window_s``
before encoding it, as the targets now are. This reads each English clip of the manifests
both ways through cache_words (the clip alone, and in each window of ``--windows``),
numbers spelled as the adapters' targets spell them, and scores each reading against the
manifest's text (the project's normalisation, spelled letters joined), by the reference's
length: 1-3 words, 4-8, 9 and more. A clip the reading refuses (no sure text) counts as
all deleted.

    python bench/experiments/teacher_reading.py --model models/default \\
        --manifest data/live/dev.jsonl --cache /tmp/teacher-reading --windows 10 30

Only for manifests whose text is what was said (synthetic speech; real recordings with
their scripts). Measurement only: the held-out sets' clips stay out of what it chooses.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from asr.config import WhisperConfig  # noqa: E402
from asr.scoring import wer  # noqa: E402
from bench.real_speech import score_text  # noqa: E402
from training.distill import cache_teacher, cache_words, english  # noqa: E402
from training.manifest import distinct_names, read_manifest  # noqa: E402
from training.speller_adapter import float32_finals  # noqa: E402
from training.train import configure_cpu  # noqa: E402

BUCKETS = ((1, 3), (4, 8), (9, 10**6))


def bucket(words: int) -> str:
    low, high = next(b for b in BUCKETS if b[0] <= words <= b[1])
    return f"{low}-{high}" if high < 10**6 else f"{low}+"


def main(argv: list[str] | None = None) -> int:
    from asr.bundle import load_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "default")
    parser.add_argument("--manifest", type=Path, nargs="+", required=True)
    parser.add_argument("--cache", type=Path, required=True, help="teacher states and readings")
    parser.add_argument(
        "--windows",
        type=float,
        nargs="*",
        default=[10.0, 30.0],
        help="finals' window_s to read in, each above 0 (0 is the clip alone, always read)",
    )
    parser.add_argument("--limit", type=int, default=0, help="first N English clips of each")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--show", type=int, default=5, help="misread 1-3 word clips to print")
    args = parser.parse_args(argv)
    if any(w <= 0 for w in args.windows):
        parser.error(f"--windows must each be above 0 s, got {args.windows}")
    configure_cpu(args.threads)
    recognizer = load_model(args.model)
    finals = float32_finals(recognizer)
    cfg = WhisperConfig(
        teacher=str(args.model / "whisper_teacher.safetensors"),
        floor=recognizer.config.model.whisper.floor,
    )
    names = distinct_names(args.manifest)
    readings = ["clip alone", *(f"window {w:g} s" for w in args.windows)]
    print(f"| set | words | clips | {' | '.join(readings)} |")
    print(f"|---|---|---:|{'---:|' * len(readings)}")
    for manifest, name in zip(args.manifest, names):
        entries = [e for e in read_manifest(manifest)[0] if english(e)][: args.limit or None]
        cached = cache_teacher(entries, finals.teacher, cfg, args.cache, f"teacher ({name})")
        refs = {e.id: score_text(e.text) for e in entries}
        hyps: dict[str, dict[str, str]] = defaultdict(dict)
        for window, reading in zip([0.0, *args.windows], readings):
            cache_words(cached, finals, 1, f"{reading} ({name})", "words", window)
            for item in cached:
                text = ""
                if item.words is not None:
                    with np.load(item.words) as data:
                        text = finals.vocabulary.decode(data["tokens"].tolist())
                hyps[reading][item.id] = score_text(text)
        ids = [item.id for item in cached]
        groups: dict[str, list[str]] = defaultdict(list)
        for i in ids:
            groups[bucket(len(refs[i].split()))].append(i)
        for group in [bucket(low) for low, _ in BUCKETS] + ["all"]:
            members = ids if group == "all" else groups.get(group, [])
            if not members:
                continue
            cells = [
                f"{wer([refs[i] for i in members], [hyps[r][i] for i in members]).rate:.1%}"
                for r in readings
            ]
            print(f"| {name} | {group} | {len(members)} | {' | '.join(cells)} |", flush=True)
        short = [i for i in groups.get(bucket(1), []) if hyps[readings[0]][i] != refs[i]]
        for i in short[: args.show]:
            said = " / ".join(f"{r}: {hyps[r][i]!r}" for r in readings)
            print(f"  {refs[i]!r} -> {said}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
