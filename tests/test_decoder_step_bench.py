"""bench/experiments/decoder_step.py: one step of Whisper's decoder in this tree against
a revision's (here HEAD's own), a row per batch and per beam."""

from __future__ import annotations

import pytest

from asr.whisper_decoder import bfloat16_kernels
from tests.conftest import load_bench

decoder_step = load_bench("experiments/decoder_step")


@pytest.mark.skipif(not bfloat16_kernels(), reason="oneDNN has no bfloat16 kernels here")
def test_steps_both_decoders_and_prints_a_row_per_case(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--against", "HEAD", "--batches", "1", "2", "--beams", "2", "--states", "40"]
    assert decoder_step.main([*args, "--prefix", "3", "--repeats", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| rows | HEAD ms | this tree (bfloat16) ms | speed-up |"
    names = [line.split(" | ")[0] for line in lines[2:]]
    assert names == ["| 1 segment", "| 2 segments", "| beam of 2"]
