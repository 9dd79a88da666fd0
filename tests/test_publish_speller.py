"""training/recipes/publish_speller.py: a speller learnt over the bundled model's student is
carried into it and its figures recorded from the benchmarks' JSON; one learnt over another
student, or inputs that are missing, are refused before anything changes; figures older
than the speller carried in are measured again."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from asr.speller import ADAPTER_FILE, POLICY_FILE, WAIT_KEY, PolicyEnergy, learnt_on
from asr.whisper_text import NO_SPEECH
from training.recipes import publish_speller

REPO = Path(__file__).resolve().parents[1]
SPLITS = ["test_seen_voices", "test_unseen_voices", "test_short"]


def with_speller(root: Path, student: bytes, seed: int) -> Path:
    """The bundled model's small files (config, metrics, card), a student's bytes, and
    adapters and a policy learnt on that student."""
    shutil.copytree(
        REPO / "models" / "default",
        root,
        ignore=shutil.ignore_patterns("*.safetensors", "lm.npz"),
    )
    (root / "whisper_encoder.safetensors").write_bytes(student)
    torch.manual_seed(seed)  # two spellers, two sets of weights
    meta = {"student_sha1": learnt_on(root)["student_sha1"], "rank": "8", WAIT_KEY: NO_SPEECH}
    save_file({"lora": torch.randn(4, 2)}, str(root / ADAPTER_FILE), metadata=meta)
    settings = {"lambda": "0.25", "agreement": "2"}
    policy = PolicyEnergy(state_dim=8, key_dim=8, dim=4)
    policy.save(root / POLICY_FILE, meta=learnt_on(root) | settings)
    return root


def figures() -> dict[str, object]:
    """Each benchmark's --json, in the form finals_metrics reads."""

    def wer(errors: int, words: int) -> dict:
        return {"errors": errors, "reference_length": words, "rate": errors / words}

    row = {"token_latency_p50_ms": 300.0, "token_latency_p95_ms": 900.0, "within_1s": 0.95}
    rows = [
        row | {"system": "ceiling", "wer": 0.1, "rtf": 0.1},
        row
        | {"system": "learnt:models/default/p.safetensors (silence, words)", "wer": 0.12}
        | {"rtf": 0.15},
    ]
    capacity = {"finals": "one-pass", "streaming_decoder": "whisper", "phases": {}}
    split = {"utterances": 200, "minutes": 9.0, "wer": {"m": wer(20, 100)}}
    return {
        "spelled_real": {"all": {"utterances": 66, "minutes": 6.7, "wer": {"m": wer(30, 600)}}},
        "spelled_synthetic": {name: split for name in SPLITS},
        "spelled_latency": {
            "models": [
                {"model": "models/default:greedy", "latency_ms": {"median": 180, "p95": 340}},
                {"model": "models/default:whisper", "latency_ms": {"median": 170, "p95": 480}},
            ]
        },
        "spelled_rtf": {"rtf": 0.125},
        "spelled_capacity_steady": capacity | {"load": "steady", "capacity": 21},
        "spelled_capacity": capacity | {"load": "burst", "capacity": 19},
        "spelled_baselines": [
            {"manifest": "data/live/test_seen_voices.jsonl", "utterances": 50, "rows": rows}
        ],
        "spelled_baselines_real": [
            {"manifest": "/elsewhere/all.jsonl", "utterances": 50, "rows": rows}
        ],
    }


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """The bundled model's copy, a speller learnt over its student, and the arguments."""
    out = with_speller(tmp_path / "out", b"the student", seed=0)
    speller = with_speller(tmp_path / "speller", b"the student", seed=1)
    data, real = tmp_path / "data", tmp_path / "real"
    data.mkdir()
    real.mkdir()
    for path in [real / "all.jsonl", *(data / f"{split}.jsonl" for split in SPLITS)]:
        path.write_text("")
    (tmp_path / "prototype.safetensors").write_bytes(b"a policy")
    readme = tmp_path / "README.md"
    shutil.copy(REPO / "README.md", readme)
    argv = ["--out", str(out), "--data", str(data), "--real", str(real)]
    argv += ["--prototype", str(tmp_path / "prototype.safetensors"), "--readme", str(readme)]
    argv += ["--work", str(tmp_path / "work")]
    return out, speller, argv


