"""bench/long_stream.py on the bundled model and shipped held-out sentences: the figures it
prints are the WERs of the same words read alone and in one stream, for each setting."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, load_bench
from training.recipes.whisper_card import long_stream_text

long_stream = load_bench("long_stream")
MANIFEST = REPO / "tests" / "data" / "heldout" / "test_short.jsonl"
ROW = re.compile(r"^    (alone|stream)\s+([\d.]+)%  \(S (\d+), D (\d+), I (\d+) of (\d+) words\)$")


def test_prints_alone_stream_and_gap_for_each_restart_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "long.json"
    argv = ["--manifest", str(MANIFEST), "--limit", "4", "--sentences", "2", "--json", str(out)]
    assert long_stream.main([*argv, "--restart", "0", "0.6", "--noise-db", "off"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "quiet, no noise under all" in lines[0] and "beam 1, LM weight 0" in lines[0]
    assert lines[1] == f"{MANIFEST}: 4 sentences in 2 streams"
    blocks = [lines[2:6], lines[6:10]]
    assert [b[0] for b in blocks] == ["  restart_pause_s 0:", "  restart_pause_s 0.6:"]
    figures = json.loads(out.read_text())
    assert (figures["sentences"], figures["beam"], figures["noise_db"]) == (2, 1, None)
    [split] = figures["manifests"]
    assert (split["sentences"], split["streams"]) == (4, 2)
    for block, saved in zip(blocks, split["rows"]):
        rows = [ROW.match(line) for line in block[1:3]]
        assert all(rows), block
        rates = []
        for row, kind in zip(rows, ("alone", "stream")):
            assert row is not None
            s, d, i, n = (int(row.group(k)) for k in (3, 4, 5, 6))
            assert float(row.group(2)) == pytest.approx(100 * (s + d + i) / n, abs=0.006)
            counts = saved[kind]
            assert (counts["substitutions"], counts["deletions"]) == (s, d)
            assert (counts["insertions"], counts["reference_length"]) == (i, n)
            rates.append(100 * (s + d + i) / n)
        assert int(rows[0].group(6)) == int(rows[1].group(6)) > 0  # the same words
        gap = float(block[3].split()[1])
        assert gap == pytest.approx(rates[1] - rates[0], abs=0.011)
    assert [r["restart_pause_s"] for r in split["rows"]] == [0.0, 0.6]

    # the model card says what the bench measured
    text = long_stream_text(figures, "models/x")
    for saved in split["rows"]:
        alone, stream = (
            100 * saved[k]["errors"] / saved[k]["reference_length"] for k in ("alone", "stream")
        )
        assert f"{alone:.2f}%" in text and f"{stream:.2f}%" in text
        assert f"{stream - alone:+.2f}" in text


def test_streams_follow_the_voices_and_each_sentence_has_its_pause(tmp_path: Path) -> None:
    from training.manifest import read_manifest

    entries, _ = read_manifest(MANIFEST)
    groups = long_stream.sessions(entries, 5)
    assert sum(map(len, groups)) == len(entries) and max(map(len, groups)) == 5
    voices = [e.extra.get("voice", "") for group in groups for e in group]
    assert voices == sorted(voices)
    speech = [np.full(100, 0.5, np.float32), np.full(50, 0.5, np.float32)]
    noisy = long_stream.pieces(speech, 0.5, -60.0, seed=0)
    assert [len(p) for p in noisy] == [100 + 8000, 50 + 8000]
    level = 10 * np.log10(np.mean(noisy[0][100:] ** 2))
    assert level == pytest.approx(-60.0, abs=0.2)  # the pause: the noise alone
    assert np.abs(noisy[0][:100] - 0.5).max() < 0.01  # under the speech too
    quiet = long_stream.pieces(speech, 0.5, None, seed=0)
    assert not quiet[1][50:].any() and (quiet[1][:50] == 0.5).all()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--sentences", "1"], "--sentences must be at least 2"),
        (["--noise-db", "loud"], "--noise-db takes a level in dBFS or 'off'"),
        (["--restart", "-1"], "--restart values must be >= 0"),
    ],
)
def test_refuses_bad_arguments(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        long_stream.main(["--manifest", str(MANIFEST), *extra])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_help_states_the_greedy_defaults_it_searches_with(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The bench searches greedily unless told otherwise, not as the bundle serves; its
    --help must say so rather than the shared wording of ``asr eval``."""
    with pytest.raises(SystemExit):
        long_stream.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "beam size (default: 1, greedy)" in text
    assert "lm.npz (default: 0)" in text
