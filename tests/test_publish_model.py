"""The model cards' figures are counted from what they describe: the corpus, the cached
evaluations, the recipe's step times; the goals are judged on those figures."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import soundfile
import torch
from safetensors.torch import save_file

from asr.config import Config
from asr.speller import POLICY_FILE, PolicyEnergy, learnt_on
from asr.whisper_decoder import DECODER_FILE
from asr.whisper_text import TOKENIZER_FILE
from tests.conftest import WHISPER_OVERRIDES, build_bundle, espeak, speech_files
from tests.test_train import run_training, train_command
from training.recipes import gather, publish_model, results_table, whisper_card, whisper_publish
from training.recipes.first_gen_card import status
from training.recipes.gather import TITLES, corpus_facts
from training.recipes.whisper_card import baseline_text, goal_status, hours_minutes, speed_section
from training.recipes.whisper_goals import evaluate_goals
from training.recipes.whisper_publish import discover_splits, distill_command, read_steps

REPO = Path(__file__).resolve().parents[1]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_corpus_facts_count_the_manifests(tmp_path: Path) -> None:
    plan = {"hours": 8.0, "seed": 0, "jobs": 2, "aug_prob": 0.5, "test_size": 2, "dev_size": 1}
    (tmp_path / "plan.json").write_text(json.dumps(plan | {"engines": ["espeak=0.5", "piper"]}))
    train = [
        {"engine": "espeak", "voice": "en-us+m1", "duration": 1800.0, "aug": []},
        {"engine": "espeak", "voice": "en-gb+f2", "duration": 900.0, "aug": [{"kind": "noise"}]},
        {"engine": "espeak", "voice": "en-us+m1", "duration": 900.0, "aug": []},
        {"engine": "piper", "voice": "joe", "duration": 3600.0, "aug": [{"kind": "speed"}]},
    ]
    write_jsonl(tmp_path / "train.jsonl", train)
    write_jsonl(tmp_path / "dev.jsonl", train[:1])
    write_jsonl(tmp_path / "test_seen_voices.jsonl", train[:2])
    write_jsonl(tmp_path / "test_unseen_voices.jsonl", train[:3])

    facts = corpus_facts(tmp_path)
    assert facts["train_utterances"] == 4
    assert facts["train_hours"] == 2.0
    assert facts["augmented"] == 0.5
    assert facts["voices"] == {"espeak": 2, "piper": 1}
    assert facts["sizes"] == {"dev": 1, "test_seen_voices": 2, "test_unseen_voices": 3}
    assert facts["command"].startswith("python -m training.recipes.synth_corpus --out data/synth")
    assert "--aug-prob 0.5" in facts["command"]
    assert facts["command"].endswith("--engines espeak=0.5 piper")
    plan["text"] = ["fortune", "austen=0.6", "everyday=0.4"]
    (tmp_path / "plan.json").write_text(json.dumps(plan | {"engines": ["kokoro"]}))
    assert corpus_facts(tmp_path)["command"].endswith(
        "--engines kokoro --text fortune austen=0.6 everyday=0.4"
    )
    assert "--install" not in facts["command"]
    (tmp_path / "plan.json").write_text(json.dumps(plan | {"engines": ["kokoro"], "install": True}))
    command = corpus_facts(tmp_path, data_arg="data/live")["command"]
    assert command.startswith(
        "python -m training.recipes.synth_corpus --out data/live --hours 8 --seed 0 --jobs 2 "
        "--install --aug-prob 0.5"
    )


def test_corpus_facts_of_merged_training_and_dev_manifests(tmp_path: Path) -> None:
    """A model trained on the corpus merged with two supplements and validated on its dev
    split merged with the second's: the card counts what it trained and validated on and
    gives each supplement's command and both merges."""
    plan = {"hours": 12, "seed": 5, "jobs": 2, "aug_prob": 0.8, "test_size": 2, "dev_size": 1}
    (tmp_path / "plan.json").write_text(json.dumps(plan | {"engines": ["kokoro"]}))
    extra = {"hours": 3, "seed": 6, "test_size": 0, "dev_size": 0, "text": ["everyday"]}
    extra |= {"engines": ["piper"], "exclude": ["data/live/dev.jsonl"]}
    second = {"seed": 7, "dev_size": 3, "max_words": 3}
    for name, more in (("everyday", {"max_words": 0}), ("everyday2", second)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "plan.json").write_text(json.dumps(plan | extra | more))
    row = {"engine": "kokoro", "voice": "af_sky", "duration": 1800.0, "aug": []}
    for name in ("train", "dev", "test_seen_voices", "test_unseen_voices"):
        write_jsonl(tmp_path / f"{name}.jsonl", [row])
    merged, dev = tmp_path / "train_all.jsonl", tmp_path / "dev_all.jsonl"
    write_jsonl(merged, [row, row | {"engine": "piper", "voice": "joe"}])
    write_jsonl(dev, [row] * 4)
    run = tmp_path / "run"
    run.mkdir()
    corpus = (tmp_path / "train.jsonl", tmp_path / "dev.jsonl")
    assert gather.run_manifests(run, tmp_path) == corpus  # no config
    settings = [f"train.train_manifest={merged}", f"train.valid_manifest={dev}"]
    Config.load(REPO / "training/configs/whisper.yaml", settings).save(run / "config.json")
    assert gather.run_manifests(run, tmp_path) == (merged, dev)

    facts = corpus_facts(tmp_path, data_arg="data/live", manifests=(merged, dev))
    assert (facts["train_utterances"], facts["train_hours"]) == (2, 1.0)
    assert facts["voices"] == {"kokoro": 1, "piper": 1}
    assert facts["sizes"]["dev"] == 4
    first, *supplements, train_merge, dev_merge = re.split(
        r"\n    (?=python|asr)", facts["command"]
    )
    assert first.startswith("python -m training.recipes.synth_corpus --out data/live --hours 12")
    assert "--exclude" not in first
    assert [s.split(" --hours")[0].split()[-1] for s in supplements] == [
        "data/live/everyday",
        "data/live/everyday2",
    ]
    assert supplements[0].endswith("--text everyday \\\n      --exclude data/live/dev.jsonl")
    assert "--seed 7 --jobs 2" in supplements[1] and "--dev-size 3" in supplements[1]
    assert "--max-words 3" in supplements[1] and "--max-words" not in supplements[0]
    assert train_merge == (
        "asr prepare merge data/live/train.jsonl data/live/everyday/train.jsonl "
        f"data/live/everyday2/train.jsonl --out {merged}"
    )
    assert (
        dev_merge
        == f"asr prepare merge data/live/dev.jsonl data/live/everyday2/dev.jsonl --out {dev}"
    )
    assert corpus_facts(tmp_path)["train_utterances"] == 1  # the corpus's own splits
    assert corpus_facts(tmp_path)["sizes"]["dev"] == 1


