"""training.recipes.distill_mix on a small extracted tree: Drascula's speakers but its hero
are held out whole from training, clips go by their own language, half the synthetic speech is
band-limited, and a tiny distillation over the mix brings the student nearer the teacher
on held-out audio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile
import torch

from asr.cli import main as asr_main
from tests.conftest import speech_files
from tests.test_distill import setup  # noqa: F401  (the tiny teacher and its config)
from training.manifest import read_manifest
from training.recipes.distill_mix import main


def _source(
    root: Path, name: str, clips: list[tuple[Path, str]], speakers: tuple[str, ...] = ()
) -> None:
    """An extracted source as training.recipes.real_audio writes it (clip i by speaker
    ``speakers[i % len(speakers)]``, or none named)."""
    (root / name / "audio").mkdir(parents=True)
    rows = []
    for i, (wav, language) in enumerate(clips):
        samples, rate = soundfile.read(wav, dtype="float32")
        soundfile.write(root / name / "audio" / f"{i}.wav", samples, rate)
        duration = len(samples) / rate
        row = {"id": f"{name}-{i}", "audio": f"audio/{i}.wav", "text": "", "duration": duration}
        if speakers:
            row["speaker"] = speakers[i % len(speakers)]
        rows.append({**row, "source": name, "language": language})
    (root / name / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


DRASCULA = ("drascula-hero", "drascula-D", "drascula-hero", "drascula-B")


@pytest.fixture(scope="module")
def mix(tmp_path_factory: pytest.TempPathFactory, speech_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("mix")
    files = [wav for wav, _ in speech_files(speech_dir)]
    _source(root / "real", "drascula", [(wav, "en") for wav in files[:12]], DRASCULA)
    _source(
        root / "real", "hedgewars-data", [(files[i], ["en", "ru"][i % 2]) for i in range(12, 18)]
    )
    synth = root / "synth.jsonl"
    rows = [
        {"id": f"s{i}", "audio": str(wav), "text": "", "duration": 2.0, "voice": "v"}
        for i, wav in enumerate(files[18:])
    ]
    synth.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["--real", str(root / "real"), "--synth", str(synth), "--out", str(root / "out")]
    assert main([*args, "--other-share", "1", "--synth-repeats", "2"]) == 0
    return root / "out"


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def test_the_mix_keeps_its_held_out_clips_apart_and_routes_by_language(mix: Path) -> None:
    dev, english, other = (_ids(mix / f"{n}.jsonl") for n in ("real_dev", "real_en", "real_other"))
    # every clip of Drascula's speakers but the hero (clips 1, 3, 5, ...), none of the hero's
    assert dev == [f"drascula-{i}" for i in range(1, 12, 2)]
    assert [i for i in english if i.startswith("drascula-")] == [
        f"drascula-{i}" for i in range(0, 12, 2)
    ]
    assert sorted(i for i in english if i.startswith("hedgewars")) == [
        f"hedgewars-data-{i}" for i in (0, 2, 4)
    ]
    assert sorted(other) == [f"hedgewars-data-{i}" for i in (1, 3, 5)]
    assert _ids(mix / "valid.jsonl") == dev
    long_parts = [
        p
        for line in (mix / "long" / "real_en_long.jsonl").read_text().splitlines()
        for p in json.loads(line)["parts"]
    ]
    assert not set(long_parts) & set(dev)
    listing = (mix / "train_manifests.txt").read_text().strip().strip("[]").split(",")
    assert listing.count(str(mix / "synth-11k" / "manifest.jsonl")) == 2
    assert str(mix / "real_dev.jsonl") not in listing


def test_every_clip_of_the_mix_is_found_when_its_inputs_are_named_relatively(
    tmp_path: Path, speech_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipes name their corpora relative to the repository (data/live, data/mix): each
    manifest the mix writes must still find its audio, read from anywhere."""
    files = [wav for wav, _ in speech_files(speech_dir)]
    _source(tmp_path / "real", "drascula", [(wav, "en") for wav in files[:8]], DRASCULA)
    (tmp_path / "live" / "wavs").mkdir(parents=True)
    for split, chosen in (("train", files[8:12]), ("dev", files[12:14])):
        rows = []
        for wav in chosen:
            (tmp_path / "live" / "wavs" / wav.name).write_bytes(wav.read_bytes())
            row = {"id": f"{split}-{wav.stem}", "audio": f"wavs/{wav.name}", "text": "a"}
            rows.append(row | {"duration": soundfile.info(str(wav)).duration, "voice": "v"})
        text = "".join(json.dumps(r) + "\n" for r in rows)
        (tmp_path / "live" / f"{split}.jsonl").write_text(text)
    monkeypatch.chdir(tmp_path)
    args = ["--real", "real", "--synth", "live/train.jsonl", "--synth-dev", "live/dev.jsonl"]
    assert main([*args, "--out", "mix", "--other-share", "1"]) == 0
    monkeypatch.chdir(speech_dir)  # read from elsewhere
    written = sorted((tmp_path / "mix").rglob("*.jsonl"))
    assert len(written) >= 6
    for manifest in written:
        entries, skipped = read_manifest(manifest, require_text=False)
        assert not skipped, f"{manifest}: {skipped[0]}"
    valid, _ = read_manifest(tmp_path / "mix" / "valid.jsonl", require_text=False)
    assert {e.id for e in valid} >= {f"dev-{wav.stem}" for wav in files[12:14]}


def test_a_tiny_distillation_over_the_mix_nears_the_teacher(mix: Path, setup: Path) -> None:  # noqa: F811
    out = mix.parent / "run"
    args = ["distill", "--config", str(setup / "config.yaml"), "--out", str(out)]
    args += [f"distill.train_manifests={(mix / 'train_manifests.txt').read_text().strip()}"]
    args += [f"distill.valid_manifest={mix / 'valid.jsonl'}", f"distill.cache_dir={mix / 'cache'}"]
    assert asr_main([*args, "distill.max_steps=40"]) == 0
    history = torch.load(out / "last.pt", weights_only=False)["history"]
    assert history[-1]["rel_mse"] < 0.8 * history[0]["rel_mse"]


def test_bad_options_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(
            [
                "--real",
                str(tmp_path),
                "--synth",
                str(tmp_path / "s.jsonl"),
                "--out",
                str(tmp_path / "o"),
            ]
        )
    assert "no source manifests" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--real", str(tmp_path), "--synth", "s", "--out", "o", "--share", "queen"])
    assert "--share takes SOURCE=SHARE" in capsys.readouterr().err


def test_taught_speakers_that_drascula_lacks_or_that_leave_no_dev_set_are_refused(
    tmp_path: Path, speech_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    files = [wav for wav, _ in speech_files(speech_dir)]
    _source(tmp_path / "real", "drascula", [(wav, "en") for wav in files[:4]], DRASCULA)
    synth = tmp_path / "synth.jsonl"
    synth.write_text("")
    args = ["--real", str(tmp_path / "real"), "--synth", str(synth), "--out", str(tmp_path / "o")]
    for taught, problem in [
        (["drascula-Hero"], "drascula has no speaker drascula-Hero"),
        (list(set(DRASCULA)), "leaves no drascula speaker for the real dev set"),
    ]:
        with pytest.raises(SystemExit):
            main([*args, "--taught-speakers", *taught])
        err = capsys.readouterr().err
        assert problem in err and "its speakers: drascula-B, drascula-D, drascula-hero" in err
    assert not (tmp_path / "o").exists()  # nothing written
