"""Where a streaming pass loses words: a clip's last words, and digit strings.

The adapters that teach Whisper's decoder to wait can take a memory that ends in speech
for one cut mid-speech, and drop a clip's last words; waiting by a token of their own,
they spelled digit strings out where the reference has them as digits said one by one.
This reads the per-utterance rows of ``bench/real_speech.py --out`` (id, ref and one
column per model, all normalised as it scores them) and prints, per set and model:

- WER over all utterances;
- WER over the *digit strings*, the references with at least ``--digits`` digit words
  ("zero" to "nine", "oh"), and over the rest;
- *last word dropped*: hypotheses with fewer words than their reference that do not end
  with its last word.

    python bench/real_speech.py --model A B --streaming-decoder whisper --no-whisper \\
        --no-two-pass --beam 1 --lm-weight 0 --manifest DEV... --out hyps.jsonl
    python bench/experiments/end_drops.py hyps.jsonl --manifest DEV...

With ``--manifest`` the rows are grouped by the manifest that holds their id (named by
its file's stem, or by as much of its path as tells it from another's), else taken as one
set. Several files of rows (runs of other bundles over the same sets) are read side by
side: a model's column is named ``file:model`` when the files hold the same model name
(``dir/file:model`` when their names are alike too).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from asr.scoring import score  # noqa: E402
from training.manifest import distinct_names, read_manifest  # noqa: E402

DIGITS = frozenset("zero oh one two three four five six seven eight nine".split())


def read_rows(paths: list[Path]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """References by id, and each model's hypotheses by id, from files of rows."""
    refs: dict[str, str] = {}
    columns: dict[tuple[Path, str], dict[str, str]] = {}  # (file, model) -> hyps by id
    for path in paths:
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if "id" not in row or "ref" not in row:
                    raise ValueError(f"{path}:{number}: a row needs 'id' and 'ref'")
                if refs.setdefault(row["id"], row["ref"]) != row["ref"]:
                    raise ValueError(f"{path}:{number}: {row['id']} has another reference")
                for name, hyp in row.items():
                    if name not in ("id", "ref"):
                        columns.setdefault((path, name), {})[row["id"]] = hyp
    return refs, dict(zip(column_names(list(columns)), columns.values()))


def column_names(keys: list[tuple[Path, str]]) -> list[str]:
    """Each (file, model) column's name: the model, or, if other files hold the same model
    name, the file's distinct name and the model (``one:bundle``, ``early/whisper_hyps:bundle``)."""
    files: dict[str, list[Path]] = {}
    for path, name in keys:
        files.setdefault(name, []).append(path)
    tails = {name: dict(zip(paths, distinct_names(paths))) for name, paths in files.items()}
    return [name if len(files[name]) == 1 else f"{tails[name][path]}:{name}" for path, name in keys]


def dropped_last_word(ref: str, hyp: str) -> bool:
    """Fewer words than the reference, and not ending with its last word."""
    ref_words, hyp_words = ref.split(), hyp.split()
    return (
        bool(ref_words)
        and len(hyp_words) < len(ref_words)
        and (not hyp_words or hyp_words[-1] != ref_words[-1])
    )


def is_digit_string(ref: str, least: int) -> bool:
    """At least ``least`` digit words said one by one."""
    return sum(word in DIGITS for word in ref.split()) >= least


def wer(ids: list[str], refs: dict[str, str], hyps: dict[str, str]) -> str:
    """The WER of those ids as a percentage with its utterance count, '-' when none."""
    if not ids:
        return "-"
    summary, _ = score(ids, [refs[i] for i in ids], [hyps[i] for i in ids])
    return f"{100 * summary['wer']['rate']:.1f}% ({len(ids)})"


def report(
    refs: dict[str, str], models: dict[str, dict[str, str]], sets: dict[str, list[str]], least: int
) -> str:
    """A table per set: each model's WER, on digit strings and the rest, and its drops."""
    lines = []
    for name, ids in sets.items():
        lines += [
            f"## {name}",
            "",
            "| model | WER | digit strings | the rest | last word dropped |",
            "|---|---|---|---|---|",
        ]
        digits = [i for i in ids if is_digit_string(refs[i], least)]
        rest = [i for i in ids if not is_digit_string(refs[i], least)]
        for model, hyps in models.items():
            missing = [i for i in ids if i not in hyps]
            if missing:
                raise ValueError(f"{model} has no hypothesis for {missing[0]} ({name})")
            drops = sum(dropped_last_word(refs[i], hyps[i]) for i in ids)
            lines.append(
                f"| {model} | {wer(ids, refs, hyps)} | {wer(digits, refs, hyps)} "
                f"| {wer(rest, refs, hyps)} | {drops} of {len(ids)} |"
            )
        lines.append("")
    return "\n".join(lines)


def group(refs: dict[str, str], manifests: list[Path]) -> dict[str, list[str]]:
    """The ids of each manifest that holds some (by its distinct name), in the rows' order."""
    if not manifests:
        return {"all": list(refs)}
    sets: dict[str, list[str]] = {}
    for name, path in zip(distinct_names(manifests), manifests):
        entries, _ = read_manifest(path, check_audio=False, require_text=False)
        held = {e.id for e in entries}
        ids = [i for i in refs if i in held]
        if ids:
            sets[name] = ids
    grouped = {i for ids in sets.values() for i in ids}
    if len(grouped) < len(refs):
        stray = next(i for i in refs if i not in grouped)
        raise ValueError(f"{stray} is in none of the manifests given")
    return sets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", type=Path, nargs="+", help="bench/real_speech.py --out files")
    parser.add_argument("--manifest", type=Path, nargs="*", default=[], help="group by these")
    parser.add_argument("--digits", type=int, default=4, help="digit words a digit string has")
    args = parser.parse_args(argv)
    try:
        refs, models = read_rows(args.rows)
        print(report(refs, models, group(refs, args.manifest), args.digits))
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