def test_corpus_facts_of_a_manifest_with_real_speech(tmp_path: Path) -> None:
    """LAS layers that learnt pseudo-labelled real recordings and joined clips beside the
    synthetic corpus: the card counts each kind (the real ones per package), the voices and
    augmentation of the synthetic speech alone, and gives no merge of supplements that did
    not make the manifest."""
    plan = {"hours": 12, "seed": 5, "jobs": 2, "aug_prob": 0.8, "test_size": 2, "dev_size": 1}
    (tmp_path / "plan.json").write_text(json.dumps(plan | {"engines": ["kokoro"]}))
    (tmp_path / "everyday").mkdir()  # a supplement of the corpus the manifest did not take
    (tmp_path / "everyday" / "plan.json").write_text(json.dumps(plan | {"engines": ["piper"]}))
    synthetic = {"engine": "kokoro", "voice": "af_sky", "duration": 1800.0, "aug": []}
    real = {"source": "drascula", "language": "en", "duration": 360.0, "text": "hello"}
    joined = {"parts": ["a", "b"], "voice": "af_sky", "duration": 720.0}
    for name in ("train", "dev", "test_seen_voices", "test_unseen_voices"):
        write_jsonl(tmp_path / f"{name}.jsonl", [synthetic])
    merged = tmp_path / "las_train.jsonl"
    rows = [synthetic, synthetic | {"aug": [{"kind": "noise"}]}, real, real, joined]
    write_jsonl(merged, [*rows, real | {"source": "flight-of-the-amazon-queen"}])

    facts = corpus_facts(tmp_path, manifests=(merged, tmp_path / "dev.jsonl"))
    assert facts["train_utterances"] == 6
    assert facts["voices"] == {"kokoro": 1}
    assert facts["augmented"] == 0.5
    assert facts["mix"] == {
        "synthetic": {"utterances": 2, "hours": 1.0},
        "real": {
            "drascula": {"utterances": 2, "hours": 0.2},
            "flight-of-the-amazon-queen": {"utterances": 1, "hours": 0.1},
        },
        "joined": {"utterances": 1, "hours": 0.2},
    }
    assert facts["command"].startswith("python -m training.recipes.synth_corpus --out data/synth")
    assert "everyday" not in facts["command"] and "merge" not in facts["command"]
    text = whisper_card.mix_text(facts["mix"])
    assert "(3 utterances, 0.30 h: drascula 0.20 h, flight-of-the-amazon-queen 0.10 h)" in text
    assert "transcribed by Whisper-base" in text and "joined from several utterances" in text
    assert whisper_card.limits_text(facts["mix"]).startswith("Real people are 20% of")  # 0.3/1.5
    distilled = whisper_card.distilled_text(facts["mix"])
    assert distilled.startswith(" The student was distilled on synthetic speech (2 utterances")
    assert "transcribed" not in distilled and "drascula 0.20 h" in distilled
    assert whisper_card.mix_text(facts["mix"] | {"real": {}, "joined": {"utterances": 0}}) == ""


