"""asr distill for real, on a tiny Whisper-shaped teacher: teacher states are cached once, the
student gets nearer the teacher on held-out audio, and a resumed run ends where an
uninterrupted one does."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from asr.cli import main
from asr.whisper_encoder import WhisperDims, WhisperEncoder, load_encoder
from tests.conftest import REPO, load_bench, speech_files
from training.distill import save_encoder

DIMS = WhisperDims(n_mels=80, d_model=32, n_heads=4, n_layers=2, n_ctx=1500)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, speech_dir: Path) -> Path:
    """A random tiny teacher with Whisper's sinusoidal positions, and train/valid manifests."""
    root = tmp_path_factory.mktemp("distill")
    torch.manual_seed(0)
    teacher = WhisperEncoder(DIMS)
    t = torch.arange(DIMS.n_ctx).unsqueeze(1)
    rate = torch.exp(-np.log(10000) / (DIMS.d_model // 2 - 1) * torch.arange(DIMS.d_model // 2))
    teacher.positions.copy_(torch.cat([torch.sin(t * rate), torch.cos(t * rate)], dim=1))
    save_encoder(teacher, root / "teacher", {})
    files = speech_files(speech_dir)
    for name, part in (("train", files[:16]), ("valid", files[16:])):
        with open(root / f"{name}.jsonl", "w") as f:
            for i, (wav, text) in enumerate(part):
                row = {"id": f"{name}{i}", "audio": str(wav), "text": text, "duration": 2.0}
                f.write(json.dumps(row) + "\n")
    (root / "config.yaml").write_text(
        f"""model:
  whisper: {{teacher: {root / "teacher"}, chunk: 4, left_context: 16}}
distill:
  train_manifests: [{root / "train.jsonl"}]
  valid_manifest: {root / "valid.jsonl"}
  cache_dir: {root / "cache"}
  lr: 1.0e-3
  position_offset_share: 0.0
  warmup_steps: 2
  max_batch_seconds: 8
  epochs: 50
  valid_every: 1000
  checkpoint_every: 4
  log_every: 100
"""
    )
    return root


def _distill(setup: Path, out: Path, *overrides: str, resume: bool = False) -> list[dict]:
    args = ["distill", "--config", str(setup / "config.yaml"), "--out", str(out), *overrides]
    assert main(args + (["--resume"] if resume else [])) == 0
    return torch.load(out / "last.pt", weights_only=False)["history"]


def test_distillation_brings_the_student_nearer_the_teacher(setup: Path) -> None:
    history = _distill(setup, setup / "run", "distill.max_steps=60")
    assert len(list((setup / "cache").glob("*.npz"))) == 22  # every utterance, once
    start, end = history[0], history[-1]
    assert start["step"] == 0 and end["step"] == 60
    assert end["rel_mse"] < 0.7 * start["rel_mse"] and end["cosine"] > start["cosine"]
    student = load_encoder(setup / "run" / "student")
    with safe_open(str(setup / "run" / "student" / "encoder.safetensors"), "pt") as f:
        meta = f.metadata()
    streaming = {"chunk": 4, "left_context": 16, "prime": 0, "silence": -0.75}
    assert json.loads(meta["streaming"]) == streaming
    assert float(meta["heldout_rel_mse"]) == pytest.approx(end["rel_mse"], abs=1e-5)
    teacher = load_encoder(setup / "teacher")
    assert not torch.equal(student.layers[0].qkv.weight, teacher.layers[0].qkv.weight)


def test_a_primed_student_distils_from_its_silence(setup: Path) -> None:
    """With model.whisper.prime the student learns its primed states (the teacher's targets
    are the audio's alone), and its file says so."""
    history = _distill(setup, setup / "primed", "distill.max_steps=30", "model.whisper.prime=4")
    assert history[-1]["rel_mse"] < 0.8 * history[0]["rel_mse"]
    with safe_open(str(setup / "primed" / "student" / "encoder.safetensors"), "pt") as f:
        assert json.loads(f.metadata()["streaming"])["prime"] == 4


def test_unlabelled_audio_needs_no_text(
    setup: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Distillation never reads the text: lines with an empty or absent text are all used."""
    rows = [json.loads(line) for line in (setup / "train.jsonl").read_text().splitlines()]
    for i, row in enumerate(rows):
        row["text"] = ""
        if i % 2:
            del row["text"]
    unlabelled = tmp_path / "unlabelled.jsonl"
    unlabelled.write_text("".join(json.dumps(row) + "\n" for row in rows))
    _distill(
        setup,
        tmp_path / "out",
        f"distill.train_manifests=[{unlabelled}]",
        f"distill.cache_dir={tmp_path / 'cache'}",
        "distill.max_steps=1",
    )
    assert f"teacher states (train): {len(rows)} utterances" in capsys.readouterr().out


def test_resumed_run_ends_where_an_uninterrupted_one_does(setup: Path) -> None:
    _distill(setup, setup / "whole", "distill.max_steps=8")
    _distill(setup, setup / "split", "distill.max_steps=4")
    _distill(setup, setup / "split", "distill.max_steps=8", resume=True)
    whole = load_encoder(setup / "whole" / "student").state_dict()
    split = load_encoder(setup / "split" / "student").state_dict()
    assert all(torch.equal(whole[k], split[k]) for k in whole)


def test_augmented_distillation_nears_the_teacher_and_resumes_exactly(setup: Path) -> None:
    """With every change on, the student still nears the teacher's clean states, differs
    from a student taught on clean input, and a resumed run draws the same changes."""
    kinds = ("distill.augment=[warp,colour,reverb,noise]", "distill.augment_share=0.5")
    history = _distill(setup, setup / "aug", "distill.max_steps=40", *kinds)
    assert history[-1]["rel_mse"] < 0.8 * history[0]["rel_mse"]
    _distill(setup, setup / "aug-whole", "distill.max_steps=8", *kinds)
    _distill(setup, setup / "aug-split", "distill.max_steps=4", *kinds)
    _distill(setup, setup / "aug-split", "distill.max_steps=8", *kinds, resume=True)
    whole = load_encoder(setup / "aug-whole" / "student").state_dict()
    split = load_encoder(setup / "aug-split" / "student").state_dict()
    assert all(torch.equal(whole[k], split[k]) for k in whole)
    clean = _distill(setup, setup / "clean8", "distill.max_steps=8")
    ours = load_encoder(setup / "clean8" / "student").state_dict()
    assert not torch.equal(ours["layers.0.qkv.weight"], whole["layers.0.qkv.weight"])
    assert clean[0] == _distill(setup, setup / "aug-whole", resume=True)[0]  # validation is clean


def test_augment_strength_probe_reads_the_cache_with_the_teacher(
    setup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each change moves the teacher from its clean states; an empty cache is refused."""
    _distill(setup, tmp_path / "cached", "distill.max_steps=1")  # the cache exists
    bench = load_bench("experiments/augment_strength")
    teacher = str(setup / "teacher")
    assert bench.main(["--cache", str(setup / "cache"), "--teacher", teacher, "--limit", "4"]) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if "| " in line]
    figures = {row[1].strip(): float(row[2]) for row in rows if row[2].strip()[0].isdigit()}
    assert list(figures) == ["warp", "colour", "reverb", "noise", "warp + colour + reverb + noise"]
    assert all(value > 0 for value in figures.values())
    with pytest.raises(SystemExit):
        bench.main(["--cache", str(tmp_path), "--teacher", teacher])
    assert "no cached teacher states" in capsys.readouterr().err


def test_resuming_a_finished_run_takes_no_step(setup: Path) -> None:
    """The budget is checked before a step: resumed at max_steps, the run neither steps,
    validates nor rewrites its student and checkpoint."""
    out = setup / "finished"
    history = _distill(setup, out, "distill.max_steps=2")
    student, last = out / "student" / "encoder.safetensors", out / "last.pt"
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (student, last)}
    assert _distill(setup, out, "distill.max_steps=2", resume=True) == history
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (student, last)} == before
    log = (out / "distill.log").read_text()
    assert "step 3" not in log and "step 2: distill.max_steps / max_minutes already reached" in log
    assert log.rstrip().endswith(f"student in {out / 'student'}")


