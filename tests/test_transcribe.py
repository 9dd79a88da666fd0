"""``asr transcribe``: the real console script on a tiny bundle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from asr import bundle
from asr.audio import read_audio
from asr.bundle import default_model, load_model
from asr.formats import FORMATS, render
from asr.lm import LM_FILE
from tests.conftest import REPO, speech_files


def asr(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("asr") or str(Path(sys.executable).with_name("asr"))
    if not Path(exe).exists():
        pytest.skip("the asr console script is not installed (pip install -e .)")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        [exe, *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env
    )


def test_transcribe_prints_text_and_json_and_goes_on_after_a_bad_file(
    tiny_bundle: Path, speech_dir: Path, tmp_path: Path
) -> None:
    recognizer = load_model(tiny_bundle)
    wavs = [speech_dir / "utt00.wav", speech_dir / "utt01.wav"]
    expected = [recognizer.transcribe(*read_audio(w)) for w in wavs]
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF not really a wave file")
    missing = tmp_path / "missing.wav"

    done = asr(
        "transcribe",
        str(wavs[0]),
        str(broken),
        str(missing),
        str(wavs[1]),
        "--model",
        str(tiny_bundle),
    )
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [f"{wavs[0]}\t{expected[0]}", f"{wavs[1]}\t{expected[1]}"]
    assert str(broken) in done.stderr and done.stderr.count(str(missing)) == 1
    assert "2 of 4" in done.stderr

    done = asr("transcribe", *map(str, wavs), "--model", str(tiny_bundle), "--json", "--beam", "2")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["file"] for r in records] == [str(w) for w in wavs]
    for record in records:
        assert record["segments"], record
        assert record["text"] == " ".join(s["text"] for s in record["segments"] if s["text"])
        for segment in record["segments"]:
            assert 0 <= segment["start"] <= segment["end"]
            assert segment["tokens"]


def test_transcribe_without_a_model_says_where_it_looked_and_what_to_do(
    speech_dir: Path, tmp_path: Path
) -> None:
    done = asr("transcribe", str(speech_dir / "utt00.wav"), "--model", "models/none", cwd=tmp_path)
    assert done.returncode == 2
    assert "models/none" in done.stderr and "--model" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_default_model_is_the_working_directorys_else_the_checkouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = tmp_path / "checkout" / "models" / "default"
    monkeypatch.setattr(bundle, "CHECKOUT_MODEL", checkout)
    monkeypatch.chdir(tmp_path)
    assert default_model() == Path("models/default")  # neither exists: the error names it
    checkout.mkdir(parents=True)
    assert default_model() == checkout
    (tmp_path / "models" / "default").mkdir(parents=True)
    assert default_model() == Path("models/default")


def test_transcribe_writes_every_format_to_an_out_dir(
    tiny_bundle: Path, speech_dir: Path, tmp_path: Path
) -> None:
    """--out-dir DIR: DIR/NAME.FORMAT per input, what the one formatter makes of the offline
    segments; stdout stays empty, and one file's transcript printed equals the file written."""
    recognizer = load_model(tiny_bundle)
    wavs = [speech_dir / "utt02.wav", speech_dir / "utt03.wav"]
    segments = {w: recognizer.transcribe_segments(*read_audio(w)) for w in wavs}
    durations = {w: len(read_audio(w)[0]) / read_audio(w)[1] for w in wavs}
    out = tmp_path / "out" / "deeper"  # made on demand
    for fmt in FORMATS:
        args = ["--model", str(tiny_bundle), "--format", fmt, "--out-dir", str(out)]
        done = asr("transcribe", *map(str, wavs), *args)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), done.stderr
        for wav in wavs:
            written = (out / f"{wav.stem}.{fmt}").read_text(encoding="utf-8")
            assert written == render(fmt, segments[wav], durations[wav]), fmt
    done = asr("transcribe", str(wavs[0]), "--model", str(tiny_bundle), "--format", "vtt")
    assert done.stdout == (out / "utt02.vtt").read_text(encoding="utf-8")
    assert done.stdout.startswith("WEBVTT\n\n") and " --> " in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["A", "--format", "docx"], "invalid choice: 'docx'"),
        (["A", "B", "--format", "srt"], "--format srt prints the transcript of one file"),
        (["A", "--out-dir", "OUT"], "--out-dir writes one file per input: give --format txt"),
        (["A", "SAME", "--format", "txt", "--out-dir", "OUT"], "would both be written to"),
    ],
)
def test_transcribe_refuses_output_that_cannot_work(
    tiny_bundle: Path, speech_dir: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    """Refused before any model loads: exit status 2, the reason on stderr, nothing written."""
    same = tmp_path / "other" / "utt00.wav"
    same.parent.mkdir()
    same.write_bytes((speech_dir / "utt00.wav").read_bytes())
    names = {
        "A": str(speech_dir / "utt00.wav"),
        "B": str(speech_dir / "utt01.wav"),
        "SAME": str(same),
        "OUT": str(tmp_path / "out"),
    }
    done = asr("transcribe", *(names.get(a, a) for a in args), "--model", str(tiny_bundle))
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == "" and not (tmp_path / "out").exists()


def test_damaged_bundle_files_and_unusable_settings_are_named_not_traced(
    tiny_bundle: Path, whisper_bundle: Path, speech_dir: Path, tmp_path: Path
) -> None:
    """Exit status 2 and one line naming the file or setting, whatever the damage."""
    lm_bundle = Path(shutil.copytree(tiny_bundle, tmp_path / "lm"))
    (lm_bundle / LM_FILE).write_bytes(b"PK\x03\x04 cut short")  # a zip's first bytes only
    config = json.loads((lm_bundle / "config.json").read_text())
    config["decode"]["lm_weight"] = 0.3
    (lm_bundle / "config.json").write_text(json.dumps(config))
    encoder_bundle = Path(shutil.copytree(whisper_bundle, tmp_path / "encoder"))
    weights = encoder_bundle / "whisper_encoder.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    taken = tmp_path / "taken"
    taken.write_text("a file where the output folder would go")
    wav, tiny = str(speech_dir / "utt00.wav"), str(tiny_bundle)
    cases = [
        (["transcribe", wav, "--model", str(lm_bundle)], f"{lm_bundle / LM_FILE}: not a token"),
        (["transcribe", wav, "--model", str(encoder_bundle)], f"{weights}: unreadable weights"),
        (["transcribe", wav, "--model", tiny, "--end-pad", "1e6"], "--end-pad must be 0 to 10"),
        (["transcribe", wav, "--model", tiny, "--lm-weight", "nan"], "--lm-weight must be a fin"),
        (
            ["transcribe", wav, "--model", tiny, "--format", "txt", "--out-dir", str(taken)],
            f"{taken}: File exists",
        ),
        (["eval", "--model", tiny, "--manifest", str(tmp_path)], f"{tmp_path}: Is a directory"),
    ]
    for args, message in cases:
        done = asr(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)


def test_a_reader_that_goes_away_ends_the_run_quietly(tiny_bundle: Path, speech_dir: Path) -> None:
    """`asr transcribe *.wav | head -1`: once the reader has gone, the run stops at its next
    line with the status of a broken pipe (141), and says nothing on stderr."""
    wavs = [str(wav) for wav, _ in speech_files(speech_dir)[:6]]
    command = [sys.executable, "-m", "asr.cli", "transcribe", *wavs, "--model", str(tiny_bundle)]
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().startswith(wavs[0])
    process.stdout.close()  # what `head -1` does after its line
    assert process.wait(timeout=120) == 141
    assert process.stderr.read() == ""
