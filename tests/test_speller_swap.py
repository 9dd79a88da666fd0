"""bench/experiments/speller_swap.py: another bundle's speller over a bundle's student loads
as serving loads it, with the weights it was learnt with and the serving rules asked for;
the bundles it reads are left as they were."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from asr.speller import (
    ADAPTER_FILE,
    POLICY_FILE,
    Learnt,
    PolicyEnergy,
    bundle_policy,
    learnt_on,
)
from asr.whisper_encoder import weights_metadata
from tests.conftest import load_bench


def bundle(root: Path, student: bytes, agreement: int) -> Path:
    """A bundle's files that the swap reads: its student, a config, adapters and a policy
    learnt on that student."""
    root.mkdir()
    (root / "whisper_encoder.safetensors").write_bytes(student)
    (root / "config.json").write_text("{}")
    meta = {"student_sha1": learnt_on(root)["student_sha1"], "rank": "8"}
    save_file({"lora": torch.randn(4, 2)}, str(root / ADAPTER_FILE), metadata=meta)
    torch.manual_seed(agreement)  # two bundles, two policies
    policy = PolicyEnergy(state_dim=8, key_dim=8, dim=4)
    policy.save(root / POLICY_FILE, meta=learnt_on(root) | {"agreement": str(agreement)})
    return root


def test_a_speller_swapped_over_another_student_loads_with_its_weights(tmp_path: Path) -> None:
    swap = load_bench("experiments/speller_swap")
    new = bundle(tmp_path / "new", b"the new student", agreement=2)
    old = bundle(tmp_path / "old", b"the old student", agreement=0)
    with pytest.raises(ValueError, match="another streaming student"):  # what the stamp guards
        Learnt.load(old / POLICY_FILE, learnt_on=learnt_on(new))
    before = {p: p.read_bytes() for p in [*new.iterdir(), *old.iterdir()]}

    out = tmp_path / "probe"
    args = ["--bundle", str(new), "--speller", str(old), "--out", str(out)]
    assert swap.main([*args, "--policy", "patience=16"]) == 0
    policy = bundle_policy(out)
    assert (policy.agreement, policy.patience) == (0, 16)  # the old policy's, and the rule asked
    for name in (ADAPTER_FILE, POLICY_FILE):
        for key, value in load_file(str(old / name)).items():
            assert torch.equal(load_file(str(out / name))[key], value)
    assert weights_metadata(out / ADAPTER_FILE)["rank"] == "8"
    assert os.path.samefile(
        out / "whisper_encoder.safetensors", new / "whisper_encoder.safetensors"
    )
    assert before == {p: p.read_bytes() for p in before}  # the bundles read are unchanged


def test_a_swap_that_cannot_be_made_says_why_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    swap = load_bench("experiments/speller_swap")
    new = bundle(tmp_path / "new", b"the new student", agreement=2)
    out = tmp_path / "probe"
    args = ["--bundle", str(new), "--out", str(out)]
    for rules, message in [
        (["agreement=-1"], "agreement must be at least 0"),
        (["pace=2"], "--policy takes RULE=VALUE of agreement, patience"),
        (["agreement"], "--policy takes RULE=VALUE"),
    ]:
        with pytest.raises(SystemExit):
            swap.main([*args, "--policy", *rules])
        assert message in capsys.readouterr().err
        assert not out.exists() and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    with pytest.raises(SystemExit):
        swap.main([*args, "--speller", str(tmp_path)])
    assert f"--speller {tmp_path} has no {POLICY_FILE}" in capsys.readouterr().err
    assert swap.main(args) == 0  # its own speller, as it was
    with pytest.raises(SystemExit):
        swap.main(args)
    assert f"--out {out} exists" in capsys.readouterr().err