def test_no_epochs_claims_no_student(setup: Path, capsys: pytest.CaptureFixture) -> None:
    """distill.epochs=0 trains nothing: the run says so rather than naming a student it never
    wrote (or the config refuses the value up front)."""
    out = setup / "no-epochs"
    args = ["distill", "--config", str(setup / "config.yaml"), "--out", str(out)]
    code = main([*args, "distill.epochs=0"])
    said = capsys.readouterr()
    if code == 2:  # refused by the config's validation
        assert "epochs" in said.err
    else:
        assert code == 0 and "nothing was trained" in said.out
        assert "student in" not in said.out + (out / "distill.log").read_text()
    assert not (out / "student").exists()


def test_a_student_continues_from_an_earlier_one(setup: Path) -> None:
    first = _distill(setup, setup / "first", "distill.max_steps=8")
    init = f"distill.init={setup / 'first' / 'student'}"
    second = _distill(setup, setup / "second", "distill.max_steps=8", init)
    assert second[0]["rel_mse"] == pytest.approx(first[-1]["rel_mse"], rel=1e-3)  # float16 saved
    assert second[0]["rel_mse"] < first[0]["rel_mse"]
    assert second[-1]["rel_mse"] < second[0]["rel_mse"]
    # steps that all read worse than the earlier student leave it as the best
    init_weights = load_encoder(setup / "first" / "student").state_dict()
    worse = _distill(setup, setup / "worse", "distill.max_steps=2", init, "distill.lr=0.3")
    assert worse[-1]["rel_mse"] > worse[0]["rel_mse"]
    kept = load_encoder(setup / "worse" / "student").state_dict()
    assert all(torch.equal(kept[k], init_weights[k]) for k in kept)
    assert "step 0 (distill.init): held-out" in (setup / "worse" / "distill.log").read_text()


