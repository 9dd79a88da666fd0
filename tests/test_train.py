"""`asr train`: it learns, resumes bit-exactly after SIGKILL, and 2 processes equal 1."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import soundfile
import torch
from safetensors.torch import load_file

from asr.bundle import load_model
from asr.cli import main
from asr.config import Config, SpecAugmentConfig
from asr.model import Seq2Seq
from tests.conftest import espeak, speech_files
from training.dataset import SpecAugment, make_batches
from training.evaluate import evaluate
from training.manifest import read_manifest
from training.train import Trainer, cpu_bfloat16_works, lr_factor

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "training" / "configs" / "tiny.yaml"
# Deterministic forward passes (no dropout, noise or masks): needed to compare 1 and 2 processes.
DETERMINISTIC = [
    "model.attention.noise_std=0.0",
    "model.encoder.dropout=0.0",
    "model.decoder.dropout=0.0",
    "train.specaugment=false",
]


def write_manifest(path: Path, speech_dir: Path, copies: int = 1, count: int = 22) -> Path:
    """The espeak-ng sentences as a manifest; ``copies`` repeats them under new ids."""
    with open(path, "w") as f:
        for copy in range(copies):
            for wav, text in speech_files(speech_dir)[:count]:
                info = soundfile.info(str(wav))
                row = {
                    "id": f"{wav.stem}-{copy}",
                    "audio": str(wav),
                    "text": text,
                    "duration": info.frames / info.samplerate,
                }
                f.write(json.dumps(row) + "\n")
    return path


def train_command(out: Path, manifest: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "asr.cli",
        "train",
        "--config",
        str(TINY),
        "--out",
        str(out),
        f"train.train_manifest={manifest}",
        *overrides,
    ]


def start_training(out: Path, manifest: Path, *settings: str) -> subprocess.Popen[str]:
    """``asr train`` as a child whose (unbuffered) stdout the test reads line by line."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        train_command(out, manifest, *settings),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def run_training(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(
        args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "last.pt", weights_only=False)["model"]


def digit_corpus(root: Path, name: str, count: int, seed: int) -> Path:
    """Random 3-5 digit strings spoken by one espeak-ng voice: an LM cannot guess them."""
    words = "zero one two three four five six seven eight nine".split()
    rng = random.Random(seed)
    with open(root / f"{name}.jsonl", "w") as f:
        for i in range(count):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 5)))
            wav = espeak(text, root / f"{name}{i:03d}.wav", speed=170)
            info = soundfile.info(str(wav))
            row = {"id": f"{name}{i:03d}", "audio": str(wav), "text": text}
            f.write(json.dumps({**row, "duration": info.duration}) + "\n")
    return root / f"{name}.jsonl"


def test_tiny_model_learns_the_sentences(tmp_path: Path) -> None:
    """900 steps of mixed-precision training (a count: a minute buys a busy or bfloat16-less
    machine far fewer): greedy hard-monotonic WER < 30% on the training sentences, and on
    digit strings it never heard (so it recognises, not memorises)."""
    train = digit_corpus(tmp_path, "train", 400, seed=0)
    unseen = digit_corpus(tmp_path, "unseen", 40, seed=1)
    started = time.monotonic()
    run_training(
        train_command(
            tmp_path / "exp",
            train,
            f"train.valid_manifest={unseen}",
            "train.max_steps=900",
            "train.precision=bfloat16",  # as the default config: mixed precision must learn too
        )
    )
    assert time.monotonic() - started < 300
    recognizer = load_model(tmp_path / "exp" / "bundle")
    for manifest in (train, unseen):
        summary, records = evaluate(recognizer, read_manifest(manifest)[0][:48])
        assert summary["wer"]["rate"] < 0.3, (manifest.name, records)
    card = (tmp_path / "exp" / "bundle" / "README.md").read_text()
    assert "asr train" in card and "Validation WER" in card
    assert any((tmp_path / "exp" / "tensorboard").iterdir())


