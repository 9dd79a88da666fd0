"""bench/real_speech.py's guard rails, without its recordings: held-out real speech never
enters the repository (nor the tests), so only the refusals and the set list are checked."""

from __future__ import annotations

from pathlib import Path

import pytest

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