def test_a_speller_over_another_student_or_missing_inputs_are_refused(
    setup: tuple[Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out, speller, argv = setup
    other = with_speller(tmp_path / "other", b"another student", seed=2)
    before = {path: path.read_bytes() for path in out.iterdir()}
    with pytest.raises(SystemExit):
        publish_speller.main([*argv, "--speller", str(other)])
    assert "learnt on another streaming student" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        publish_speller.main([*argv, "--speller", str(out)])
    assert "is --out" in capsys.readouterr().err
    (tmp_path / "real" / "all.jsonl").unlink()
    with pytest.raises(SystemExit):
        publish_speller.main([*argv, "--speller", str(speller)])
    assert f"{tmp_path / 'real' / 'all.jsonl'}: no such file" in capsys.readouterr().err
    assert before == {path: path.read_bytes() for path in out.iterdir()}
    assert not (tmp_path / "work").exists()


def test_the_speller_is_carried_and_its_figures_recorded_and_stale_ones_measured_again(
    setup: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    out, speller, argv = setup
    argv += ["--speller", str(speller)]
    config = json.loads((speller / "config.json").read_text())
    config["decode"]["speller_stall_s"] = 2.0  # the speller's pass setting travels with it
    (speller / "config.json").write_text(json.dumps(config))
    work = tmp_path / "work"
    work.mkdir()
    recorded = (out / "metrics.json").read_text()
    later = time.time() + 3600  # figures measured after the speller is carried in
    for name, content in figures().items():
        (work / f"{name}.json").write_text(json.dumps(content))
        os.utime(work / f"{name}.json", (later, later))

    assert publish_speller.main(argv) == 0
    for name in (ADAPTER_FILE, POLICY_FILE):
        assert (out / name).read_bytes() == (speller / name).read_bytes()
    assert json.loads((out / "config.json").read_text())["decode"]["speller_stall_s"] == 2.0
    card = (out / "README.md").read_text()
    assert "then waited 2 s for its next\ntoken is read again from its start" in card
    streaming = json.loads((out / "metrics.json").read_text())["whisper_streaming"]
    assert streaming["rtf"] == 0.125 and streaming["capacity"] == {"steady": 21, "burst": 19}
    assert streaming["eval"]["real"]["wer"]["rate"] == 0.05
    assert streaming["word_latency"]["latency_ms"]["p95"] == 480
    for name, measured in (
        ("test_seen_voices", "spelled_baselines"),
        ("real", "spelled_baselines_real"),
    ):
        assert streaming["baselines"][name]["rows"] == figures()[measured][0]["rows"]
    assert (out / "metrics.json").read_text() != recorded
    assert (  # the card says which speller it serves
        "Its files say they were learnt with `asr tune-speller --rank 8 --wait no-speech` and `asr "
        "train-speller --agreement 2 --latency-weight 0.25`."
    ) in (out / "README.md").read_text()
    readme = Path(argv[argv.index("--readme") + 1]).read_text()
    assert "the streaming pass by Whisper's decoder | 170 / 480 ms |" in readme

    # a figure older than the speller carried in is measured again (this copy's stand-in
    # student cannot be served, so the benchmark fails) and nothing more is recorded
    recorded = (out / "metrics.json").read_text()
    policy_time = (out / POLICY_FILE).stat().st_mtime
    os.utime(work / "spelled_rtf.json", (policy_time - 10, policy_time - 10))
    with pytest.raises(RuntimeError, match="bench/streaming.py failed"):
        publish_speller.main(argv)
    assert (out / "metrics.json").read_text() == recorded