@pytest.mark.parametrize("kind", ["monotonic", "softmax"])
def test_bfloat16_step_follows_float32(kind: str) -> None:
    """train.precision=bfloat16 rounds the products, not the maths: the loss and the
    gradient direction of one batch stay those of float32."""
    if not cpu_bfloat16_works():
        pytest.skip("this CPU has no bfloat16 LSTM (oneDNN needs AVX512-BF16 or AMX)")
    config = Config.load(TINY, [*DETERMINISTIC, f"model.attention.kind={kind}"])
    torch.manual_seed(0)
    model = Seq2Seq(config.model, 40)
    feats, feat_lens = torch.randn(4, 300, 80), torch.tensor([300, 260, 200, 120])
    targets, target_lens = torch.randint(3, 40, (4, 9)), torch.tensor([9, 7, 6, 3])

    def loss_and_grad(bfloat16: bool) -> tuple[float, torch.Tensor]:
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
            loss, _ = model.compute_loss(feats, feat_lens, targets, target_lens)
        loss.backward()
        return float(loss.detach()), torch.cat([p.grad.flatten() for p in model.parameters()])

    loss32, grad32 = loss_and_grad(False)
    loss16, grad16 = loss_and_grad(True)
    assert abs(loss16 - loss32) < 0.01 * loss32
    assert torch.nn.functional.cosine_similarity(grad16, grad32, dim=0) > 0.99


def test_sigkill_and_resume_is_bit_identical(tmp_path: Path, speech_dir: Path) -> None:
    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir)
    settings = [
        "train.max_batch_seconds=6",
        "train.epochs=2",
        "train.checkpoint_every=3",
        "train.specaugment=true",  # exercise every random stream
    ]
    run_training(train_command(tmp_path / "ref", manifest, *settings))
    reference = torch.load(tmp_path / "ref" / "last.pt", weights_only=False)
    assert reference["position"]["epoch"] == 2  # two full epochs ran

    killed_out = tmp_path / "killed"
    process = start_training(killed_out, manifest, *settings)
    assert process.stdout is not None
    for line in process.stdout:
        # Kill right after a mid-epoch checkpoint of the second epoch.
        if line.startswith("checkpoint") and "epoch=2" in line and "batch=0" not in line:
            process.send_signal(signal.SIGKILL)
            break
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    saved = torch.load(killed_out / "last.pt", weights_only=False)["position"]
    assert saved["epoch"] == 1 and 0 < saved["batch"] < len(saved["order"])

    resumed = run_training(train_command(killed_out, manifest, *settings) + ["--resume"])
    assert "resumed at epoch 2" in resumed.stdout
    expected, got = reference["model"], final_weights(killed_out)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name


# Each rank counts its threads before the group, and after it, an optimizer made in between.
# each rank writes its thread counts to its own file: lines two ranks print to one pipe can
# come out mangled
TEARDOWN = """
import os, sys, torch
from training.train import Distributed
threads = lambda: len(os.listdir("/proc/self/task"))
before = threads()
with Distributed() as ddp:
    assert ddp.world == 2
    torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
with open(os.path.join(sys.argv[1], "threads-" + os.environ["RANK"]), "w") as f:
    f.write(f"{before} {threads()}")
"""


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not installed")
def test_a_rank_tears_its_process_group_down_before_it_exits(tmp_path: Path) -> None:
    # A group that outlived its teardown (references kept by modules the optimizer imports)
    # kept gloo's worker threads into interpreter shutdown, where they aborted the rank.
    script = tmp_path / "teardown.py"
    script.write_text(TEARDOWN)
    run_training(["torchrun", "--standalone", "--nproc_per_node", "2", str(script), str(tmp_path)])
    counts = [(tmp_path / f"threads-{rank}").read_text().split() for rank in (0, 1)]
    for before, after in counts:
        assert after == before, counts


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not installed")
def test_two_processes_make_the_same_update_as_one(tmp_path: Path, speech_dir: Path) -> None:
    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir, count=12)
    # Two batches of several utterances; stopping after one step leaves the epoch open.
    settings = ["train.max_steps=1", "train.max_batch_seconds=20", *DETERMINISTIC]
    run_training(train_command(tmp_path / "one", manifest, *settings))
    two = train_command(tmp_path / "two", manifest, *settings)
    torchrun = ["torchrun", "--standalone", "--nproc_per_node", "2", *two[1:]]
    result = run_training(torchrun)
    assert "2 process(es)" in result.stdout
    one_state = torch.load(tmp_path / "one" / "last.pt", weights_only=False)
    two_state = torch.load(tmp_path / "two" / "last.pt", weights_only=False)
    assert one_state["position"]["order"] == two_state["position"]["order"]
    assert len(one_state["position"]["order"][0]) >= 2  # the batch really was split
    # One Adam step moves weights by up to lr * warmup factor = 2.5e-4; Adam's g / (|g| + eps)
    # turns summation-order rounding of near-zero gradients into ~1e-6 differences.
    step = 0.005 / 20
    for name, value in one_state["model"].items():
        torch.testing.assert_close(two_state["model"][name], value, rtol=1e-4, atol=step / 25)


