"""Scoring against hand-computed error counts; PER folds both sides to 39 phones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asr.scoring import (
    cer,
    errors_by_frequency,
    fold_phones,
    per,
    score,
    score_file,
    timit_folding,
    wer,
)


def test_wer_is_corpus_level() -> None:
    refs = ["the cat sat on the mat", "hello world"]
    hyps = ["the cat sit on mat", "hello there world"]
    counts = wer(refs, hyps)
    # utterance 1: sat->sit (S), second "the" dropped (D); utterance 2: "there" inserted (I)
    assert (counts.substitutions, counts.deletions, counts.insertions) == (1, 1, 1)
    assert counts.reference_length == 8
    assert counts.rate == pytest.approx(3 / 8)  # not the mean of 2/6 and 1/2


def test_cer_counts_characters_and_spaces() -> None:
    counts = cer(["abcd", "hi"], ["abxd", "h"])
    assert (counts.substitutions, counts.deletions, counts.insertions) == (1, 1, 0)
    assert counts.rate == pytest.approx(2 / 6)
    assert cer(["ab  cd"], ["abcd"]).rate == pytest.approx(1 / 5)  # whitespace is normalised


def test_empty_inputs() -> None:
    assert wer([], []).rate == 0.0
    assert wer([""], [""]).rate == 0.0
    assert wer([""], ["extra"]).insertions == 1
    with pytest.raises(ValueError):
        wer(["a"], [])


def test_timit_folding_table() -> None:
    folding = timit_folding()
    assert len(folding.to48) == 61 and len(folding.phones48) == 48
    assert len({p for p in folding.to39.values() if p}) == 39
    assert folding.to48["q"] is None and folding.to48["h#"] is None
    assert fold_phones("h# ao ax-h ix zh bcl pcl epi pau el en em nx ux hv q h#") == (
        "aa ah ih sh sil sil sil sil l n m n uw hh"
    )


def test_per_folds_both_sides() -> None:
    # 48-phone distinctions that the 39-phone scoring set merges are not errors
    assert per(["ao ix zh cl el"], ["aa ih sh vcl l"]).errors == 0
    counts = per(["aa b d", "sh iy"], ["ao d", "zh iy s"])
    assert (counts.substitutions, counts.deletions, counts.insertions) == (0, 1, 1)
    assert counts.rate == pytest.approx(2 / 5)


def test_score_records_and_file(tmp_path: Path) -> None:
    summary, records = score(["u1", "u2"], ["a b c", "d"], ["a c", "d e"])
    assert summary["utterances"] == 2
    assert summary["wer"]["errors"] == 2 and summary["wer"]["rate"] == pytest.approx(0.5)
    assert summary["cer"]["reference_length"] == 6
    assert records == [
        {"id": "u1", "ref": "a b c", "hyp": "a c", "errors": 1},
        {"id": "u2", "ref": "d", "hyp": "d e", "errors": 1},
    ]
    phones, records = score(["t1"], ["ao ix q"], ["aa ih"], phones=True)
    assert phones["per"]["rate"] == 0.0 and "wer" not in phones
    assert records[0]["ref"] == "aa ih"
    path = tmp_path / "hyps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert score_file(path, phones=True)["per"]["errors"] == 0


def test_errors_by_frequency_bands_reference_words_by_training_count() -> None:
    """Substituted and deleted reference words count against their band; insertions do not."""
    counts = {"the": 900, "cat": 60, "sat": 7, "mat": 2}
    refs = ["the cat sat on the mat", "the cat"]
    hyps = ["the cat sad on a mat extra", "the"]
    bands = {b["band"]: b for b in errors_by_frequency(refs, hyps, counts)}
    assert list(bands) == ["0", "1-4", "5-49", "50-499", "500+"]
    assert (bands["0"]["words"], bands["0"]["errors"]) == (1, 0)  # "on": never seen, right
    assert (bands["1-4"]["words"], bands["1-4"]["errors"]) == (1, 0)  # "mat"
    assert (bands["5-49"]["words"], bands["5-49"]["errors"]) == (1, 1)  # "sat" -> "sad"
    assert (bands["50-499"]["words"], bands["50-499"]["errors"]) == (2, 1)  # "cat" deleted once
    assert (bands["500+"]["words"], bands["500+"]["errors"]) == (3, 1)  # "the" -> "a"
    assert bands["500+"]["rate"] == pytest.approx(1 / 3)
    assert sum(b["share"] for b in bands.values()) == pytest.approx(1)
