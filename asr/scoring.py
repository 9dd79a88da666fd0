"""Error rates: WER and CER (jiwer alignments), and TIMIT PER on the folded 39-phone set.

Rates are corpus-level (total edits over total reference units), never the mean of
per-utterance rates, which would let short utterances dominate. The TIMIT folding is a
plain data file (``asr/data/timit_phones.txt``) shared with data preparation.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jiwer


@dataclass
class ErrorCounts:
    """Edit counts against ``reference_length`` units (words, characters or phones)."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    reference_length: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def rate(self) -> float:
        if self.reference_length:
            return self.errors / self.reference_length
        return 0.0 if self.errors == 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "errors": self.errors, "rate": self.rate}


class PhoneFolding(NamedTuple):
    """TIMIT maps; a value of None deletes the phone (q, h#)."""

    to48: dict[str, str | None]  # 61-phone symbol -> training target
    to39: dict[str, str | None]  # 61- or 48-phone symbol -> scoring symbol
    phones48: list[str]


@functools.cache
def timit_folding() -> PhoneFolding:
    """Read the Lee & Hon 61 -> 48 -> 39 table once."""
    text = importlib.resources.files("asr.data").joinpath("timit_phones.txt").read_text()
    to48: dict[str, str | None] = {}
    to39: dict[str, str | None] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        p61, p48, p39 = (None if s == "-" else s for s in line.split())
        assert p61 is not None, f"timit_phones.txt: bad line {line!r}"
        to48[p61] = p48
        to39[p61] = p39
        if p48 is not None:
            to39[p48] = p39
    return PhoneFolding(to48, to39, sorted({p for p in to48.values() if p}))


def fold_phones(text: str) -> str:
    """Fold a 61- or 48-phone string to the 39-phone scoring set; unknown symbols stay."""
    to39 = timit_folding().to39
    folded = (to39.get(p, p) for p in text.split())
    return " ".join(p for p in folded if p)


def _align(
    refs: list[str], hyps: list[str], chars: bool = False
) -> jiwer.WordOutput | jiwer.CharacterOutput:
    """One jiwer alignment pass over whitespace-normalised texts."""
    refs = [" ".join(r.split()) for r in refs]
    hyps = [" ".join(h.split()) for h in hyps]
    return (jiwer.process_characters if chars else jiwer.process_words)(refs, hyps)


def _count(refs: list[str], hyps: list[str], chars: bool = False) -> tuple[ErrorCounts, list[int]]:
    """Corpus counts and per-utterance edit counts from one jiwer alignment pass."""
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    if not refs:
        return ErrorCounts(), []
    out = _align(refs, hyps, chars)
    per_utt = []
    for chunks in out.alignments:
        n = 0
        for c in chunks:
            if c.type in ("substitute", "delete"):
                n += c.ref_end_idx - c.ref_start_idx
            elif c.type == "insert":
                n += c.hyp_end_idx - c.hyp_start_idx
        per_utt.append(n)
    total = ErrorCounts(
        out.substitutions,
        out.deletions,
        out.insertions,
        out.substitutions + out.deletions + out.hits,
    )
    return total, per_utt


# Lower edges of the bands of errors_by_frequency: never seen, 1-4, 5-49, 50-499, 500+.
FREQUENCY_BANDS = (0, 1, 5, 50, 500)


def _band_name(index: int) -> str:
    low = FREQUENCY_BANDS[index]
    if index + 1 == len(FREQUENCY_BANDS):
        return f"{low}+"
    high = FREQUENCY_BANDS[index + 1] - 1
    return str(low) if high == low else f"{low}-{high}"


def errors_by_frequency(
    refs: list[str], hyps: list[str], counts: Mapping[str, int]
) -> list[dict[str, Any]]:
    """Reference words grouped by how often they occur in the training text (``counts``):
    per band its share of the reference and the fraction of its words substituted or deleted.

    It separates a model that has not learnt to spell what it hears (errors even on
    frequent words) from one that only misses words it has rarely or never seen.
    Insertions belong to no reference word, so the bands' rates leave them out.
    """
    out = _align(refs, hyps)
    words = [0] * len(FREQUENCY_BANDS)
    errors = [0] * len(FREQUENCY_BANDS)
    for ref, chunks in zip(out.references, out.alignments, strict=True):
        for c in chunks:
            if c.type == "insert":
                continue
            for word in ref[c.ref_start_idx : c.ref_end_idx]:
                band = sum(counts.get(word, 0) >= low for low in FREQUENCY_BANDS) - 1
                words[band] += 1
                errors[band] += c.type != "equal"
    total = max(sum(words), 1)
    return [
        {
            "band": _band_name(i),
            "words": words[i],
            "share": words[i] / total,
            "errors": errors[i],
            "rate": errors[i] / words[i] if words[i] else 0.0,
        }
        for i in range(len(FREQUENCY_BANDS))
    ]


def wer(refs: list[str], hyps: list[str]) -> ErrorCounts:
    """Word error counts over a corpus."""
    return _count(refs, hyps)[0]


def cer(refs: list[str], hyps: list[str]) -> ErrorCounts:
    """Character error counts; single spaces between words count as characters."""
    return _count(refs, hyps, chars=True)[0]


def per(refs: list[str], hyps: list[str]) -> ErrorCounts:
    """Phone error counts after folding both sides to 39 TIMIT phones."""
    return _count([fold_phones(r) for r in refs], [fold_phones(h) for h in hyps])[0]


def score(
    ids: list[str], refs: list[str], hyps: list[str], phones: bool = False
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Summary (utterances, wer, cer[, per]) and per-utterance records (id, ref, hyp, errors).

    With ``phones`` the records' errors are folded phone errors, otherwise word errors.
    """
    if phones:
        refs = [fold_phones(r) for r in refs]
        hyps = [fold_phones(h) for h in hyps]
    words, per_utt = _count(refs, hyps)
    summary: dict[str, Any] = {"utterances": len(ids)}
    if phones:
        summary["per"] = words.as_dict()
    else:
        summary["wer"] = words.as_dict()
        summary["cer"] = _count(refs, hyps, chars=True)[0].as_dict()
    records = [
        {"id": i, "ref": r, "hyp": h, "errors": e}
        for i, r, h, e in zip(ids, refs, hyps, per_utt, strict=True)
    ]
    return summary, records


def score_file(path: str | Path, phones: bool = False) -> dict[str, Any]:
    """Summary of a JSON lines file of ``{"id", "ref", "hyp"}`` records."""
    ids, refs, hyps = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                ids.append(row["id"])
                refs.append(row["ref"])
                hyps.append(row["hyp"])
    return score(ids, refs, hyps, phones=phones)[0]