def test_a_time_budget_ends_the_schedule_and_holds_across_resumes(
    tmp_path: Path, speech_dir: Path
) -> None:
    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir, count=8)
    budget = ["train.max_minutes=0.1", "train.lr_schedule=minutes", "train.epochs=1000"]
    out = tmp_path / "exp"
    started = time.monotonic()
    result = run_training(train_command(out, manifest, f"train.valid_manifest={manifest}", *budget))
    assert 6 <= time.monotonic() - started < 120
    assert "stopping at step" in result.stdout
    state = torch.load(out / "last.pt", weights_only=False)
    position = state["position"]
    # The stop validated the last weights (mid-epoch "final validation", or the epoch's own
    # validation when the budget ran out on an epoch's last batch).
    assert position["history"][-1]["step"] == position["step"]
    assert 6 <= position["seconds"] < 6 + 30 and position["epoch"] < 1000
    # The cosine ran over the 6 s: the last step used (about) the final learning rate.
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.005 * 0.3, rel=1e-2)
    assert (out / "best.pt").is_file() and (out / "best_bundle" / "model.safetensors").is_file()
    assert "training time: 0.1 min" in (out / "bundle" / "README.md").read_text()

    # The budget is spent: a resumed run takes no further step and rewrites the same bundle.
    weights = load_file(out / "bundle" / "model.safetensors")
    run_training(train_command(out, manifest, *budget) + ["--resume"])
    resumed = torch.load(out / "last.pt", weights_only=False)["position"]
    assert resumed["step"] == position["step"] and resumed["seconds"] >= position["seconds"]
    again = load_file(out / "bundle" / "model.safetensors")
    assert again.keys() == weights.keys()
    assert all(torch.equal(again[name], value) for name, value in weights.items())


def test_a_run_killed_before_its_final_validation_resumes_to_validate_only(
    tmp_path: Path, speech_dir: Path
) -> None:
    """A kill between the budget's last step (its checkpoint) and the final validation: the
    resumed run validates those weights and takes no further step."""
    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir, count=8)
    settings = [
        f"train.valid_manifest={manifest}",
        "train.max_steps=2",
        "train.max_batch_seconds=6",
    ]
    out = tmp_path / "exp"
    run_training(train_command(out, manifest, *settings))
    state = torch.load(out / "last.pt", weights_only=False)
    position = state["position"]
    assert position["step"] == 2 and position["batch"] < len(position["order"])  # mid-epoch
    assert position["history"][-1]["step"] == 2
    position["history"].pop()  # as the checkpoint of step 2 left it
    torch.save(state, out / "last.pt")
    result = run_training(train_command(out, manifest, *settings) + ["--resume"])
    assert "final validation" in result.stdout and "stopping at step" not in result.stdout
    resumed = torch.load(out / "last.pt", weights_only=False)
    assert resumed["position"]["step"] == 2 and resumed["position"]["history"][-1]["step"] == 2
    for name, value in state["model"].items():
        assert torch.equal(resumed["model"][name], value), name