def test_status_says_whether_targets_are_reached() -> None:
    history = [{"epoch": 1, "valid_loss": 2.0}, {"epoch": 2, "valid_loss": 1.0}]
    training = {"minutes": 80.0, "history": history}
    good = {
        "test_seen_voices": {"wer": {"rate": 0.05}},
        "test_unseen_voices": {"wer": {"rate": 0.1}},
    }
    bad = {"test_seen_voices": {"wer": {"rate": 0.5}}, "test_unseen_voices": {"wer": {"rate": 0.1}}}
    assert status(good, training).startswith("It reaches the targets")
    text = status(bad, training)
    assert (
        "does not yet reach" in text and "still falling at the last epoch (2.000 -> 1.000)" in text
    )
    assert "validated only once" in status(bad, {**training, "history": history[:1]})
    wobble = [*history, {"epoch": 3, "valid_loss": 1.01}]
    assert "levelled off" in status(bad, {**training, "history": wobble})
    rose = [*history, {"epoch": 3, "valid_loss": 1.1}]
    assert "lowest at epoch 2 and then rose" in status(bad, {**training, "history": rose})


# -- the second-generation card (whisper_publish, whisper_goals, whisper_card) ---------------
def test_steps_add_up_over_resumes(tmp_path: Path) -> None:
    steps = tmp_path / "steps.tsv"
    steps.write_text("corpus\t3000\ndistillation\t1800\n\ncorpus\t660\ntraining\t7200\n")
    assert read_steps(steps) == [("corpus", 3660.0), ("distillation", 1800.0), ("training", 7200.0)]
    assert [hours_minutes(s) for _, s in read_steps(steps)] == ["1:01", "0:30", "2:00"]


@pytest.mark.parametrize("line", ["corpus 100", "corpus\tabc", "\t100", "corpus\t-5", "corpus"])
def test_a_malformed_step_line_is_refused(tmp_path: Path, line: str) -> None:
    steps = tmp_path / "steps.tsv"
    steps.write_text(f"corpus\t10\n{line}\n")
    with pytest.raises(ValueError, match=r"steps.tsv:2: expected 'step<TAB>seconds'"):
        read_steps(steps)


def figures(**changes: object) -> dict:
    """Goal figures that meet every goal, with ``changes``."""
    good = {
        "wer": {"test_seen_voices": 0.08, "test_unseen_voices": 0.12, "test_short": 0.1},
        "softmax_wer": {"test_seen_voices": 0.07, "test_unseen_voices": 0.13, "test_short": 0.1},
        "real": {"streaming": 0.19, "two_pass": 0.11},
        "rtf": 0.09,
        "load": {"p95_ms": 350.0, "errors": 0},
        "word_p95_ms": 380.0,
        "megabytes": 110.0,
    }
    return good | changes


def verdicts(goals: list[dict]) -> dict[str, bool | None]:
    return {g["goal"]: g["met"] for g in goals}


