"""The README's results table, rendered from the bundled model's metrics.json, the file its
model card is rendered from, so the two cannot drift apart.

Each row is one key of metrics.json with the command that measures it; a key the file
lacks (a benchmark skipped, a column not yet published) leaves its row out. A new kind of
figure becomes a row by adding its key here once publish_model records it.

    python -m training.recipes.results_table           # rewrite the table in README.md
    python -m training.recipes.results_table --check   # exit 1 if README.md's table is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
METRICS = REPO / "models" / "default" / "metrics.json"
README = REPO / "README.md"
BEGIN = "<!-- results: `python -m training.recipes.results_table` writes this table -->"
END = "<!-- end of results -->"


@dataclass(frozen=True)
class Row:
    """A row of the table: ``label`` and ``command`` are formatted with the value at ``key``
    (when it is an object) and ``out`` (the bundle's directory); ``figure`` renders it."""

    label: str
    key: tuple[str, ...]
    figure: Callable[[Any], str]
    command: str


def greedy_word_latency(result: list[dict[str, Any]]) -> str:
    """p95 of the streaming pass: the greedy search the partials come from."""
    row = next(m for m in result if m.get("greedy"))
    return f"{row['latency_ms']['p95']:.0f} ms"


def load_latency(paced: dict[str, Any]) -> str:
    final, first = paced["final_latency"], paced["first_result"]
    return f"{final['p95_ms']:.0f} / {first['p95_ms']:.0f} ms, {paced['errors']} errors"


SYNTHETIC = {
    "test_seen_voices": "unseen sentences by seen voices",
    "test_unseen_voices": "unseen voices",
    "test_short": "short utterances (1-3 words, digits, letters)",
}
GREEDY = "--beam 1 --lm-weight 0 --no-two-pass"  # the streaming pass: partials, one-pass finals
REAL_SPEECH = "python bench/real_speech.py --model {out} --no-whisper"


def per_set(sets: dict[str, Any]) -> str:
    """WER on real speech and each synthetic split, in the order the labels name them."""
    names = ("real", *SYNTHETIC)
    return " / ".join(f"{100 * sets[n]['wer']['rate']:.1f}%" if n in sets else "-" for n in names)


SETS = "real speech / seen voices / unseen voices / short utterances"


def finals_side_by_side(row: dict[str, Any]) -> str:
    """WER of one-pass finals / two-pass finals (Whisper's decoder) / Whisper-base offline /
    pocketsphinx."""
    rates = [row["wer"].get(m) for m in ("one-pass", "two-pass", "whisper-base", "pocketsphinx")]
    return " / ".join("-" if r is None else f"{100 * r['rate']:.1f}%" for r in rates)


def streams_carried(loads: dict[str, int]) -> str:
    """Streams carried under a steady load and in a burst (bench/load.py --steady or not)."""
    return " / ".join(str(loads[load]) if load in loads else "-" for load in ("steady", "burst"))


def final_latency(modes: dict[str, Any]) -> str:
    two = modes["two-pass"]
    return f"{two['p50_ms']:.0f} / {two['p95_ms']:.0f} ms"


COMPARE = "python bench/real_speech.py --compare-finals --pocketsphinx --beam 1 --lm-weight 0"
FINALS_ROWS: tuple[Row, ...] = (
    Row(
        "WER, real speech ({utterances} recordings): one-pass / two-pass finals (Whisper's"
        " decoder, the default) / Whisper-base offline / pocketsphinx",
        ("whisper_finals", "eval", "real"),
        finals_side_by_side,
        COMPARE,
    ),
    *(
        Row(
            f"WER, synthetic speech, {what} ({{utterances}}): one-pass / two-pass / Whisper-base"
            " / pocketsphinx",
            ("whisper_finals", "eval", split),
            finals_side_by_side,
            f"{COMPARE} --manifest data/live/{split}.jsonl",
        )
        for split, what in SYNTHETIC.items()
    ),
    Row(
        "two-pass final latency after a 10 s segment, p50 / p95 (one thread)",
        ("whisper_finals", "final_latency", "10s"),
        final_latency,
        "python bench/final_latency.py",
    ),
)
CAPACITY_ROWS: tuple[Row, ...] = tuple(
    Row(
        "real-time streams carried (p95 final latency <= 1 s, no errors), users talking on"
        f" / all stopping in the same second: {mode} finals",
        ("whisper_finals", "capacity", mode),
        streams_carried,
        f"python bench/load.py --capacity{flag} --steady; the same without --steady",
    )
    for mode, flag in (("two-pass", " --two-pass"), ("one-pass", " --no-two-pass"))
)


def spelled_word_latency(row: dict[str, Any]) -> str:
    latency = row["latency_ms"]
    return f"{latency['median']:.0f} / {latency['p95']:.0f} ms"


SPELLED = "--no-whisper --no-two-pass --streaming-decoder whisper --beam 1 --lm-weight 0"
SPELLED_ROWS: tuple[Row, ...] = (
    Row(
        f"WER, the streaming pass by Whisper's decoder (one-pass): {SETS}",
        ("whisper_streaming", "eval"),
        per_set,
        f"python bench/real_speech.py {SPELLED} [--manifest data/live/test_*.jsonl]",
    ),
    Row(
        "word latency p50 / p95, the streaming pass by Whisper's decoder",
        ("whisper_streaming", "word_latency"),
        spelled_word_latency,
        "python bench/word_latency.py --model {out}:whisper"
        " --manifest data/live/test_seen_voices.jsonl",
    ),
    Row(
        "real-time factor, one stream on one thread, the streaming pass by Whisper's decoder",
        ("whisper_streaming", "rtf"),
        "{:.3f}".format,
        "python bench/streaming.py --model {out} --streaming-decoder whisper",
    ),
    Row(
        "real-time streams carried (p95 final latency <= 1 s, no errors), users talking on"
        " / all stopping in the same second: the streaming pass by Whisper's decoder",
        ("whisper_streaming", "capacity"),
        streams_carried,
        "python bench/load.py --capacity --no-two-pass --streaming-decoder whisper --steady;"
        " the same without --steady",
    ),
)

EVAL = "asr eval --model {out} --manifest data/live/test_*.jsonl"
LSTM_ROWS: tuple[Row, ...] = (
    Row(
        f"WER, the streaming pass (the partials; one-pass finals greedy): {SETS}",
        ("monotonic", "eval"),
        per_set,
        f"{REAL_SPEECH} {GREEDY}; {EVAL} {GREEDY}",
    ),
    Row(
        f"WER, one-pass finals (beam and LM): {SETS}",
        ("monotonic", "fusion", "eval"),
        per_set,
        f"{REAL_SPEECH} --no-two-pass; {EVAL} --no-two-pass",
    ),
)

ROWS: tuple[Row, ...] = (
    *FINALS_ROWS,
    Row(
        "word latency p95, from the word's end to its display (streaming pass)",
        ("word_latency", "models"),
        greedy_word_latency,
        "python bench/word_latency.py --model {out}:greedy"
        " --manifest data/live/test_seen_voices.jsonl --limit 200",
    ),
    *CAPACITY_ROWS,
    *LSTM_ROWS,
    *SPELLED_ROWS,
    Row(
        "real-time factor, one stream on one thread (the streaming pass)",
        ("rtf", "rtf"),
        "{:.3f}".format,
        "python bench/streaming.py --model {out}",
    ),
    Row(
        "capacity: real-time streams per core ({sessions} sessions stepped together)",
        ("rtf", "batched"),
        lambda batched: f"{1 / batched['rtf']:.1f}",
        "python bench/streaming.py --model {out}",
    ),
    Row(
        "p95 latency of the final after stop / of the first result"
        " ({final_latency[n]} clients at real-time pace, one-pass finals)",
        ("load", "paced"),
        load_latency,
        "python bench/load.py --model {out} --no-two-pass --clients 50",
    ),
    Row(
        "size on disk",
        ("megabytes",),
        "{:.1f} MB".format,
        "du -bc --exclude=README.md --exclude=metrics.json {out}/*",  # every file it ships
    ),
)


def lookup(metrics: dict[str, Any], key: tuple[str, ...]) -> Any:
    """The value at ``key``, or None where metrics.json lacks it (or holds null)."""
    value: Any = metrics
    for part in key:
        if not isinstance(value, dict) or value.get(part) is None:
            return None
        value = value[part]
    return value


def render(metrics: dict[str, Any]) -> str:
    """The table, one line per row whose key metrics.json holds."""
    lines = ["| result | figure | command |", "|---|---|---|"]
    for row in ROWS:
        value = lookup(metrics, row.key)
        if value is None:
            continue
        fields = {**(value if isinstance(value, dict) else {}), "out": metrics["out"]}
        label, command = row.label.format_map(fields), row.command.format_map(fields)
        lines.append(f"| {label} | {row.figure(value)} | `{command}` |")
    return "\n".join(lines)


def replace_table(readme: str, table: str) -> str:
    """``readme`` with the text between its BEGIN and END markers made ``table``."""
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return f"{readme[:start]}\n{table}\n{readme[end:]}"


def rendered_readme(readme: Path, metrics: Path) -> tuple[str, str]:
    """``readme``'s text as it is, and as it is with the table rendered from ``metrics``."""
    text = readme.read_text()
    return text, replace_table(text, render(json.loads(metrics.read_text())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--metrics", type=Path, default=METRICS)
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if the table is stale"
    )
    args = parser.parse_args(argv)
    text, updated = rendered_readme(args.readme, args.metrics)
    if not args.check:
        args.readme.write_text(updated)
    elif updated != text:
        print(f"{args.readme}: the results table differs from {args.metrics}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
