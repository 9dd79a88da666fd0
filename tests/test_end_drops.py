"""bench/experiments/end_drops.py: a streaming pass's dropped last words and digit strings,
from bench/real_speech.py's per-utterance rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_bench


def rows(path: Path, refs: dict[str, str], **models: dict[str, str]) -> Path:
    """A file as ``bench/real_speech.py --out`` writes it."""
    with path.open("w") as f:
        for uid, ref in refs.items():
            f.write(json.dumps({"id": uid, "ref": ref} | {m: h[uid] for m, h in models.items()}))
            f.write("\n")
    return path


def manifest(path: Path, ids: list[str]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": i, "audio": f"{i}.wav", "duration": 1.0, "text": "x"}) + "\n"
            for i in ids
        )
    )
    return path


REFS = {
    "a": "log off immediately",
    "b": "call seven one nine eight now",
    "c": "a hungry heart",
    "d": "yes",
}


def test_drops_and_digit_strings_per_set_and_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("experiments/end_drops")
    cut = {
        "a": "log off",
        "b": "call seven hundred nineteen eight now",
        "c": "a hungry heart",
        "d": "",
    }
    one = rows(tmp_path / "one.jsonl", REFS, bundle=REFS)  # every word right
    two = rows(tmp_path / "two.jsonl", REFS, bundle=cut)
    synth = manifest(tmp_path / "synth.jsonl", ["a", "b", "c"])
    short = manifest(tmp_path / "short.jsonl", ["d"])
    assert bench.main([str(one), str(two), "--manifest", str(synth), str(short)]) == 0
    out = capsys.readouterr().out
    synth_table, short_table = out.split("## short")
    # the same model name in two files: named by file
    assert "| one:bundle | 0.0% (3) | 0.0% (1) | 0.0% (2) | 0 of 3 |" in synth_table
    # "immediately" dropped: 1 of the other 6 words; the digits spelled: 2 of 6 substituted
    assert "| two:bundle | 25.0% (3) | 33.3% (1) | 16.7% (2) | 1 of 3 |" in synth_table
    assert "| two:bundle | 100.0% (1) | - | 100.0% (1) | 1 of 1 |" in short_table
    # two runs' files of one name: told apart by their folders
    (tmp_path / "early").mkdir()
    (tmp_path / "late").mkdir()
    early = rows(tmp_path / "early" / "hyps.jsonl", REFS, bundle=REFS)
    late = rows(tmp_path / "late" / "hyps.jsonl", REFS, bundle=cut)
    assert bench.main([str(early), str(late), "--manifest", str(synth), str(short)]) == 0
    synth_table = capsys.readouterr().out.split("## short")[0]
    assert "| early/hyps:bundle | 0.0% (3) |" in synth_table
    assert "| late/hyps:bundle | 25.0% (3) |" in synth_table
    # two manifests of one name: two sets, named by their folders
    (tmp_path / "live").mkdir()
    (tmp_path / "synth-dev").mkdir()
    live = manifest(tmp_path / "live" / "dev.jsonl", ["a", "b"])
    synth_dev = manifest(tmp_path / "synth-dev" / "dev.jsonl", ["c", "d"])
    assert bench.main([str(two), "--manifest", str(live), str(synth_dev)]) == 0
    live_table, synth_dev_table = capsys.readouterr().out.split("## synth-dev/dev")
    assert "## live/dev" in live_table and "| bundle | 33.3% (2) |" in live_table
    assert "| bundle | 25.0% (2) |" in synth_dev_table


def test_rows_that_disagree_or_fall_outside_the_sets_are_refused(tmp_path: Path) -> None:
    bench = load_bench("experiments/end_drops")
    one = rows(tmp_path / "one.jsonl", REFS, bundle=REFS)
    other = rows(tmp_path / "other.jsonl", REFS | {"a": "log on"}, bundle=REFS)
    with pytest.raises(ValueError, match="a has another reference"):
        bench.read_rows([one, other])
    refs, _ = bench.read_rows([one])
    with pytest.raises(ValueError, match="d is in none of the manifests"):
        bench.group(refs, [manifest(tmp_path / "m.jsonl", ["a", "b", "c"])])
    assert bench.main([str(one), "--manifest", str(tmp_path / "missing.jsonl")]) == 2