def test_goals_are_met_or_not_on_the_figures() -> None:
    goals = evaluate_goals(figures())
    assert len(goals) == 12 and all(g["met"] is True for g in goals)
    assert goal_status(goals).startswith("**It meets 12 of the 12 goals measured here.**")

    bad = figures(
        wer={"test_seen_voices": 0.11, "test_unseen_voices": 0.12, "test_short": 0.1},
        softmax_wer={"test_seen_voices": 0.095, "test_unseen_voices": 0.13, "test_short": 0.1},
        real={"streaming": 0.25, "two_pass": 0.11},
        load={"p95_ms": 350.0, "errors": 2},
        megabytes=121.0,
    )
    met = verdicts(evaluate_goals(bad))
    assert met["unseen sentences, seen voices: WER <= 10%"] is False
    assert met["unseen voices: WER <= 15%"] is True
    # 11% against 9.5%: 1.5 points is still within, a hair more is not
    assert met["monotonic within 1.5 points of softmax (unseen sentences, seen voices)"] is True
    wider = figures(softmax_wer={**bad["softmax_wer"], "test_seen_voices": 0.0949})
    assert not verdicts(evaluate_goals({**bad, **wider, "wer": bad["wer"]}))[
        "monotonic within 1.5 points of softmax (unseen sentences, seen voices)"
    ]
    assert met["real speech, streaming: WER <= 20%"] is False
    assert met["real speech, two-pass: WER <= 12%"] is True
    assert (
        met["`bench/load.py --no-two-pass --clients 50`: p95 final latency <= 400 ms, no errors"]
        is False
    )
    assert met["bundle <= 120 MB on disk"] is False
    text = goal_status(evaluate_goals(bad))
    assert text.startswith("**It meets 8 of the 12 goals measured here.**")
    assert "Not met: unseen sentences, seen voices: WER <= 10% (11.00%)" in text


def test_a_looping_softmax_baseline_is_called_out() -> None:
    def summary(subs: int, dels: int, ins: int) -> dict:
        errors = subs + dels + ins
        return {
            "wer": {
                "substitutions": subs,
                "deletions": dels,
                "insertions": ins,
                "errors": errors,
                "reference_length": 100,
                "rate": errors / 100,
            }
        }

    def metrics(soft_seen: dict) -> dict:
        return {
            "first_gen": None,
            "monotonic": {
                "eval": {"test_seen_voices": summary(20, 5, 3), "test_short": summary(10, 2, 1)},
                "eval_two_pass": {},
            },
            "softmax": {"eval": {"test_seen_voices": soft_seen, "test_short": summary(9, 2, 2)}},
        }

    text = baseline_text(metrics(summary(30, 10, 41)))
    assert "unseen sentences, seen voices: 41 insertions of 81 errors (streaming: 3 of 28)" in text
    assert "short utterances" not in text  # 2 insertions against 11 other errors: no loop
    assert baseline_text(metrics(summary(30, 10, 40))) == ""  # as many, not more


def test_goals_not_measured_are_said_so() -> None:
    absent = figures(
        wer={"test_seen_voices": 0.08, "test_unseen_voices": 0.12},
        softmax_wer={"test_seen_voices": 0.08, "test_unseen_voices": 0.12},
        real=None,
        rtf=None,
        load=None,
        word_p95_ms=None,
    )
    goals = {g["goal"]: g for g in evaluate_goals(absent)}
    assert goals["short utterances (1-3 words, digits, letters): WER <= 15%"] == {
        "goal": "short utterances (1-3 words, digits, letters): WER <= 15%",
        "figure": "no such split",
        "met": None,
    }
    assert goals["real speech, two-pass: WER <= 12%"]["figure"] == "not measured (no --real)"
    unmeasured = [name for name, g in goals.items() if g["met"] is None]
    assert len(unmeasured) == 6
    text = goal_status(list(goals.values()))
    assert text.startswith("**It meets 5 of the 5 goals measured here.**")
    assert "Not met" not in text and "Not measured: short utterances" in text
    timed = {g["goal"]: g for g in evaluate_goals(figures(word_p95_ms=None, word_timed=False))}
    word = timed["word latency p95 <= 400 ms (streaming pass)"]
    assert word["met"] is None and word["figure"] == "no word right to time"
    # a load run in which no stream finished is a miss, not a gap
    failed = evaluate_goals(figures(load={"p95_ms": None, "errors": 50}))
    load = next(g for g in failed if g["goal"].startswith("`bench/load.py"))
    assert load["met"] is False and load["figure"] == "no final latency, 50 errors"


def test_splits_are_found_with_test_short_and_real(tmp_path: Path) -> None:
    data, real = tmp_path / "data", tmp_path / "real"
    data.mkdir()
    with pytest.raises(FileNotFoundError, match="none of test_seen_voices.jsonl"):
        discover_splits(data, None)
    for split in ("test_unseen_voices", "test_short", "test_other"):
        write_jsonl(data / f"{split}.jsonl", [])
    assert discover_splits(data, None) == {
        "test_unseen_voices": data / "test_unseen_voices.jsonl",
        "test_short": data / "test_short.jsonl",
    }
    with pytest.raises(FileNotFoundError, match="no all.jsonl .*--manifests"):
        discover_splits(data, real)
    real.mkdir()
    write_jsonl(real / "all.jsonl", [])
    found = discover_splits(data, real)
    assert list(found) == ["test_unseen_voices", "test_short", "real"]
    assert found["real"] == real / "all.jsonl"


