"""Transcript output formats: plain text, JSON with segment and token times, SRT and WebVTT.

One module for every place that writes a transcript (``asr transcribe``,
``POST /v1/transcribe``, ``asr stream``), so the formats cannot drift apart.
A transcript is the list of final segments of one stream, each with its text,
pieces, start and end, and the time each piece was emitted. Both the
library's :class:`asr.events.Event` and the protocol's result message fit.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

FORMATS = ("txt", "json", "srt", "vtt")
MEDIA_TYPES = {
    "txt": "text/plain; charset=utf-8",
    "json": "application/json",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}
CUE_CHARS = 42  # the usual longest subtitle line


class FinalSegment(Protocol):
    """What a transcript needs of each final segment (times in seconds from the stream's start)."""

    segment: int
    text: str
    tokens: list[str]
    token_times: list[float]
    start: float
    end: float


def check_format(name: str) -> str:
    """``name`` if it is a transcript format, else a ValueError that lists the choices."""
    if name not in FORMATS:
        raise ValueError(f"unknown output format {name!r}: choose one of {', '.join(FORMATS)}")
    return name


def format_of(path: Path) -> str:
    """The format a file name asks for by its suffix (``.srt`` -> srt)."""
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise ValueError(
            f"cannot tell the format of {path} from its suffix: name it .{', .'.join(FORMATS)} "
            "or give --format"
        )
    return suffix


def plain_text(segments: Sequence[FinalSegment]) -> str:
    """The transcript as one line: the segments' texts joined by spaces."""
    return " ".join(s.text for s in segments if s.text)


def transcript_record(segments: Sequence[FinalSegment], duration: float) -> dict[str, Any]:
    """The JSON transcript: text, audio duration, and each segment as the stream's final
    result message (the same object ``POST /v1/transcribe`` returns)."""
    return {
        "text": plain_text(segments),
        "duration": duration,
        "segments": [
            {
                "type": "final",
                "segment": s.segment,
                "text": s.text,
                "tokens": list(s.tokens),
                "token_times": list(s.token_times),
                "start": s.start,
                "end": s.end,
                "final": True,
            }
            for s in segments
        ],
    }


def _timestamp(seconds: float, decimal: str) -> str:
    ms = round(seconds * 1000)
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}{decimal}{ms % 1000:03d}"


def word_times(segment: FinalSegment) -> list[float]:
    """When each word of the segment's text was emitted (its last piece's time). In
    sentencepiece pieces "▁" is a space, as a leading space is in Whisper's byte-level
    pieces, and a word ends with the piece of its last letter (a bare "▁" piece is no word);
    pieces of other tokenizers (phones, characters) are words of their own. Where the pieces
    do not spell the text (no times sent), each word's time is placed through the segment by
    the characters before it."""
    pieces, words = segment.tokens, segment.text.split()
    if len(segment.token_times) == len(pieces) and pieces:
        if any("▁" in p or " " in p for p in pieces):
            owner = [i for i, p in enumerate(pieces) for _ in p]  # each character's piece
            spelled = "".join(pieces).replace("▁", " ")
            last = [owner[m.end() - 1] for m in re.finditer(r"\S+", spelled)]
        else:
            last = list(range(len(pieces)))
        if len(last) == len(words):
            return [segment.token_times[i] for i in last]
    ends = itertools.accumulate(len(w) + 1 for w in words)
    total, span = len(segment.text), segment.end - segment.start
    return [segment.start + span * min(e - 1, total) / max(total, 1) for e in ends]


def _cues(segments: Sequence[FinalSegment]) -> list[tuple[float, float, str]]:
    """(start, end, text) of every subtitle cue: one line of at most CUE_CHARS characters.

    A longer segment is cut between words; the cues tile the segment, each word taking the
    time from the previous word's emission to its own, so the first cue starts at the
    segment's start and the last ends at its end. A cut needs time on both sides of it.
    """
    cues = []
    for segment in segments:
        words = segment.text.split()
        times = word_times(segment)
        start, line = segment.start, []
        for i, word in enumerate(words):
            line.append(word)
            cut = (
                i + 1 < len(words)
                and len(" ".join([*line, words[i + 1]])) > CUE_CHARS
                and start < times[i] < segment.end
            )
            if cut or i + 1 == len(words):
                end = times[i] if cut else segment.end
                cues.append((start, end, " ".join(line)))
                start, line = end, []
    return cues


def srt(segments: Sequence[FinalSegment]) -> str:
    """SubRip: numbered cues, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, a blank line after each."""
    return "".join(
        f"{n}\n{_timestamp(start, ',')} --> {_timestamp(end, ',')}\n{text}\n\n"
        for n, (start, end, text) in enumerate(_cues(segments), 1)
    )


def webvtt(segments: Sequence[FinalSegment]) -> str:
    """WebVTT: the header, then cues ``HH:MM:SS.mmm --> HH:MM:SS.mmm`` with escaped text."""
    escape = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
    return "WEBVTT\n\n" + "".join(
        f"{_timestamp(start, '.')} --> {_timestamp(end, '.')}\n{text.translate(escape)}\n\n"
        for start, end, text in _cues(segments)
    )


def render(name: str, segments: Sequence[FinalSegment], duration: float) -> str:
    """The transcript in format ``name`` (see FORMATS), ending with a newline."""
    if check_format(name) == "txt":
        return plain_text(segments) + "\n"
    if name == "json":
        return json.dumps(transcript_record(segments, duration), ensure_ascii=False) + "\n"
    return srt(segments) if name == "srt" else webvtt(segments)
