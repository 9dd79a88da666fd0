"""Manifest reading: every bad line is reported with its id and line number, then skipped."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from training.manifest import Entry, audio_info, distinct_names, read_manifest, write_manifest


def write_sphere(path: Path, samples: np.ndarray, rate: int = 16000) -> None:
    """A hand-made NIST SPHERE file: 1024-byte text header, then 16-bit little-endian PCM."""
    fields = [
        "database_id -s5 TIMIT",
        f"sample_count -i {len(samples)}",
        f"sample_rate -i {rate}",
        "channel_count -i 1",
        "sample_n_bytes -i 2",
        "sample_byte_format -s2 01",
        "sample_coding -s3 pcm",
        "end_head",
    ]
    header = ("NIST_1A\n   1024\n" + "\n".join(fields) + "\n").encode().ljust(1024, b" ")
    path.write_bytes(header + samples.astype("<i2").tobytes())


def test_bad_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    soundfile.write(tmp_path / "good.wav", np.zeros(1600, np.float32), 16000)
    soundfile.write(tmp_path / "silent.wav", np.zeros(0, np.float32), 16000)
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "junk.wav").write_bytes(b"this is not audio at all")
    write_sphere(tmp_path / "speech.sph", np.arange(8000, dtype=np.int16))

    def row(uid: str, audio: str = "good.wav", text: str = "hello", **kw: object) -> str:
        return json.dumps({"id": uid, "audio": audio, "text": text, "duration": 0.1, **kw})

    lines = [
        row("ok1"),  # 1
        '{"id": "broken", "audio": ',  # 2: bad JSON
        json.dumps({"id": "notext", "audio": "good.wav", "duration": 0.1}),  # 3
        row("blank", text="   "),  # 4
        row("missing", audio="nowhere.wav"),  # 5
        row("zero-bytes", audio="empty.wav"),  # 6
        row("junk", audio="junk.wav"),  # 7
        row("no-samples", audio="silent.wav"),  # 8
        row("ok1"),  # 9: duplicate id
        "",  # 10: blank lines are ignored
        row("late", offset=5.0, end=6.0),  # 11: segment past the end of the audio
        row("seg", offset=0.0, end=0.05, speaker="spk1"),  # 12
        row("sphere", audio=str(tmp_path / "speech.sph")),  # 13: absolute path
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    log = io.StringIO()
    entries, skipped = read_manifest(manifest, log=log)

    assert [e.id for e in entries] == ["ok1", "seg", "sphere"]
    assert entries[0].audio == str(tmp_path / "good.wav")
    assert (entries[1].offset, entries[1].end, entries[1].extra) == (0.0, 0.05, {"speaker": "spk1"})
    expected = [
        (2, None),
        (3, "notext"),
        (4, "blank"),
        (5, "missing"),
        (6, "zero-bytes"),
        (7, "junk"),
        (8, "no-samples"),
        (9, "ok1"),
        (11, "late"),
    ]
    assert [(s.line, s.id) for s in skipped] == expected
    reasons = [s.reason for s in skipped]
    assert "bad JSON" in reasons[0] and "text" in reasons[1] and "empty text" in reasons[2]
    assert "not found" in reasons[3] and "empty audio" in reasons[4]
    assert "unreadable" in reasons[5] and "no samples" in reasons[6]
    assert "duplicate" in reasons[7] and "past the end" in reasons[8]
    out = log.getvalue().splitlines()
    for (number, uid), message in zip(expected, out, strict=False):
        assert message.startswith(f"{manifest}:{number}: skipping {uid or '<no id>'}: ")
    assert out[-1] == f"{manifest}: skipped 9 of 12 lines; 3 utterances kept"


def test_text_only_reading_and_field_checks(tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    rows = [
        {"id": "a", "audio": "absent.wav", "text": "x", "duration": 1.0},
        {"id": "b", "audio": "absent.wav", "text": "x", "duration": -1},
        {"id": "c", "audio": "absent.wav", "text": "x", "duration": 1.0, "offset": 2, "end": 1},
        [1, 2],
    ]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    entries, skipped = read_manifest(manifest, check_audio=False, log=io.StringIO())
    assert [e.id for e in entries] == ["a"]
    assert [(s.line, s.id) for s in skipped] == [(2, "b"), (3, "c"), (4, None)]


def test_undecodable_lines_cost_only_themselves(tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    good = json.dumps({"id": "a", "audio": "a.wav", "text": "one", "duration": 1.0})
    latin1 = '{"id": "b", "audio": "b.wav", "text": "caf\xe9", "duration": 1.0}'.encode("latin-1")
    manifest.write_bytes(
        b"\xef\xbb\xbf"
        + good.encode()
        + b"\n"
        + latin1
        + b"\n"
        + good.replace('"a"', '"c"').encode()
    )
    log = io.StringIO()
    entries, skipped = read_manifest(manifest, check_audio=False, log=log)
    assert [e.id for e in entries] == ["a", "c"]  # the byte-order mark does not cost line 1
    assert [(s.line, s.id) for s in skipped] == [(2, None)]
    assert skipped[0].reason == f"not UTF-8 text (byte {latin1.index(0xE9)} of the line)"
    assert f"{manifest}:2: skipping <no id>: not UTF-8 text" in log.getvalue()


def test_relative_manifest_paths_resolve_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "corpus").mkdir()
    soundfile.write(tmp_path / "corpus" / "u.wav", np.zeros(1600, np.float32), 16000)
    row = {"id": "u", "audio": "u.wav", "text": "one", "duration": 0.1}
    (tmp_path / "corpus" / "m.jsonl").write_text(json.dumps(row) + "\n")
    monkeypatch.chdir(tmp_path)
    entries, _ = read_manifest("corpus/m.jsonl")  # a manifest named relative to the cwd
    assert entries[0].audio == str(tmp_path / "corpus" / "u.wav")
    write_manifest("out/m.jsonl", entries)  # outside the new manifest's folder: kept absolute
    again, skipped = read_manifest("out/m.jsonl")
    assert skipped == [] and again == entries


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    audio_dir = tmp_path / "corpus" / "wav"
    audio_dir.mkdir(parents=True)
    soundfile.write(audio_dir / "u1.flac", np.zeros(3200, np.float32), 16000)
    outside = tmp_path / "elsewhere.wav"
    soundfile.write(outside, np.zeros(1600, np.float32), 8000)
    entries = [
        Entry("u1", str(audio_dir / "u1.flac"), "one two", 0.2, extra={"speaker": "s"}),
        Entry("u2", str(outside), "three", 0.2, offset=0.05, end=0.15),
    ]
    manifest = tmp_path / "corpus" / "all.jsonl"
    assert write_manifest(manifest, entries) == 2
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert rows[0]["audio"] == "wav/u1.flac"  # portable inside the corpus tree
    assert rows[1]["audio"] == str(outside)
    read, skipped = read_manifest(manifest)
    assert skipped == [] and read == entries


def test_audio_info_reads_headers_only(tmp_path: Path) -> None:
    write_sphere(tmp_path / "a.sph", np.ones(4000, np.int16), rate=8000)
    info = audio_info(tmp_path / "a.sph")
    assert (info.frames, info.sample_rate, info.duration, info.shorten) == (4000, 8000, 0.5, False)
    soundfile.write(tmp_path / "b.wav", np.zeros((800, 2), np.float32), 16000)
    info = audio_info(tmp_path / "b.wav")
    assert (info.frames, info.channels, info.duration) == (800, 2, 0.05)


def test_text_can_be_optional_for_readers_that_ignore_it(tmp_path: Path) -> None:
    """Unlabelled audio (for distillation) needs no placeholder text; training still asks for it."""
    wav = tmp_path / "a.wav"
    soundfile.write(wav, np.zeros(160, np.float32), 16000)
    rows = [
        {"id": "empty", "audio": "a.wav", "text": "", "duration": 0.01},
        {"id": "absent", "audio": "a.wav", "duration": 0.01},
        {"id": "number", "audio": "a.wav", "text": 3, "duration": 0.01},
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept, skipped = read_manifest(manifest, log=io.StringIO(), require_text=False)
    assert [(e.id, e.text) for e in kept] == [("empty", ""), ("absent", "")]
    assert [s.id for s in skipped] == ["number"] and "string" in skipped[0].reason
    kept, skipped = read_manifest(manifest, log=io.StringIO())
    assert kept == [] and [s.reason for s in skipped][:2] == ["empty text", "missing field(s) text"]


def test_distinct_names_keep_files_of_one_stem_apart() -> None:
    """Reports name each manifest by its stem, and by as much more of its path as tells it
    from another's; a file given twice is refused."""
    names = distinct_names(
        [Path("data/live/dev.jsonl"), Path("/x/mix/synth-dev/dev.jsonl"), Path("short.jsonl")]
    )
    assert names == ["live/dev", "synth-dev/dev", "short"]
    assert distinct_names([Path("dev.jsonl"), Path("/a/dev.jsonl")]) == ["dev", "a/dev"]
    with pytest.raises(ValueError, match="given twice"):
        distinct_names([Path("a/dev.jsonl"), Path("a/dev.json")])
