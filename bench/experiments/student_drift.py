"""How far a streaming student's states drift from the teacher's as a stream runs on.

The student (the bundle's streaming Whisper encoder, as served: its chunks, left context
and int8 scheme) learns the full-attention teacher's states by distillation. Whether it
keeps to them past the length of the utterances it learnt from is what a long microphone
stream needs. For each clip of --manifest (at most 30 s, e.g. the long clips of
``python -m training.join_utterances``) both encoders read the clip, the teacher whole
(the distillation target: full attention over the clip, the bundle's log-mel floor), and
the relative squared error ``sum |student - teacher|^2 / sum |teacher|^2`` is printed per
--bucket seconds of stream position, for each --model side by side:

    python -m training.join_utterances --manifest data/live/test_unseen_voices.jsonl \\
        --out data/live-long/test_unseen_voices.jsonl
    python bench/experiments/student_drift.py --model models/default exp/new-bundle \\
        --manifest data/live-long/test_unseen_voices.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from asr.bundle import load_model  # noqa: E402
from asr.frontend import Frontend  # noqa: E402
from asr.whisper_features import SAMPLE_RATE  # noqa: E402
from training.dataset import entry_audio  # noqa: E402
from training.manifest import Entry, read_manifest  # noqa: E402


def drift(frontend: Frontend, entries: list[Entry], bucket_s: float) -> list[float]:
    """Relative squared error of the student against the teacher per ``bucket_s`` of
    position, over every clip that reaches the bucket."""
    if frontend.encoder is None:
        raise ValueError("an fbank model has no Whisper student")
    teacher = frontend.teacher_view()
    per_bucket = max(1, int(round(bucket_s / frontend.frame_seconds)))
    error: list[float] = []
    energy: list[float] = []
    for entry in tqdm(entries, unit="clip", file=sys.stderr):
        audio = entry_audio(entry, SAMPLE_RATE)
        target = teacher.compute(audio)
        states = frontend.compute(audio)[: len(target)]
        target = target[: len(states)]
        for k, start in enumerate(range(0, len(states), per_bucket)):
            if k == len(error):
                error.append(0.0)
                energy.append(0.0)
            span = slice(start, start + per_bucket)
            error[k] += float(((states[span] - target[span]) ** 2).sum())
            energy[k] += float((target[span] ** 2).sum())
    return [e / max(n, 1e-12) for e, n in zip(error, energy, strict=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, nargs="+", default=[ROOT / "models" / "default"])
    parser.add_argument("--manifest", type=Path, required=True, help="clips of at most 30 s")
    parser.add_argument("--bucket", type=float, default=5.0, help="seconds per column")
    parser.add_argument("--limit", type=int, default=0, help="first N clips (0: all)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--skip-long",
        action="store_true",
        help="leave out clips over the teacher's 30 s (counted) rather than refuse them",
    )
    args = parser.parse_args(argv)
    if args.bucket <= 0:
        parser.error(f"--bucket must be positive, got {args.bucket:g}")
    entries, _ = read_manifest(args.manifest)
    entries = entries[: args.limit or None]
    if not entries:
        parser.error(f"{args.manifest}: no usable clips")
    too_long = [e.id for e in entries if e.duration > 30.0]
    if too_long and not args.skip_long:
        parser.error(
            f"the teacher reads at most 30 s; too long: {', '.join(too_long[:5])} "
            "(--skip-long leaves them out)"
        )
    entries = [e for e in entries if e.duration <= 30.0]
    if not entries:
        parser.error(f"{args.manifest}: every clip is over the teacher's 30 s")
    rows = {}
    for model in args.model:
        recognizer = load_model(model)
        assert recognizer.frontend is not None
        try:
            rows[str(model)] = drift(recognizer.frontend, entries, args.bucket)
        except ValueError as err:
            print(f"{model}: {err}", file=sys.stderr)
            return 2
    width = max(len(r) for r in rows.values())
    header = [f"{k * args.bucket:g}-{(k + 1) * args.bucket:g} s" for k in range(width)]
    skipped = f" ({len(too_long)} over 30 s left out)" if too_long else ""
    print(f"relative squared error, student against teacher, {len(entries)} clips{skipped}")
    print("| model | " + " | ".join(header) + " |")
    print("|---" * (width + 1) + "|")
    for model, values in rows.items():
        cells = [f"{v:.3f}" for v in values] + [""] * (width - len(values))
        print(f"| {model} | " + " | ".join(cells) + " |")
    if args.json:
        figures = {"bucket_s": args.bucket, "clips": len(entries), "left_out": len(too_long)}
        args.json.write_text(json.dumps({**figures, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
