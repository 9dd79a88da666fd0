"""Manifests: JSON lines describing one utterance each, validated before any training work.

A line is ``{"id", "audio", "text", "duration"[, "offset", "end"]}`` plus optional extra
fields (``speaker``). Readers that never look at the text (distillation) pass
``require_text=False``: unlabelled audio then needs no placeholder text, empty or absent. Relative audio paths are resolved against the manifest's directory,
so a corpus directory can be moved with its manifests. Bad lines are reported with their
line number and id and skipped, so one broken file never stops a long training run.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import soundfile

from asr.audio import _sphere_fields  # one SPHERE header parser for decode and checks

REQUIRED = ("id", "audio", "text", "duration")
SPHERE_MAGIC = b"NIST_1A\n"


@dataclass
class Entry:
    """One utterance; ``audio`` is an absolute path once read from a manifest."""

    id: str
    audio: str
    text: str
    duration: float
    offset: float | None = None
    end: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, base: Path | None = None) -> dict[str, Any]:
        """JSON form; audio inside ``base`` is written relative to it (portable corpus trees)."""
        audio = self.audio
        if base is not None:
            rel = os.path.relpath(os.path.abspath(audio), os.path.abspath(base))
            if not rel.startswith(".."):
                audio = rel
        row: dict[str, Any] = {
            "id": self.id,
            "audio": audio,
            "text": self.text,
            "duration": round(self.duration, 4),
        }
        if self.offset is not None:
            row["offset"] = round(self.offset, 4)
        if self.end is not None:
            row["end"] = round(self.end, 4)
        row.update(self.extra)
        return row


@dataclass
class Skipped:
    """A manifest line that was left out, and why."""

    line: int
    id: str | None
    reason: str


@dataclass
class AudioInfo:
    frames: int
    sample_rate: int
    channels: int
    coding: str  # "pcm", or e.g. "pcm,embedded-shorten-v2.00" for compressed SPHERE

    @property
    def duration(self) -> float:
        return self.frames / self.sample_rate

    @property
    def shorten(self) -> bool:
        """Shorten-compressed SPHERE (WSJ) that only sph2pipe can expand."""
        return "shorten" in self.coding


def sphere_header(path: str | Path) -> dict[str, int | float | str]:
    """The fields of a NIST SPHERE header, reading only the header bytes."""
    with open(path, "rb") as f:
        head = f.read(1024)
        try:
            size = int(head.split(b"\n")[1])
        except (IndexError, ValueError):
            raise ValueError(f"{path}: malformed SPHERE header size") from None
        if size > len(head):
            head += f.read(size - len(head))
    try:
        return _sphere_fields(head[:size])
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def audio_info(path: str | Path) -> AudioInfo:
    """Length and format from the file header only (no decoding): WAV/FLAC/..., or SPHERE."""
    with open(path, "rb") as f:
        magic = f.read(len(SPHERE_MAGIC))
    if magic == SPHERE_MAGIC:
        head = sphere_header(path)
        try:
            return AudioInfo(
                frames=int(head["sample_count"]),
                sample_rate=int(head["sample_rate"]),
                channels=int(head.get("channel_count", 1)),
                coding=str(head.get("sample_coding", "pcm")),
            )
        except KeyError as err:
            raise ValueError(f"{path}: SPHERE header lacks {err.args[0]}") from None
    try:
        info = soundfile.info(str(path))
    except (RuntimeError, soundfile.LibsndfileError) as err:
        raise ValueError(f"{path}: unreadable audio ({err})") from None
    return AudioInfo(info.frames, info.samplerate, info.channels, info.subtype.lower())


def read_manifest(
    path: str | Path,
    check_audio: bool = True,
    log: TextIO | None = None,
    require_text: bool = True,
) -> tuple[list[Entry], list[Skipped]]:
    """Valid entries and the skipped lines; each skip and a final count go to ``log`` (stderr).
    With ``require_text`` False an empty or absent text is kept (as ``""``)."""
    path = Path(path)
    log = log or sys.stderr
    base = path.parent
    entries: list[Entry] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    infos: dict[str, AudioInfo] = {}  # segments share one recording: read its header once
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                row: Any = _json_line(raw, first=number == 1)
            except ValueError as err:
                row, problem = None, str(err)
            else:
                if row is _BLANK:
                    continue
                problem = _problem(row, base, seen, infos if check_audio else None, require_text)
            if isinstance(problem, str):
                uid = row.get("id") if isinstance(row, dict) else None
                uid = uid if isinstance(uid, str) else None
                skipped.append(Skipped(number, uid, problem))
                print(f"{path}:{number}: skipping {uid or '<no id>'}: {problem}", file=log)
                continue
            seen.add(problem.id)
            entries.append(problem)
    if skipped:
        print(
            f"{path}: skipped {len(skipped)} of {len(entries) + len(skipped)} lines; "
            f"{len(entries)} utterances kept",
            file=log,
        )
    return entries, skipped


def distinct_names(paths: Sequence[Path]) -> list[str]:
    """A short name for each of several files: its stem, or, where another file has the same
    stem, the shortest tail of its path (without the suffix) that no other file shares
    (``live/dev`` beside ``synth-dev/dev``), so that reports keep every file apart."""
    tails = [Path(p).with_suffix("").parts for p in paths]
    if len(set(tails)) < len(tails):
        twice = next(p for p, t in zip(paths, tails) if tails.count(t) > 1)
        raise ValueError(f"{twice} is given twice")
    names = []
    for i, parts in enumerate(tails):
        rivals = tails[:i] + tails[i + 1 :]
        depth = next(
            (d for d in range(1, len(parts)) if all(r[-d:] != parts[-d:] for r in rivals)),
            len(parts),
        )
        names.append(str(Path(*parts[-depth:])))
    return names


_BLANK = object()


def _json_line(raw: bytes, first: bool) -> Any:
    """One line's JSON value (``_BLANK`` for an empty line). Each line is decoded apart, so a
    stray Latin-1 byte costs its own line, not the file; the first loses the byte-order mark
    some editors write."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 text (byte {err.start} of the line)") from None
    if first:
        line = line.removeprefix("\ufeff")
    if not line.strip():
        return _BLANK
    try:
        return json.loads(line)
    except ValueError as err:
        raise ValueError(f"bad JSON ({err})") from None


