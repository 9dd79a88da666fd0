"""`asr eval`: per-utterance JSON lines, a summary table, attention plots, PER folding."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import soundfile

from asr.bundle import load_model
from asr.cli import main
from asr.lm import LM_FILE, TokenLM
from tests.conftest import load_speech, speech_files
from training.evaluate import evaluate, train_word_counts
from training.manifest import Entry
from training.plots import DPI, FIGSIZE


def test_eval_writes_results_summary_and_plot(
    tmp_path: Path, tiny_bundle: Path, speech_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "test.jsonl"
    with open(manifest, "w") as f:
        for wav, text in speech_files(speech_dir)[:3]:
            info = soundfile.info(str(wav))
            row = {"id": wav.stem, "audio": str(wav), "text": text, "duration": info.duration}
            f.write(json.dumps(row) + "\n")
        f.write('{"id": "gone", "audio": "gone.wav", "text": "x", "duration": 1.0}\n')
    out = tmp_path / "eval"
    args = ["eval", "--model", str(tiny_bundle), "--manifest", str(manifest), "--out", str(out)]
    assert main([*args, "--plot", "utt01"]) == 0
    captured = capsys.readouterr()
    assert "WER" in captured.out and "CER" in captured.out and "3 utterances" in captured.out
    assert "skipping gone" in captured.err

    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == ["utt00", "utt01", "utt02"]
    assert all({"id", "ref", "hyp", "errors"} <= r.keys() for r in records)
    recognizer = load_model(tiny_bundle)
    wav, _ = speech_files(speech_dir)[0]
    samples, rate = soundfile.read(str(wav), dtype="float32")
    assert records[0]["hyp"] == recognizer.transcribe(samples, rate)  # the offline/streaming path
    summary = json.loads((out / "summary.json").read_text())
    assert summary["utterances"] == 3
    assert summary["wer"]["errors"] == sum(r["errors"] for r in records)

    image = matplotlib.image.imread(out / "utt01.png")
    assert image.shape[:2] == (int(FIGSIZE[1] * DPI), int(FIGSIZE[0] * DPI))
    assert np.ptp(image[..., :3]) > 0  # not a blank canvas

    assert main([*args, "--plot", "nope"]) == 2
    assert "nope" in capsys.readouterr().err

    # The same manifest as training text: every reference word was seen at least once.
    assert main([*args, "--train-manifest", str(manifest)]) == 0
    assert "times in training text" in capsys.readouterr().out
    bands = json.loads((out / "summary.json").read_text())["by_train_frequency"]
    assert [b["band"] for b in bands] == ["0", "1-4", "5-49", "50-499", "500+"]
    assert bands[0]["words"] == 0
    assert sum(b["words"] for b in bands) == summary["wer"]["reference_length"]
    deleted_or_substituted = summary["wer"]["errors"] - summary["wer"]["insertions"]
    assert sum(b["errors"] for b in bands) == deleted_or_substituted
    assert main([*args, "--train-manifest", str(manifest), "--phones"]) == 2
    assert "--phones" in capsys.readouterr().err


def test_phone_scoring_folds_to_39(tiny_bundle: Path, speech_dir: Path) -> None:
    recognizer = load_model(tiny_bundle)
    recognizer.transcribe = lambda samples, rate: "aa aa ih sil"  # type: ignore[method-assign]
    wav, _ = speech_files(speech_dir)[0]
    entry = Entry("u1", str(wav), "aa ao ix pau", 2.0)
    summary, records = evaluate(recognizer, [entry], phones=True)
    # ao -> aa, ix -> ih, pau -> sil: every phone matches after folding.
    assert summary["per"]["rate"] == 0.0 and records[0]["errors"] == 0
    summary, _ = evaluate(recognizer, [entry], phones=False)
    assert summary["wer"]["errors"] == 3


def test_eval_scores_each_value_of_a_manifest_field(
    tmp_path: Path, tiny_bundle: Path, speech_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "test.jsonl"
    engines = ["flite", "piper", "flite"]
    with open(manifest, "w") as f:
        for (wav, text), engine in zip(speech_files(speech_dir)[:3], engines):
            info = soundfile.info(str(wav))
            row = {"id": wav.stem, "audio": str(wav), "text": text, "duration": info.duration}
            f.write(json.dumps({**row, "engine": engine, "aug": []}) + "\n")
    out = tmp_path / "eval"
    args = ["eval", "--model", str(tiny_bundle), "--manifest", str(manifest), "--out", str(out)]
    assert main([*args, "--by", "engine"]) == 0
    assert "engine" in capsys.readouterr().out
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    rows = json.loads((out / "summary.json").read_text())["by_field"]["engine"]
    assert [(r["value"], r["utterances"]) for r in rows] == [("flite", 2), ("piper", 1)]
    for row, members in zip(rows, ([0, 2], [1])):
        words = sum(len(records[i]["ref"].split()) for i in members)
        assert row["wer"]["reference_length"] == words
        assert row["wer"]["errors"] == sum(records[i]["errors"] for i in members)

    for field, problem in (("speaker", "no such field"), ("aug", "a list or object")):
        assert main([*args, "--by", field]) == 2
        assert problem in capsys.readouterr().err


def test_undecodable_audio_costs_only_its_utterance_and_plots_ignore_the_lm(
    tmp_path: Path, tiny_bundle: Path, speech_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = Path(shutil.copytree(tiny_bundle, tmp_path / "bundle"))
    recognizer = load_model(bundle)
    files = speech_files(speech_dir)[:2]
    TokenLM.train([recognizer.tokenizer.encode(t) for _, t in files], 40, 3).save(bundle / LM_FILE)
    config = json.loads((bundle / "config.json").read_text())
    config["decode"].update(lm_weight=0.5, beam_size=2)  # a bundle served with its LM
    (bundle / "config.json").write_text(json.dumps(config))
    manifest = tmp_path / "test.jsonl"
    with open(manifest, "w") as f:
        for wav, text in files:
            info = soundfile.info(str(wav))
            row = {"id": wav.stem, "audio": str(wav), "text": text, "duration": info.duration}
            f.write(json.dumps({**row, "engine": "espeak"}) + "\n")
        # passes the header-only manifest check, but holds no sample at 16 kHz
        sliver = {**row, "id": "sliver", "engine": "espeak", "offset": 0.5, "end": 0.50001}
        f.write(json.dumps(sliver) + "\n")
    out = tmp_path / "eval"
    args = ["eval", "--model", str(bundle), "--manifest", str(manifest), "--out", str(out)]
    assert main([*args, "--by", "engine", "--plot", files[0][0].stem]) == 0
    captured = capsys.readouterr()
    assert "skipping sliver: " in captured.err
    assert "1 more could not be decoded" in captured.out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["utterances"] == 2 and [s["id"] for s in summary["skipped"]] == ["sliver"]
    assert summary["by_field"]["engine"][0]["utterances"] == 2
    assert (out / f"{files[0][0].stem}.png").is_file()
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert records[0]["hyp"] == load_model(bundle).transcribe(*load_speech(files[0][0]))


def test_train_word_counts_read_the_text_alone(tmp_path: Path) -> None:
    manifest = tmp_path / "train.jsonl"
    rows = [("a", "The cat"), ("b", "the dog the end")]
    manifest.write_text(
        "".join(
            json.dumps({"id": i, "audio": f"elsewhere/{i}.wav", "text": t, "duration": 1.0}) + "\n"
            for i, t in rows
        )
    )
    assert train_word_counts(manifest) == {"the": 3, "cat": 1, "dog": 1, "end": 1}
