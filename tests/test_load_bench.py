"""bench/load.py against a real server (`asr serve` on a tiny bundle, on loopback): a paced
burst, and with --steady clients that talk on, session after session, each session's
final timed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import load_bench, speech_files

load = load_bench("load")


def test_steady_clients_talk_on_and_capacity_says_which_load(
    tiny_bundle: Path, speech_dir: Path, tmp_path: Path
) -> None:
    audio = str(speech_files(speech_dir)[0][0])
    out = tmp_path / "steady.json"
    common = ["--model", str(tiny_bundle), "--audio", audio, "--skip-unpaced"]
    assert load.main([*common, "--clients", "2", "--steady", "--json", str(out)]) == 0
    paced = json.loads(out.read_text())["paced"]
    assert paced["errors"] == 0
    assert paced["final_latency"]["n"] == 6  # 2 clients x 3 sessions each
    assert 0 < paced["final_latency"]["p50_ms"] < 5000

    out = tmp_path / "capacity.json"
    argv = [*common, "--capacity", "--steps", "1", "2", "--rounds", "2", "--json", str(out)]
    assert load.main(argv) == 0
    figures = json.loads(out.read_text())
    assert (figures["finals"], figures["load"], figures["capacity"]) == ("one-pass", "burst", 2)
    assert [phase["final_latency"]["n"] for phase in figures["phases"].values()] == [2, 4]


def test_clients_ask_for_the_streaming_decoder(
    tiny_bundle: Path, speech_dir: Path, tmp_path: Path
) -> None:
    """--streaming-decoder goes into each client's start: a fbank bundle has no Whisper
    decoder, so the server refuses every session with unsupported_option, counted as errors."""
    audio = str(speech_files(speech_dir)[0][0])
    out = tmp_path / "whisper.json"
    argv = ["--model", str(tiny_bundle), "--audio", audio, "--skip-unpaced", "--clients", "2"]
    assert load.main([*argv, "--streaming-decoder", "whisper", "--json", str(out)]) == 0
    paced = json.loads(out.read_text())["paced"]
    assert paced["errors"] == 2
    assert "unsupported_option" in " ".join(paced["error_kinds"])