def test_lr_factor_follows_the_further_of_steps_and_time() -> None:
    assert lr_factor(9, warmup=10, total=110, final_ratio=0.1) == 1.0
    assert lr_factor(60, warmup=10, total=110, final_ratio=0.1) == pytest.approx(0.55)
    assert lr_factor(20, 10, 110, 0.1, time_progress=0.5) == pytest.approx(0.55)
    assert lr_factor(20, 10, 110, 0.1, time_progress=2.0) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="max_minutes"):
        Config.from_dict({"train": {"lr_schedule": "minutes"}})


def test_training_starts_from_a_bundle(
    tmp_path: Path, speech_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """train.init: the bundle's weights, tokenizer and CMVN start the run (a learning rate
    of 1e-12 leaves them as they were after a step); wider layers start from the bundle's
    model widened; settings that widening cannot reach are refused."""
    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir, count=4)
    first = tmp_path / "first"
    run_training(train_command(first, manifest, "train.max_steps=1"))
    bundle = first / "bundle"
    more = tmp_path / "more"
    overrides = [f"train.init={bundle}", "train.max_steps=1", "train.lr=0.000000000001"]
    result = run_training(train_command(more, manifest, *overrides))
    assert f"starting from {bundle}" in result.stdout
    start = load_model(bundle)
    weights = final_weights(more)
    for name, value in start.model.state_dict().items():
        assert torch.allclose(weights[name], value, atol=1e-6), name
    for name in ("tokens.txt", "cmvn.json"):
        assert (more / "bundle" / name).read_bytes() == (bundle / name).read_bytes()
    # wider layers: the bundle's model widened (training.widen), its weights in place
    wider = tmp_path / "wider"
    result = run_training(train_command(wider, manifest, *overrides, "model.decoder.units=160"))
    assert "widened" in result.stdout
    grown = final_weights(wider)["decoder.cells.0.weight_hh"]
    old = start.model.state_dict()["decoder.cells.0.weight_hh"]
    assert grown.shape == (4 * 160, 160)
    assert torch.allclose(grown[:128, :128], old[:128], atol=1e-6)
    assert float(grown[:128, 128:].abs().max()) < 1e-6
    refused = subprocess.run(
        train_command(tmp_path / "deeper", manifest, *overrides, "model.decoder.layers=2"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode != 0 and "do not fit this run's model settings" in refused.stderr
    assert "model.decoder.layers differs" in refused.stderr
    # other frames: the bundle's weights and CMVN would load and read the wrong features
    other = train_command(
        tmp_path / "other", manifest, *overrides, "model.features.frame_shift_ms=12.5"
    )
    error = train_here(capsys, other, 2)
    assert "model.features.frame_shift_ms: 10.0 there, 12.5 here" in error
    assert not (tmp_path / "other").exists()


def run_files(out: Path) -> dict[str, bytes]:
    """Every file of a run directory, by path, with its bytes."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def train_here(capsys: pytest.CaptureFixture[str], command: list[str], code: int = 0) -> str:
    """Run ``train_command``'s training in this process (no interpreter start-up: seconds
    instead of ten); its stdout, or with ``code`` 2 its one-line error."""
    assert main(command[3:]) == code
    captured = capsys.readouterr()
    if code == 2:
        assert captured.err.startswith("asr train: error:") and captured.err.count("\n") == 1
        return captured.err
    return captured.out


def test_a_resume_with_other_model_settings_is_refused_before_the_run_is_touched(
    tmp_path: Path, speech_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--resume with a model setting that differs from the checkpoint's names it and leaves
    every file as it was (config.json included, so the right resume still works); budgets may
    change on resume."""
    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir, count=4)
    out = tmp_path / "exp"
    settings = ["train.max_steps=1", "train.max_batch_seconds=4"]
    train_here(capsys, train_command(out, manifest, *settings))
    before = run_files(out)
    wrong = train_command(out, manifest, *settings, "model.decoder.units=64") + ["--resume"]
    assert "model.decoder.units: 128 there, 64 now" in train_here(capsys, wrong, 2)
    assert run_files(out) == before
    again = ["train", "--config", str(out / "config.json"), "train.max_steps=2"]
    stdout = train_here(capsys, ["", "", "", *again, "--out", str(out), "--resume"])
    assert "resumed at epoch 1, batch 1, step 1" in stdout
    assert torch.load(out / "last.pt", weights_only=False)["position"]["step"] == 2
    assert Config.load(out / "config.json").train.max_steps == 2