def test_the_distill_command_is_the_one_recorded(tmp_path: Path) -> None:
    student = tmp_path / "exp" / "student" / "student"
    student.mkdir(parents=True)
    settings = [
        "distill.train_manifests=[data/live/train.jsonl]",
        "distill.valid_manifest=data/live/dev.jsonl",
        "distill.epochs=3",
        "distill.threads=2",
    ]
    recipe = REPO / "training" / "configs" / "distill.yaml"
    Config.load(recipe, settings).save(student.parent / "config.json")
    command = distill_command(student, "data/live")
    assert command == (
        f"asr distill --config training/configs/distill.yaml --out {student.parent} "
        '"distill.train_manifests=[data/live/train.jsonl]" distill.valid_manifest=data/live/dev.jsonl '
        "distill.epochs=3 distill.threads=2"
    )
    start = "distill.init=exp/live/init/whisper_encoder.safetensors"  # the recipe's INIT
    Config.load(recipe, [*settings, start]).save(student.parent / "config.json")
    assert distill_command(student, "data/live") == f"{command} {start}"
    Config.load(recipe, [*settings, "distill.lr=0.001"]).save(student.parent / "config.json")
    assert distill_command(student, "data/live") == (
        f"asr distill --config {student.parent / 'config.json'} --out {student.parent}"
    )
    (student.parent / "config.json").unlink()
    assert "# reconstructed:" in distill_command(student, "data/live")


def test_a_blended_student_is_the_commands_that_made_it(tmp_path: Path) -> None:
    """A student blended from one distilled in two runs (the second from the first's): its
    card gives both runs' commands, then the blend's, and the mix the last run read."""
    recipe = REPO / "training" / "configs" / "distill.yaml"
    manifest = tmp_path / "mix.jsonl"
    write_jsonl(manifest, [{"source": "drascula", "duration": 3600.0}])
    first, second = tmp_path / "epoch" / "student", tmp_path / "tuned" / "student"
    settings = [f"distill.train_manifests=[{manifest}]", f"distill.valid_manifest={manifest}"]
    settings.append("distill.lr=0.001")  # not the recipe's: the recorded config is the command
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    Config.load(recipe, settings).save(first.parent / "config.json")
    init = f"distill.init={first}/encoder.safetensors"
    Config.load(recipe, [*settings, init]).save(second.parent / "config.json")
    blend = tmp_path / "blend"
    blend.mkdir()
    recorded = {"start": "models/default/whisper_encoder.safetensors", "weight": 0.5}
    recorded["tuned"] = str(second / "encoder.safetensors")
    save_file({"w": torch.zeros(1)}, blend / "encoder.safetensors", {"blend": json.dumps(recorded)})

    assert distill_command(blend, "data/live").split("\n    ") == [
        f"asr distill --config {first.parent}/config.json --out {first.parent}",
        f"asr distill --config {second.parent}/config.json --out {second.parent}",
        "asr blend-students --start models/default/whisper_encoder.safetensors "
        f"--tuned {second} --weight 0.5 --out {blend}",
    ]
    mix = whisper_publish.distillation_mix(blend)
    assert mix is not None and mix["real"] == {"drascula": {"utterances": 1, "hours": 1.0}}
    assert whisper_publish.distillation_mix(tmp_path / "none" / "student") is None
    bundle = tmp_path / "bundle"  # a bundle's own student: its config is not a distillation's
    bundle.mkdir()
    Config.load(recipe, settings).save(bundle / "config.json")
    assert whisper_publish.distillation_mix(bundle / "whisper_encoder.safetensors") is None


