"""Long clips joined from a manifest: every utterance once, one voice per clip, the samples
exactly the parts and their pauses, and a rerun that rewrites nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from training.join_utterances import SAMPLE_RATE, main, plan_clips
from training.manifest import read_manifest


def make_manifest(folder: Path, voices: int = 3, per_voice: int = 7) -> Path:
    """Utterances of 0.5-2.5 s; each sample's value tells its utterance apart."""
    rng = np.random.default_rng(1)
    rows = []
    for v in range(voices):
        for k in range(per_voice):
            uid = f"v{v}-u{k}"
            seconds = float(rng.uniform(0.5, 2.5))
            level = (v * per_voice + k + 1) / 100
            samples = np.full(int(seconds * SAMPLE_RATE), level, np.float32)
            soundfile.write(folder / f"{uid}.wav", samples, SAMPLE_RATE, subtype="PCM_16")
            rows.append(
                {"id": uid, "audio": f"{uid}.wav", "text": f"word {uid}", "duration": seconds}
                | {"voice": f"voice{v}"}
            )
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_clips_hold_each_utterance_once_in_one_voice(tmp_path: Path) -> None:
    entries, _ = read_manifest(make_manifest(tmp_path))
    clips = plan_clips(entries, 3.0, 6.0, 0.4, seed=0)
    ids = [e.id for clip in clips for e in clip.parts]
    assert sorted(ids) == sorted(e.id for e in entries)
    for clip in clips:
        assert {e.extra["voice"] for e in clip.parts} == {clip.voice}
        assert clip.duration <= 6.0
        assert all(0.05 <= p <= 0.4 for p in clip.pauses)
    assert sum(len(c.parts) > 1 for c in clips) >= len(clips) - 3  # a voice's last may be single
    mixed = plan_clips(entries, 3.0, 6.0, 0.4, seed=0, any_voice=True)
    assert any(len({e.extra["voice"] for e in c.parts}) > 1 for c in mixed)


def test_written_clips_are_the_parts_and_pauses_and_resume(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path)
    out = tmp_path / "train_long.jsonl"
    args = ["--manifest", str(manifest), "--out", str(out), "--min-seconds", "3"]
    assert main([*args, "--max-seconds", "6"]) == 0
    joined, skipped = read_manifest(out)
    assert all(not row["audio"].startswith("/") for row in map(json.loads, out.open()))
    assert not skipped and joined
    originals = {e.id: e for e in read_manifest(manifest)[0]}
    for clip in joined:
        samples, rate = soundfile.read(clip.audio, dtype="float32")
        assert rate == SAMPLE_RATE
        assert clip.text == " ".join(originals[p].text for p in clip.extra["parts"])
        # runs of one level in order: each part's samples, then the zeros of its pause
        levels = [round(float(x), 2) for x in samples[np.r_[True, np.diff(samples) != 0]]]
        expected = []
        for part in clip.extra["parts"]:
            expected += [round(float(soundfile.read(originals[part].audio)[0][0]), 2), 0.0]
        assert levels == expected
    wavs = sorted((tmp_path / "wavs" / "train_long").glob("*.wav"))
    assert len(wavs) == len(joined)
    stamps = [p.stat().st_mtime_ns for p in wavs]
    assert main([*args, "--max-seconds", "6"]) == 0
    assert [p.stat().st_mtime_ns for p in wavs] == stamps
    # another plan (a grown corpus, other lengths): only its clips stay
    assert main([*args, "--max-seconds", "9"]) == 0
    listed = {Path(e.audio).name for e in read_manifest(out)[0]}
    assert {p.name for p in wavs[0].parent.glob("*.wav")} == listed != {p.name for p in wavs}


def test_a_rerun_with_other_pauses_writes_its_own_clips(tmp_path: Path) -> None:
    """The same parts with longer pauses are other audio: a rerun into the same --out with
    another --max-pause writes what a fresh run writes, not the earlier clips. (Each voice's
    7 utterances, at most 17.5 s with their pauses of up to 1 s, fill one clip either way.)"""
    manifest = make_manifest(tmp_path)
    args = ["--manifest", str(manifest), "--min-seconds", "29", "--max-seconds", "30"]

    def durations(out: Path) -> list[float]:
        return [soundfile.info(e.audio).duration for e in read_manifest(out)[0]]

    again, fresh = tmp_path / "again" / "long.jsonl", tmp_path / "fresh" / "long.jsonl"
    for folder in (again.parent, fresh.parent):
        folder.mkdir()
    assert main([*args, "--out", str(again), "--max-pause", "0.1"]) == 0
    short, short_seconds = read_manifest(again)[0], durations(again)
    assert main([*args, "--out", str(again), "--max-pause", "1.0"]) == 0
    assert main([*args, "--out", str(fresh), "--max-pause", "1.0"]) == 0
    longer = read_manifest(again)[0]
    assert [e.extra["parts"] for e in longer] == [e.extra["parts"] for e in short]  # same parts
    assert durations(again) == durations(fresh)
    assert sum(durations(again)) > sum(short_seconds) + 1.0  # with the longer pauses
    written = {p.name for p in (again.parent / "wavs" / "long").glob("*.wav")}
    assert written == {Path(e.audio).name for e in read_manifest(again)[0]}


@pytest.mark.parametrize(
    "bad", [["--min-seconds", "10", "--max-seconds", "5"], ["--max-seconds", "31"]]
)
def test_bad_lengths_are_refused(
    tmp_path: Path, bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = make_manifest(tmp_path, voices=1, per_voice=2)
    with pytest.raises(SystemExit):
        main(["--manifest", str(manifest), "--out", str(tmp_path / "o.jsonl"), *bad])
    assert "Whisper's window" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "wavs").exists()