def test_a_fresh_run_into_a_run_directory_needs_overwrite(
    tmp_path: Path, speech_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --resume a run directory's checkpoints and bundles are not replaced unless
    --overwrite says so; then none of the old run's outputs stays."""
    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir, count=4)
    out = tmp_path / "exp"
    first = ["train.max_steps=2", "train.max_batch_seconds=4", f"train.valid_manifest={manifest}"]
    train_here(capsys, train_command(out, manifest, *first))
    assert (out / "best.pt").is_file() and (out / "best_bundle").is_dir()
    before = run_files(out)
    again = train_command(out, manifest, "train.max_steps=1", "train.max_batch_seconds=4")
    error = train_here(capsys, again, 2)
    assert f"{out} holds a run (last.pt, best.pt, bundle, best_bundle)" in error
    assert "add --resume to continue it, --overwrite to start afresh" in error
    assert run_files(out) == before
    train_here(capsys, again + ["--overwrite"])
    assert torch.load(out / "last.pt", weights_only=False)["position"]["step"] == 1
    assert not (out / "best.pt").exists() and not (out / "best_bundle").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_saves_the_step_and_the_run_resumes(
    tmp_path: Path, speech_dir: Path, capsys: pytest.CaptureFixture[str], signum: signal.Signals
) -> None:
    """SIGINT (Ctrl-C) or SIGTERM to a training process: the step finishes, last.pt holds it,
    the run says how to go on and exits 128 + the signal; --resume continues from that step."""
    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir, count=8)
    out = tmp_path / "exp"
    # max_steps only bounds a run that fails to stop
    settings = ["train.max_batch_seconds=4", "train.checkpoint_every=0", "train.max_steps=100"]
    process = start_training(out, manifest, *settings)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("Ctrl-C or SIGTERM stops"):
            process.send_signal(signum)
            break
    rest = process.stdout.read()
    assert process.wait(timeout=60) == 128 + signum
    step = torch.load(out / "last.pt", weights_only=False)["position"]["step"]
    assert step >= 1 and f"interrupted after step {step}: {out}/last.pt saved" in rest
    assert f"--config {out}/config.json --out {out} --resume" in rest
    assert not (out / "bundle").exists()  # not finished: no final bundle
    resume = train_command(out, manifest, *settings, f"train.max_steps={step + 1}") + ["--resume"]
    assert f"step {step}\n" in train_here(capsys, resume).split("resumed at", 1)[1]
    assert torch.load(out / "last.pt", weights_only=False)["position"]["step"] == step + 1


BAD_VALUES = {
    "train.grad_clip=0": "train.grad_clip must be above 0, got 0.0",
    "train.grad_clip=-5": "train.grad_clip must be above 0",
    "model.ctc_weight=1.5": "model.ctc_weight must be within 0..1, got 1.5",
    "train.max_steps=-1": "train.max_steps must be at least 0",
    "train.max_minutes=-2": "train.max_minutes must be at least 0",
    "train.valid_decode_max=-1": "train.valid_decode_max must be at least 0",
    "train.final_lr_ratio=2": "train.final_lr_ratio must be within 0..1",
    "train.warmup_steps=-1": "train.warmup_steps must be at least 0",
    "train.label_smoothing=1": "train.label_smoothing must be at least 0 and below 1",
    "train.threads=-1": "train.threads must be at least 0",
    "train.epochs=0": "train.epochs must be at least 1",
    "train.lr=0": "train.lr must be above 0",
    "train.seed=-1": "train.seed must be at least 0",
    "model.attention.dim=0": "model.attention.dim must be at least 1",
    "model.decoder.layers=0": "model.decoder.layers must be at least 1",
    "model.encoder.units=0": "model.encoder.units must be at least 1",
    "model.encoder.reductions=[2,0]": "model.encoder.reductions must each be at least 1",
    "model.encoder.dropout=1": "model.encoder.dropout must be at least 0 and below 1",
    "model.features.frame_shift_ms=0": "model.features.frame_shift_ms must be above 0",
    "decode.beam_size=0": "decode.beam_size must be at least 1",
    "decode.ctc_weight=-0.1": "decode.ctc_weight must be at least 0 and below 1",
    "distill.valid_every=0": "distill.valid_every must be at least 1",
    "distill.log_every=0": "distill.log_every must be at least 1",
    "distill.checkpoint_every=0": "distill.checkpoint_every must be at least 1",
    "model.encoder.reductions=[2,2": "override 'model.encoder.reductions=[2,2': not a valid value",
}