def test_the_streaming_bench_writes_the_rtf_the_card_reads(tmp_path: Path) -> None:
    """bench/streaming.py --json: the figures it prints, machine-readable (a random model of
    the default size, as the bench uses without a bundle)."""
    out = tmp_path / "rtf.json"
    command = [sys.executable, "bench/streaming.py", "--model", str(tmp_path / "none")]
    command += ["--seconds", "2", "--sessions", "2", "--base-states", "10", "--json", str(out)]
    command += ["--batch", "3", "--batch-seconds", "1"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    for name, key in (("wall clock", "rtf"), ("CPU time", "cpu_rtf")):
        assert f"{f'real-time factor ({name})':<32}{figures[key]:>9.3f}" in done.stdout
    assert figures["audio_seconds"] == 2 and figures["threads"] == 1
    assert [(r["attention"], r["length"]) for r in figures["scaling"]] == [
        (kind, n) for kind in ("monotonic", "softmax") for n in (1, 4, 16)
    ]
    batched = figures["batched"]
    assert (batched["sessions"], batched["audio_seconds"]) == (3, 1)
    assert 0 < batched["front_end_rtf"] and 0 < batched["rtf"]
    assert f"{'cores 50 streams need at this rate':<40}{50 * batched['rtf']:>8.2f}" in done.stdout
    assert "3 sessions stepped together on one thread" in done.stdout
    assert f"{'real-time streams one core carries':<40}{1 / batched['rtf']:>8.1f}" in done.stdout

    # the card says what the bench measured
    metrics = {"rtf": figures, "load": None, "word_latency": None, "files": {}, "megabytes": 0.0}
    card = speed_section(metrics, "models/x")
    assert f"real-time factor {figures['rtf']:.3f} by the wall clock" in card
    assert f"one core carries {1 / batched['rtf']:.1f} real-time streams" in card
    assert f"50 streams need {50 * batched['rtf']:.2f} cores" in card


def test_the_bundled_card_is_rendered_again_from_its_metrics(tmp_path: Path) -> None:
    """The card is a rendering of metrics.json alone: the committed one comes back byte for
    byte, so its figures have one source."""
    metrics = json.loads((REPO / "models" / "default" / "metrics.json").read_text())
    whisper_card.write_card(tmp_path, metrics)
    assert (tmp_path / "README.md").read_bytes() == (REPO / "models/default/README.md").read_bytes()
    metrics["load"] = None
    whisper_card.write_card(tmp_path, metrics)
    assert (
        "- 50 clients on one server (`python bench/load.py" in (tmp_path / "README.md").read_text()
    )


# -- one tiny run pair published end to end ------------------------------------------------
def manifest_rows(files: list[tuple[Path, str]], prefix: str = "") -> list[dict]:
    return [
        {
            "id": f"{prefix}{wav.stem}",
            "audio": str(wav),
            "text": text,
            "duration": soundfile.info(str(wav)).duration,
            "engine": "espeak",
            "voice": "en-us",
            "aug": [],
        }
        for wav, text in files
    ]


def tiny_corpus(root: Path, speech_dir: Path) -> Path:
    """A corpus directory as synth_corpus writes it: plan.json, train, dev and three test
    splits (a spoken word for test_short), each a handful of the espeak-ng sentences."""
    data = root / "data"
    data.mkdir()
    files = speech_files(speech_dir)
    short = [(espeak("seven", root / "short.wav"), "seven")]
    splits = {
        "train": files[:6],
        "dev": files[6:7],
        "test_seen_voices": files[7:8],
        "test_unseen_voices": files[8:9],
        "test_short": short,
    }
    for split, chosen in splits.items():
        write_jsonl(data / f"{split}.jsonl", manifest_rows(chosen))
    (data / "lm_text.txt").write_text("".join(f"{text}\n" for _, text in splits["train"]))
    plan = {"hours": 0.01, "seed": 0, "jobs": 1, "aug_prob": 0.0, "test_size": 1, "dev_size": 1}
    plan |= {"engines": ["espeak"], "text": ["fortune", "everyday"], "install": True}
    (data / "plan.json").write_text(json.dumps(plan))
    return data


def train_tiny(out: Path, data: Path, cache: Path, kind: str) -> Path:
    """One real `asr train` step of the tiny config on the Whisper front end, with two-pass
    finals (so its best_bundle carries the teacher)."""
    command = train_command(
        out,
        data / "train.jsonl",
        *WHISPER_OVERRIDES,
        f"train.valid_manifest={data / 'dev.jsonl'}",
        f"train.feature_cache={cache}",
        "train.max_steps=1",
        "decode.two_pass=true",
        "decode.max_tokens=8",  # an untrained decoder runs to the cap: keep it short
        f"model.attention.kind={kind}",
    )
    run_training(command)
    return out


def speller_bundle(out: Path, bundle: Path, student: bytes | None = None) -> Path:
    """A copy of ``bundle`` carrying a learnt policy (untrained) for its student, or for
    ``student`` (its encoder file's bytes) instead, with stand-ins for Whisper's decoder and
    tokenizer (published bytes, never loaded here) and two-pass finals by default."""
    shutil.copytree(bundle, out)
    if student is not None:
        (out / "whisper_encoder.safetensors").write_bytes(student)
    (out / DECODER_FILE).write_bytes(b"whisper's decoder")
    (out / TOKENIZER_FILE).write_text("{}")
    config = Config.load(out / "config.json")
    replace(config, decode=replace(config.decode, two_pass=True)).save(out / "config.json")
    PolicyEnergy(dim=8).save(out / POLICY_FILE, meta=learnt_on(out))
    return out


def row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def rate(summary: dict | None, key: str = "wer") -> str:
    return "-" if summary is None else f"{100 * summary[key]['rate']:.2f}%"


def test_a_whisper_run_pair_is_published_and_cached(
    tmp_path: Path, speech_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    data = tiny_corpus(tmp_path, speech_dir)
    real = tmp_path / "real"
    real.mkdir()
    write_jsonl(real / "all.jsonl", manifest_rows(speech_files(speech_dir)[9:10], "espeak-set/"))
    cache = tmp_path / "frames"
    run = train_tiny(tmp_path / "monotonic", data, cache, "monotonic")
    baseline = train_tiny(tmp_path / "softmax", data, cache, "softmax")
    first_gen = build_bundle(tmp_path / "first-gen", speech_dir)
    steps = tmp_path / "steps.tsv"
    steps.write_text("corpus\t120\ndistillation\t3000\ncorpus\t60\n")
    out = tmp_path / "out"
    monkeypatch.setattr(gather, "SAMPLE_DIR", tmp_path / "heldout")
    readme = tmp_path / "README.md"  # publishing to "the bundled model" rewrites its table
    readme.write_text(f"{results_table.BEGIN}\n{results_table.END}\n")
    monkeypatch.setattr(results_table, "README", readme)
    monkeypatch.setattr(results_table, "METRICS", tmp_path / "out" / "metrics.json")
    argv = ["--run", str(run), "--baseline", str(baseline), "--data", str(data)]
    argv += ["--out", str(out), "--first-gen", str(first_gen), "--real", str(real)]
    argv += ["--steps", str(steps), "--sample", "1", "--no-rtf", "--no-load", "--no-word-latency"]
    argv += ["--no-long-stream"]
    speller = speller_bundle(tmp_path / "speller", run / "best_bundle")
    other = speller_bundle(tmp_path / "other", run / "best_bundle", b"another student")

    # missing inputs are refused before anything is evaluated
    with pytest.raises(SystemExit):
        publish_model.main([*argv, "--real", str(tmp_path)])
    assert "no all.jsonl" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        publish_model.main([*argv, "--baseline", str(run)])
    assert "monotonic attention" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a speller learnt on another student
        publish_model.main([*argv, "--speller", str(other)])
    assert "learnt on another streaming student" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a bundle without a speller
        publish_model.main([*argv, "--speller", str(run / "best_bundle")])
    assert "has no speller_policy.safetensors" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the bundle being replaced
        publish_model.main([*argv, "--speller", str(out)])
    assert "is --out" in capsys.readouterr().err
    assert not list(run.glob("eval_*"))

    argv += ["--speller", str(speller)]
    assert publish_model.main(argv) == 0
    # the published bundle carries the speller, which its student reads, the Whisper decoder
    # it was learnt over, and that decoder's finals as the speller's bundle serves them
    for name in (POLICY_FILE, DECODER_FILE, TOKENIZER_FILE):
        assert (out / name).read_bytes() == (speller / name).read_bytes()
    assert Config.load(out / "config.json").decode.two_pass
    assert not (run / "best_bundle" / DECODER_FILE).exists()  # its finals measured without it
    assert (
        f"--speller {speller}"
        in json.loads((out / "metrics.json").read_text())["commands"]["publish"]
    )
    metrics = json.loads((out / "metrics.json").read_text())
    card = (out / "README.md").read_text()
    assert readme.read_text() == (
        f"{results_table.BEGIN}\n{results_table.render(metrics)}\n{results_table.END}\n"
    )
    streaming = results_table.per_set(metrics["monotonic"]["eval"])
    assert f"(the partials; one-pass finals greedy): {results_table.SETS} | {streaming} |" in (
        readme.read_text()
    )
    fusion = metrics["monotonic"]["fusion"]
    columns = {
        "first_gen": metrics["first_gen"]["eval"],
        "streaming": metrics["monotonic"]["eval"],
        "two_pass": metrics["monotonic"]["eval_two_pass"],
        "softmax": metrics["softmax"]["eval"],
        "fused": fusion["eval"],
        "two_pass_fused": fusion["eval_two_pass"],
    }
    splits = ["test_seen_voices", "test_unseen_voices", "test_short", "real"]
    assert list(metrics["splits"]) == splits
    for split in splits:
        cell = {name: column[split] for name, column in columns.items()}
        gap = 100 * (cell["streaming"]["wer"]["rate"] - cell["softmax"]["wer"]["rate"])
        assert cell["streaming"]["utterances"] == 1
        expected = [TITLES[split], "1", rate(cell["first_gen"]), rate(cell["streaming"])]
        expected += [rate(cell["streaming"], "cer"), rate(cell["two_pass"]), rate(cell["softmax"])]
        expected += [f"{gap:+.2f}", rate(cell["fused"]), rate(cell["two_pass_fused"])]
        assert row(expected) in card
    # where the errors fall, per band of how often a word was heard in training
    for split in splits[:3]:
        bands = [columns[name][split]["by_train_frequency"] for name in ("streaming", "two_pass")]
        bands.append(columns["softmax"][split]["by_train_frequency"])
        assert len(bands[0]) == 5
        for band, two_pass, soft in zip(*bands, strict=True):
            cells = [f"{100 * b['rate']:.1f}%" for b in (band, two_pass, soft)]
            assert row([TITLES[split], band["band"], f"{100 * band['share']:.1f}%", *cells]) in card
    assert "| real human speech" not in card.split("times in training")[1].split("\n\n")[0]
    # the bundle serves its LM: greedy partials, finals with the beam and the weight best on dev
    dev = fusion["dev"]
    assert list(dev) == [f"{w:g}" for w in whisper_publish.LM_WEIGHTS]
    assert fusion["weight"] == float(min(dev, key=lambda w: dev[w]))
    served = Config.load(out / "config.json").decode
    assert (served.greedy_partials, served.beam_size) == (True, gather.LM_BEAM)
    assert served.lm_weight == fusion["weight"] and (out / "lm.npz").is_file()
    assert f"added at weight {fusion['weight']:g}" in card
    # and joint CTC scoring, with which every column but the first generation's decodes
    assert served.ctc_weight == whisper_card.CTC_WEIGHT == metrics["monotonic"]["ctc_weight"] > 0
    assert "scoring (the CTC head trained with the decoder ranks" in card
    # the columns are the evaluations cached in the run directories, by what they decoded
    joint = gather.ctc_tag(whisper_card.CTC_WEIGHT)
    cached = json.loads((run / f"eval_{joint}two_pass_test_short" / "summary.json").read_text())
    assert cached == columns["two_pass"]["test_short"]
    assert json.loads((run / "eval_first_gen_test_seen_voices" / "summary.json").read_text())[
        "model"
    ] == str(first_gen)
    assert (run / f"eval_streaming_{joint}real" / "summary.json").is_file()
    assert not (run / f"eval_streaming_{joint}real" / "results.jsonl").exists()  # no transcripts
    assert set(columns["streaming"]["real"]["by_set"]) == {"espeak-set"}

    for goal in metrics["goals"]:
        marks = {True: "met", False: "**not met**", None: "not measured"}
        assert row([goal["goal"], goal["figure"], marks[goal["met"]]]) in card
    goals = {g["goal"]: g for g in metrics["goals"]}
    assert goals["one stream on one thread: real-time factor <= 0.1"]["met"] is None
    assert goals["real speech, streaming: WER <= 20%"]["figure"] == rate(
        columns["streaming"]["real"]
    )
    sizes = sum(
        p.stat().st_size for p in out.iterdir() if p.name not in ("README.md", "metrics.json")
    )
    assert metrics["megabytes"] == sizes / 1e6 and f"{sizes / 1e6:.1f} MB on disk" in card
    assert goals["bundle <= 120 MB on disk"]["met"] is (sizes / 1e6 <= 120)
    for line in ("| corpus | 0:03 |", "| distillation | 0:50 |", "| total | 0:53 |"):
        assert line in card
    assert metrics["commands"]["monotonic"] in card and "model.attention.kind=softmax" in card
    assert "--engines espeak --text fortune everyday" in card and "--real DIR" in card
    for split in ("test_seen_voices", "test_unseen_voices", "test_short"):
        assert len((tmp_path / "heldout" / f"{split}.jsonl").read_text().splitlines()) == 1
    assert metrics["sample"] == {"test_seen_voices": 1, "test_unseen_voices": 1, "test_short": 1}

    # a rerun measures nothing again
    made = {p: p.stat().st_mtime_ns for r in (run, baseline) for p in r.glob("eval_*/summary.json")}
    assert len(made) == 4 * 4 + len(whisper_publish.LM_WEIGHTS) + 2 * 4  # and the LM's
    capsys.readouterr()
    assert publish_model.main(argv) == 0
    assert "evaluating" not in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in made} == made
    assert json.loads((out / "metrics.json").read_text())["goals"] == metrics["goals"]
