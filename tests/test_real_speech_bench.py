"""bench/real_speech.py's guard rails, without its recordings: held-out real speech never
enters the repository (nor the tests), so only the refusals and the set list are checked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.conftest import REPO, load_bench

real_speech = load_bench("real_speech")


def test_lists_every_set_with_its_package(capsys: pytest.CaptureFixture[str]) -> None:
    assert real_speech.main(["--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == [s.name for s in real_speech.SETS]
    for line, speech_set in zip(listed, real_speech.SETS):
        assert real_speech.PACKAGES[speech_set.package].spec in line


@pytest.mark.parametrize("flag", ["--cache", "--out", "--manifests"])
def test_refuses_to_put_held_out_speech_in_the_repository(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        real_speech.main([flag, str(REPO / "data" / "real"), "--no-whisper"])
    assert exit_.value.code == 2
    assert "is inside the repository" in capsys.readouterr().err


def test_refuses_unknown_sets_and_missing_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        real_speech.main(["--sets", "timit", "--cache", str(tmp_path)])
    assert "unknown set timit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        real_speech.main(["--model", str(tmp_path / "nothing"), "--cache", str(tmp_path)])
    assert "no such bundle directory" in capsys.readouterr().err


def test_manifests_of_one_name_stay_two_sets(tmp_path: Path) -> None:
    """Two dev splits (data/live/dev.jsonl, data/mix/synth-dev/dev.jsonl) were one set named
    "dev", the second replacing the first: each keeps its own, named by its folder too."""
    made = []
    for folder, words in (("live", "one two"), ("synth-dev", "three")):
        (tmp_path / folder).mkdir()
        soundfile.write(tmp_path / folder / "a.wav", np.zeros(1600, np.float32), 16000)
        manifest = tmp_path / folder / "dev.jsonl"
        manifest.write_text(
            json.dumps({"id": folder, "audio": "a.wav", "duration": 0.1, "text": words}) + "\n"
        )
        made.append(manifest)
    out = tmp_path / "sets"
    assert real_speech.main(["--manifest", *map(str, made), "--manifests", str(out)]) == 0
    for folder, words in (("live", "one two"), ("synth-dev", "three")):
        (row,) = [json.loads(line) for line in (out / folder / "dev.jsonl").open()]
        assert (row["id"], row["text"]) == (folder, words)
    assert len((out / "all.jsonl").read_text().splitlines()) == 2