def test_bad_config_values_are_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Out-of-range values and malformed overrides or files fail in one line naming the key,
    override or file, before any work; a bundle's config.json is held to the same rules
    (serve and eval); YAML 1.1's text "1e-3" is read as the number it is."""
    out = tmp_path / "out"
    for override, message in BAD_VALUES.items():
        assert main(["train", "--config", str(TINY), "--out", str(out), override]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (override, err)
    broken = tmp_path / "broken.yaml"
    broken.write_text("train:\n  lr: [\n")
    assert main(["train", "--config", str(broken), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{broken}: not valid YAML" in err and err.count("\n") == 1, err
    assert not out.exists()
    assert Config.load(TINY, ["train.lr=1e-3", "distill.lr=2E-5"]).train.lr == 0.001
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "config.json").write_text(
        json.dumps({"format_version": 1, "model": {"ctc_weight": 2}})
    )
    with pytest.raises(ValueError, match="model.ctc_weight must be within 0..1"):
        load_model(tmp_path / "bundle")


def test_help_resumes_from_the_config_a_run_writes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = capsys.readouterr().out
    assert "exp/default/config.json --out exp/default --resume" in help_text
    assert "config.yaml" not in help_text


def test_init_refuses_a_bundle_of_other_frames(tmp_path: Path) -> None:
    """train.init's bundle must have been trained on this run's frames: the front end, the
    filterbank and the log-mel floor; the Whisper student, its chunk and int8 scheme may change
    (the recipe goes on from a bundle over a new student)."""
    from training.train import check_init_front_end

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    whisper = ["model.frontend=whisper", "model.whisper.chunk=8"]
    Config.load(TINY, whisper).save(bundle / "config.json")
    check_init_front_end(Config.load(TINY, [*whisper[:1], "model.whisper.chunk=16"]), bundle)
    check_init_front_end(Config.load(TINY, [*whisper, "model.whisper.quantization=rows"]), bundle)
    with pytest.raises(ValueError, match="model.whisper.floor: -7.0 there, -6.0 here"):
        check_init_front_end(Config.load(TINY, [*whisper, "model.whisper.floor=-6"]), bundle)
    with pytest.raises(ValueError, match="model.frontend: 'whisper' there, 'fbank' here"):
        check_init_front_end(Config.load(TINY), bundle)


def test_unknown_config_key_fails_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(TINY.read_text() + "\n" + "extra_section: {a: 1}\n")
    out = tmp_path / "out"
    assert main(["train", "--config", str(config), "--out", str(out)]) == 2
    assert "extra_section" in capsys.readouterr().err
    assert main(["train", "--config", str(TINY), "--out", str(out), "train.lrr=1"]) == 2
    assert "train.lrr" in capsys.readouterr().err
    assert not out.exists()


def test_bad_manifest_lines_are_skipped_with_a_count(tmp_path: Path, speech_dir: Path) -> None:
    manifest = write_manifest(tmp_path / "train.jsonl", speech_dir, count=4)
    (tmp_path / "empty.wav").write_bytes(b"")
    with open(manifest, "a") as f:
        f.write('{"id": "missing", "audio": "nope.wav", "text": "a b", "duration": 1.0}\n')
        f.write('{"id": "empty-audio", "audio": "empty.wav", "text": "a b", "duration": 1.0}\n')
        f.write(
            json.dumps(
                {
                    "id": "no-text",
                    "audio": str(speech_dir / "utt00.wav"),
                    "text": " ",
                    "duration": 1.0,
                }
            )
            + "\n"
        )
        f.write("{not json\n")
    result = run_training(train_command(tmp_path / "exp", manifest, "train.max_steps=1"))
    assert "skipped 4 of 8 lines; 4 utterances kept" in result.stderr
    for uid in ("missing", "empty-audio", "no-text"):
        assert f"skipping {uid}" in result.stderr
    assert (tmp_path / "exp" / "bundle" / "model.safetensors").is_file()


def test_batches_are_bucketed_bounded_and_seeded() -> None:
    frames = [100, 400, 250, 90, 300, 310, 120, 800, 60, 200]
    batches = make_batches(frames, 700, seed=3, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(len(frames)))
    for batch in batches:
        assert len(batch) == 1 or max(frames[i] for i in batch) * len(batch) <= 700
    assert batches == make_batches(frames, 700, seed=3, epoch=0)
    assert any(make_batches(frames, 700, seed=3, epoch=e) != batches for e in range(1, 5))


def test_specaugment_masks_with_zeros_inside_lengths() -> None:
    torch.manual_seed(0)
    augment = SpecAugment(
        SpecAugmentConfig(freq_masks=2, freq_width=10, time_masks=2, time_width=20)
    )
    x = torch.ones(3, 200, 80)
    lens = torch.tensor([200, 120, 50])
    y = augment(x, lens)
    assert y.shape == x.shape and set(y.unique().tolist()) <= {0.0, 1.0}
    assert (y == 0).any() and (y == 1).float().mean() > 0.5
    time_masked = (y == 0).all(dim=2)  # whole frames masked
    assert not time_masked[2, 50:].any() and time_masked[2].sum() <= 10  # 2 masks <= 10% of 50


def test_a_teacher_share_moves_that_share_of_batches_to_the_teacher_states(
    tmp_path: Path,
) -> None:
    import numpy as np

    from training.dataset import Utterance, UtteranceDataset, teacher_batches

    batches = make_batches([10 + i % 7 for i in range(200)], 40, seed=3, epoch=0)
    assert teacher_batches(batches, 200, 0.0, 3, 0) == batches
    mixed = teacher_batches(batches, 200, 0.3, 3, 0)
    assert mixed == teacher_batches(batches, 200, 0.3, 3, 0)  # drawn from (seed, epoch)
    assert mixed != teacher_batches(batches, 200, 0.3, 3, 1)
    moved = [m for m, b in zip(mixed, batches) if m != b]
    assert all(m == [200 + i for i in b] for m, b in zip(mixed, batches) if m != b)
    assert 0.15 < len(moved) / len(batches) < 0.45
    assert all(min(b) >= 200 for b in teacher_batches(batches, 200, 1.0, 3, 0))

    np.save(tmp_path / "s.npy", np.zeros((3, 2), np.float32))
    np.save(tmp_path / "t.npy", np.ones((3, 2), np.float32))
    utt = Utterance("u", tmp_path / "s.npy", 3, "a", [1], tmp_path / "t.npy")
    data = UtteranceDataset([utt])
    assert data[0][1].sum() == 0 and data[1][1].sum() == 6


def test_validation_wer_reads_utterances_of_every_length() -> None:
    """train.valid_decode_max picks utterances spread over the lengths, the longest with the
    shortest, in any order of the set; 0 decodes all of them."""
    lengths = [7, 3, 9, 1, 5, 10, 2, 8, 4, 6]
    valid = [types.SimpleNamespace(id=f"u{n:02d}", frames=n) for n in lengths]
    trainer = types.SimpleNamespace(valid_set=valid, cfg=types.SimpleNamespace(valid_decode_max=3))
    assert Trainer._decoded_ids(trainer) == {"u01", "u05", "u10"}  # type: ignore[arg-type]
    trainer.cfg.valid_decode_max = 0
    assert Trainer._decoded_ids(trainer) == {u.id for u in valid}  # type: ignore[arg-type]