def test_low_rank_adapters_train_only_the_adapters(setup: Path) -> None:
    history = _distill(setup, setup / "lora", "distill.max_steps=12", "distill.adapter_rank=4")
    assert history[-1]["rel_mse"] < history[0]["rel_mse"]
    student, teacher = load_encoder(setup / "lora" / "student"), load_encoder(setup / "teacher")
    assert torch.equal(student.conv1.weight, teacher.conv1.weight)  # frozen, not adapted
    assert not torch.equal(student.layers[1].fc2.weight, teacher.layers[1].fc2.weight)  # merged


def test_bfloat16_autocast_learns_as_float32_does(setup: Path) -> None:
    full = _distill(setup, setup / "f32", "distill.max_steps=20")
    half = _distill(setup, setup / "bf16", "distill.max_steps=20", "distill.precision=bfloat16")
    assert half[0]["rel_mse"] == full[0]["rel_mse"]  # validation runs in float32
    assert half[-1]["rel_mse"] < 0.8 * half[0]["rel_mse"]
    assert half[-1]["rel_mse"] == pytest.approx(full[-1]["rel_mse"], rel=0.05)
    ours = load_encoder(setup / "bf16" / "student").layers[0].qkv.weight
    theirs = load_encoder(setup / "f32" / "student").layers[0].qkv.weight
    assert not torch.equal(ours, theirs)  # the steps really ran under autocast


