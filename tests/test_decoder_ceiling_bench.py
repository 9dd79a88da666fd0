"""bench/decoder_ceiling.py on the bundled model and shipped held-out sentences: Whisper's
decoder reads the bundle's encoder states (the teacher's and the streaming student's) far
better than the bundle's own streaming decoder does, which is what the benchmark is there
to show; the bundle's two-pass finals are Whisper's decoder's too."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO, load_bench

decoder_ceiling = load_bench("decoder_ceiling")
MANIFEST = REPO / "tests" / "data" / "heldout" / "test_seen_voices.jsonl"


def test_whisper_decoder_reads_both_encoders_better_than_the_bundle(
    whisper_model_file, capsys: pytest.CaptureFixture[str]
) -> None:
    assert decoder_ceiling.main(["--manifest", str(MANIFEST), "--limit", "3"]) == 0
    header, rule, row = capsys.readouterr().out.splitlines()
    assert header.split(" | ")[2:] == [
        "bundle streaming",
        "bundle two-pass",
        "Whisper decoder on teacher",
        "Whisper decoder on student |",
    ]
    assert row.startswith(f"| {MANIFEST} | 3 | ")
    streaming, two_pass, teacher, student = map(float, re.findall(r"([\d.]+)%", row))
    # measured: 45.45 / 13.64 / 13.64 / 18.18 (the census bureau, a puffing kind of man,
    # she felt an object brushing her arm): the bundle's two-pass finals are Whisper's
    # decoder on the teacher's states of each segment, as the teacher's column is
    assert max(teacher, student, two_pass) < 25 < streaming


def test_an_fbank_bundle_is_refused_by_name(
    whisper_model_file, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = REPO / "models" / "first-gen"
    assert decoder_ceiling.main(["--model", str(bundle), "--manifest", str(MANIFEST)]) == 2
    assert f"{bundle}: an fbank bundle has no Whisper encoder" in capsys.readouterr().err


def test_encoders_only_leaves_out_the_bundles_own_decoding(
    whisper_model_file, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--manifest", str(MANIFEST), "--limit", "1", "--encoders-only"]
    assert decoder_ceiling.main(args) == 0
    header, _, row = capsys.readouterr().out.splitlines()
    assert header == (
        "| manifest | utterances | Whisper decoder on teacher | Whisper decoder on student |"
    )
    assert len(re.findall(r"[\d.]+%", row)) == 2


def test_students_are_read_in_the_bundles_place(
    whisper_model_file, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--students adds a column per student; the bundle's own student, given as a distill
    output directory, reads exactly as the bundle's column; a missing one is named."""
    student = tmp_path / "distill" / "student"
    student.mkdir(parents=True)
    (student / "encoder.safetensors").symlink_to(
        REPO / "models/default/whisper_encoder.safetensors"
    )
    args = ["--manifest", str(MANIFEST), "--limit", "2", "--encoders-only"]
    assert decoder_ceiling.main([*args, "--students", str(student)]) == 0
    header, _, row = capsys.readouterr().out.splitlines()
    assert header.endswith(f"| Whisper decoder on student | Whisper decoder on student {student} |")
    _, own, swapped = re.findall(r"([\d.]+)%", row)
    assert own == swapped
    assert decoder_ceiling.main([*args, "--students", str(student), "--only-students"]) == 0
    header, _, row = capsys.readouterr().out.splitlines()
    assert header == f"| manifest | utterances | Whisper decoder on student {student} |"
    assert re.findall(r"([\d.]+)%", row) == [swapped]
    assert decoder_ceiling.main([*args, "--students", str(tmp_path / "none")]) == 2
    assert f"--students {tmp_path / 'none'}: no encoder there" in capsys.readouterr().err
