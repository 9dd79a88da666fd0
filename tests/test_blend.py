"""`asr blend-students`: two students averaged in weight space, and the blends it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from asr.cli import main
from asr.speller import file_sha1
from asr.whisper_encoder import WhisperDims, WhisperEncoder, load_encoder, weights_metadata
from training.blend import blend
from training.distill import save_encoder

TINY = WhisperDims(n_mels=8, d_model=16, n_heads=2, n_layers=2, n_ctx=40)
SERVED = {"streaming": json.dumps({"chunk": 16, "left_context": 500}), "delay": "0"}


def student(directory: Path, seed: int, **meta: str) -> Path:
    torch.manual_seed(seed)
    return save_encoder(WhisperEncoder(TINY), directory, SERVED | meta)


def test_the_blend_is_the_weighted_mean_of_both_students(tmp_path: Path) -> None:
    start = student(tmp_path / "start", 0)
    tuned = student(tmp_path / "tuned", 1, heldout_rel_mse="0.2", step="967")
    assert (
        main(
            ["blend-students", "--start", str(start), "--tuned", str(tuned.parent)]
            + ["--weight", "0.25", "--out", str(tmp_path / "blend")]
        )
        == 0
    )
    mixed = load_encoder(tmp_path / "blend").state_dict()
    first, second = load_encoder(start).state_dict(), load_encoder(tuned).state_dict()
    for name, value in mixed.items():
        expected = (0.75 * first[name] + 0.25 * second[name]).half().float()
        torch.testing.assert_close(value, expected, rtol=1e-3, atol=1e-7)
    assert not torch.equal(mixed["conv1.weight"], first["conv1.weight"])
    meta = weights_metadata(tmp_path / "blend" / "encoder.safetensors")
    assert "heldout_rel_mse" not in meta  # the tuned student's figure is not the blend's
    assert meta["step"] == "967" and meta["streaming"] == SERVED["streaming"]
    source = json.loads(meta["blend"])
    assert source["weight"] == 0.25 and source["tuned_sha1"] == file_sha1(tuned)
    assert source["start"] == str(start) and source["start_sha1"] == file_sha1(start)
    # the ends of the range are the students themselves
    for weight, same in ((0.0, first), (1.0, second)):
        blend(start, tuned, weight, tmp_path / f"w{weight}")
        for name, value in load_encoder(tmp_path / f"w{weight}").state_dict().items():
            assert torch.equal(value, same[name])


def test_students_served_differently_and_bad_weights_are_refused(tmp_path: Path) -> None:
    start = student(tmp_path / "start", 0)
    tuned = student(tmp_path / "tuned", 1)
    other_chunk = student(
        tmp_path / "chunk8", 2, streaming=json.dumps({"chunk": 8, "left_context": 500})
    )
    with pytest.raises(ValueError, match=r"not served alike \(chunk: \[16\] against \[8\]\)"):
        blend(start, other_chunk, 0.5, tmp_path / "out")
    with pytest.raises(ValueError, match="--weight 1.5: a share between 0 and 1"):
        blend(start, tuned, 1.5, tmp_path / "out")
    with pytest.raises(ValueError, match="would overwrite a student being blended"):
        blend(start, tuned, 0.5, tmp_path / "tuned")
    with pytest.raises(FileNotFoundError, match="missing"):
        blend(start, tmp_path / "nowhere", 0.5, tmp_path / "out")
    (tmp_path / "junk.safetensors").write_text("not weights")
    with pytest.raises(ValueError, match="unreadable weights"):
        blend(start, tmp_path / "junk.safetensors", 0.5, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written by a refused blend


def test_a_primed_student_blends_with_one_written_before_primes(tmp_path: Path) -> None:
    """A prime only says how a stream starts (the bundle's config sets it): a primed student
    blends with the bundle's, whose metadata names no prime, as real_student.sh's PRIME=N
    does, and the blend is recorded as served primed, as the tuned student was."""
    primed = {"chunk": 16, "left_context": 500, "prime": 16, "silence": -0.75}
    start = student(tmp_path / "start", 0)
    tuned = student(tmp_path / "tuned", 1, streaming=json.dumps(primed))
    out = blend(start, tuned, 0.5, tmp_path / "blend")
    assert json.loads(weights_metadata(out)["streaming"]) == primed
    other_context = student(
        tmp_path / "context", 2, streaming=json.dumps(primed | {"left_context": 250})
    )
    with pytest.raises(ValueError, match=r"not served alike \(left_context: \[500\] against"):
        blend(start, other_context, 0.5, tmp_path / "out")