def test_bad_settings_fail_before_any_work(
    setup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["distill", "--config", str(setup / "config.yaml"), "--out", str(tmp_path)]
    assert main([*base, "distill.valid_manifest=nowhere.jsonl"]) == 2
    assert "manifest nowhere.jsonl does not exist" in capsys.readouterr().err
    assert main([*base, "distill.precision=float16"]) == 2
    assert "float16" in capsys.readouterr().err
    assert main([*base, "model.whisper.chunk=0"]) == 2
    assert "model.whisper.chunk must be at least 1, got 0" in capsys.readouterr().err
    for every in ("valid_every", "log_every", "checkpoint_every"):  # divisors of the step
        assert main([*base, f"distill.{every}=0"]) == 2
        assert f"distill.{every} must be at least 1, got 0" in capsys.readouterr().err
    assert main([*base, "distill.augment=[echo]"]) == 2
    assert "distill.augment[0] must be one of ['warp', 'colour', 'reverb', 'noise']" in (
        capsys.readouterr().err
    )
    assert main([*base, "distill.augment_share=1.5"]) == 2
    assert "distill.augment_share must be within 0..1, got 1.5" in capsys.readouterr().err
    assert main([*base, "distill.init=nowhere"]) == 2
    assert "nowhere" in capsys.readouterr().err
    assert main([*base, "--resume"]) == 2
    assert "last.pt does not exist" in capsys.readouterr().err
    assert not (tmp_path / "config.json").exists()


def test_precision_bench_runs_both_from_the_same_start(
    setup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("experiments/distill_precision")
    figures = tmp_path / "figures.json"
    config = ["--config", str(setup / "config.yaml"), "--out", str(tmp_path / "runs")]
    assert bench.main([*config, "--steps", "3", "--json", str(figures)]) == 0
    runs = json.loads(figures.read_text())["runs"]
    assert list(runs) == ["float32", "bfloat16"]
    assert runs["float32"]["start"] == runs["bfloat16"]["start"]
    assert all(run["steps"] == 3 and run["step_s"] > 0 for run in runs.values())
    assert runs["float32"]["end"] != runs["bfloat16"]["end"]
    table = capsys.readouterr().out
    assert "| bfloat16 | 3 |" in table and "bfloat16 / float32 step time:" in table
    with pytest.raises(SystemExit) as stop:
        bench.main([*config, "--steps", "0"])
    assert stop.value.code == 2 and "--steps must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_saves_the_step_and_the_run_resumes(
    setup: Path, signum: signal.Signals
) -> None:
    """Ctrl-C or SIGTERM: the step finishes, last.pt holds it, the run exits 128 + the signal,
    and --resume goes on from that step."""
    out = setup / f"signalled-{signum.name}"
    command = [sys.executable, "-m", "asr.cli", "distill", "--config", str(setup / "config.yaml")]
    command += ["--out", str(out), "distill.max_steps=5000"]  # a bound on a run that fails to stop
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("step 0 (the masked teacher)"):
            time.sleep(1.0)  # some steps into the run
            process.send_signal(signum)
            break
    rest = process.stdout.read()
    assert process.wait(timeout=60) == 128 + signum, rest
    step = torch.load(out / "last.pt", weights_only=False)["step"]
    assert 0 < step < 5000
    told = f"interrupted after step {step}: {out / 'last.pt'} saved; go on with asr distill"
    assert f"{told} --config {out}/config.json --out {out} --resume" in rest
    _distill(setup, out, f"distill.max_steps={step + 2}", resume=True)
    log = (out / "distill.log").read_text()
    assert f"resumed at step {step} " in log and f"student in {out / 'student'}" in log


# -- the decoder-level loss, on the bundle's own teacher, student and Whisper decoder ------
BUNDLE = REPO / "models" / "default"
HELD_OUT = REPO / "tests" / "data" / "heldout"


def _rows(split: str, start: int, count: int, **extra: str) -> list[dict]:
    lines = (HELD_OUT / f"{split}.jsonl").read_text().splitlines()[start : start + count]
    rows = [json.loads(line) for line in lines]
    return [{**r, "audio": str(HELD_OUT / r["audio"]), "text": "", **extra} for r in rows]


def _manifest(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_decoder_level_loss_pulls_the_students_words_towards_the_teachers(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """English clips get the teacher's transcript (others none), and a few steps of the
    decoder-level loss alone, from the masked teacher, lower it on held-out clips."""
    train = _rows("test_seen_voices", 0, 3) + _rows("test_unseen_voices", 4, 2)
    train += _rows("test_unseen_voices", 0, 2, language="cs")
    valid = _rows("test_seen_voices", 6, 3)
    out = tmp_path / "out"
    args = [
        "distill",
        "--config",
        str(REPO / "training" / "configs" / "distill.yaml"),
        "--out",
        str(out),
        f"model.whisper.teacher={BUNDLE / 'whisper_teacher.safetensors'}",
        f"distill.train_manifests=[{_manifest(tmp_path / 'train.jsonl', train)}]",
        f"distill.valid_manifest={_manifest(tmp_path / 'valid.jsonl', valid)}",
        f"distill.cache_dir={tmp_path / 'cache'}",
        f"distill.decoder={BUNDLE}",
        "distill.kl_weight=1",
        "distill.distance_weight=0",
        "distill.lr=1e-4",
        "distill.warmup_steps=0",
        "distill.max_batch_seconds=8",
        "distill.epochs=3",
        "distill.precision=float32",
        "distill.threads=1",
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    # espeak's "asked an unpremeditated question" reads as no speech: no transcript
    assert "teacher transcripts (train): 4 of 5 with a transcript" in printed
    assert len(list((tmp_path / "cache").glob("*.words16.npz"))) == 5 + 3  # not the Czech ones
    history = torch.load(out / "last.pt", weights_only=False)["history"]
    assert history[-1]["kl"] < 0.9 * history[0]["kl"]
    with safe_open(str(out / "student" / "encoder.safetensors"), "pt") as f:
        assert float(f.metadata()["heldout_kl"]) == pytest.approx(
            min(h["kl"] for h in history), abs=1e-4
        )


def test_the_decoder_level_loss_is_nil_at_the_teacher_and_reaches_the_states(
    tmp_path: Path,
) -> None:
    from asr.config import Config
    from training.distill import (
        Distiller,
        cache_teacher,
        cache_words,
        decoder_kl,
        load_batch,
        load_words,
    )
    from training.manifest import read_manifest

    config = Config.load(
        REPO / "training" / "configs" / "distill.yaml",
        [f"model.whisper.teacher={BUNDLE / 'whisper_teacher.safetensors'}"],
    )
    config.distill.decoder = str(BUNDLE)
    teacher = load_encoder(config.model.whisper.teacher)
    finals = Distiller(config, tmp_path)._finals(teacher)
    torch.set_num_threads(1)
    entries = read_manifest(
        _manifest(tmp_path / "m.jsonl", _rows("test_seen_voices", 0, 2)), require_text=False
    )[0]
    items = cache_teacher(entries, teacher, config.model.whisper, tmp_path / "cache", "t")
    cache_words(items, finals, 16, "w")
    vocabulary = finals.vocabulary
    words = load_words(items, vocabulary.prompt, vocabulary.end)
    _, frames, padded = load_batch(items)  # the teacher's states, as training reads them
    lengths = WhisperEncoder.output_lengths(frames)
    assert padded.shape[1] == int(lengths.max())
    at_teacher, positions = decoder_kl(finals, padded, lengths, words)
    assert positions == int(words.valid.sum()) > 4
    assert float(at_teacher) / positions < 2e-3  # the teacher's log-probabilities in float16
    moved = (padded + 0.3 * torch.randn_like(padded)).requires_grad_()
    kl, _ = decoder_kl(finals, moved, lengths, words)
    kl.backward()
    assert float(kl.detach()) / positions > 10 * float(at_teacher) / positions
    assert moved.grad is not None
    assert float(moved.grad[0, : int(lengths[0])].abs().sum()) > 0
    assert float(moved.grad[0, int(lengths[0]) :].abs().sum()) == 0  # padding is not read


def test_the_teacher_cache_is_keyed_by_the_teachers_weights_not_their_path(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A bundle copied to carry a new student names the same teacher by another path: its
    runs find the teacher's states already computed; another teacher's weights do not."""
    from asr.config import WhisperConfig
    from training.distill import cache_teacher
    from training.manifest import read_manifest

    entries = read_manifest(
        _manifest(tmp_path / "m.jsonl", _rows("test_seen_voices", 0, 2)), require_text=False
    )[0]
    teacher_file = BUNDLE / "whisper_teacher.safetensors"
    teacher = load_encoder(teacher_file)
    cache = tmp_path / "cache"
    cfg = WhisperConfig(teacher=str(teacher_file))
    first = cache_teacher(entries, teacher, cfg, cache, "t")
    assert "(2 computed" in capsys.readouterr().out
    (tmp_path / "copy").symlink_to(BUNDLE)
    moved = dataclasses.replace(cfg, teacher=str(tmp_path / "copy" / teacher_file.name))
    again = cache_teacher(entries, teacher, moved, cache, "t")
    assert "(0 computed" in capsys.readouterr().out
    assert [c.path for c in again] == [c.path for c in first]
    other = dataclasses.replace(cfg, teacher=str(BUNDLE / "whisper_encoder.safetensors"))
    cache_teacher(entries, teacher, other, cache, "t")
    assert "(2 computed" in capsys.readouterr().out


def test_a_manifest_given_twice_weighs_twice_and_is_encoded_once(
    setup: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    train = setup / "train.jsonl"
    _distill(
        setup,
        tmp_path / "out",
        f"distill.train_manifests=[{train},{train}]",
        f"distill.cache_dir={tmp_path / 'cache'}",
        "distill.max_steps=1",
    )
    assert "teacher states (train): 32 utterances (16 computed" in capsys.readouterr().out