def read_journal(path: Path) -> list[Any]:
    """The rows of an append-only JSON-lines journal (a long job's progress). A line cut
    short when the job was killed is dropped and the file rewritten without it, so the next
    append starts a line of its own and no later row is lost with it."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    rows, kept = [], []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
        kept.append(line)
    if len(kept) < len(text.splitlines()) or (text and not text.endswith("\n")):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, path)
    return rows


def write_manifest(path: str | Path, entries: Iterable[Entry]) -> int:
    """Write entries atomically (a reader never sees half a manifest); returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for entry in entries:
            f.write(json.dumps(entry.to_dict(path.parent), ensure_ascii=False) + "\n")
            count += 1
    os.replace(tmp, path)
    return count


def _problem(
    row: Any,
    base: Path,
    seen: set[str],
    infos: dict[str, AudioInfo] | None,
    require_text: bool = True,
) -> Entry | str:
    """The validated entry, or the reason to skip it (audio checked unless ``infos`` is None)."""
    try:
        entry = _validate(row, base, require_text)
        if entry.id in seen:
            return "duplicate id"
        if infos is not None:
            _check_audio(entry, infos)
    except (ValueError, OSError) as err:
        return str(err)
    return entry


def _number(row: dict[str, Any], key: str) -> float | None:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{key} must be a finite number, got {value!r}")
    return float(value)


def _validate(row: Any, base: Path, require_text: bool = True) -> Entry:
    """Field-level checks that need no file access."""
    if not isinstance(row, dict):
        raise ValueError(f"line is not a JSON object: {row!r}")
    missing = [k for k in REQUIRED if k not in row and (require_text or k != "text")]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    uid, audio, text = row["id"], row["audio"], row.get("text", "")
    if not isinstance(uid, str) or not uid.strip():
        raise ValueError("id must be a non-empty string")
    if not isinstance(audio, str) or not audio.strip():
        raise ValueError("audio must be a non-empty path")
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {text!r}")
    if require_text and not text.strip():
        raise ValueError("empty text")
    duration = _number(row, "duration")
    offset, end = _number(row, "offset"), _number(row, "end")
    if duration is None or duration <= 0:
        raise ValueError(f"duration must be positive, got {row['duration']!r}")
    if offset is not None and offset < 0:
        raise ValueError(f"negative offset {offset}")
    if end is not None and end <= (offset or 0.0):
        raise ValueError(f"end {end} is not after offset {offset or 0.0}")
    extra = {k: v for k, v in row.items() if k not in (*REQUIRED, "offset", "end")}
    path = os.path.abspath(base / audio)
    return Entry(uid, path, " ".join(text.split()), duration, offset, end, extra)


def _check_audio(entry: Entry, cache: dict[str, AudioInfo]) -> None:
    """Existence, non-empty file and a readable header with samples; segments must fit."""
    info = cache.get(entry.audio)
    if info is None:
        audio = Path(entry.audio)
        if not audio.is_file():
            raise ValueError(f"audio not found: {audio}")
        if audio.stat().st_size == 0:
            raise ValueError(f"empty audio file: {audio}")
        info = cache[entry.audio] = audio_info(audio)
    if info.frames <= 0:
        raise ValueError(f"audio has no samples: {entry.audio}")
    if entry.offset is not None and entry.offset >= info.duration:
        raise ValueError(f"offset {entry.offset} is past the end of {entry.audio}")
