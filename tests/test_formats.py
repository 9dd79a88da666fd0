"""Transcript formats through `asr transcribe` (issue 18, test 6): the bundled model on a long
file of shipped held-out sentences with pauses between them.

SRT and WebVTT parse with real subtitle parsers (``srt``, ``webvtt-py``) and their cues tile
each JSON segment at its words' emission times; the JSON's segment and token times are
monotone, within the audio, and fall where the sentences are spoken; txt, JSON and the
default listing carry the same text, as accurate as the same sentences one file each. A
long file shows progress on a terminal and nothing extra when piped.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
import types
from pathlib import Path

import numpy as np
import pytest
import soundfile
import srt
import webvtt

from asr import formats
from asr.audio import resample
from asr.formats import CUE_CHARS
from asr.recognizer import OFFLINE_CHUNK_S
from asr.scoring import wer
from tests.test_bundled_model import HELDOUT, sample, with_three_deviations

SPLIT = "test_seen_voices"
RATE = 16000
PAUSE_S = 1.5


def transcribe(*args: str, stderr: int | None = None) -> subprocess.CompletedProcess:
    """The real console entry point; stdout and stderr captured unless ``stderr`` is given."""
    return subprocess.run(
        [sys.executable, "-m", "asr.cli", "transcribe", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr is None else stderr,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def long_file(tmp_path_factory) -> tuple[Path, list[tuple[float, float]], list[str]]:
    """Six held-out sentences, each followed by a pause: the WAV, each sentence's span (s) and
    its reference text."""
    parts, spans, texts, at = [], [], [], 0.0
    for row in sample(SPLIT)[:6]:
        speech, rate = soundfile.read(HELDOUT / row["audio"], dtype="float32")
        speech = resample(speech, rate, RATE)
        parts += [speech, np.zeros(int(PAUSE_S * RATE), np.float32)]
        spans.append((at, at + len(speech) / RATE))
        texts.append(row["text"])
        at += len(speech) / RATE + PAUSE_S
    path = tmp_path_factory.mktemp("long") / "long.wav"
    soundfile.write(path, np.concatenate(parts), RATE, subtype="PCM_16")
    return path, spans, texts


@pytest.fixture(scope="module")
def outputs(long_file) -> dict[str, str]:
    """stdout of `asr transcribe FILE --format F` for every format, and the default listing."""
    found = {}
    for fmt in ("tsv", "txt", "json", "srt", "vtt"):
        done = transcribe(str(long_file[0]), "--format", fmt)
        assert done.returncode == 0, done.stderr
        assert done.stderr == "", "piped: nothing but the transcript"
        found[fmt] = done.stdout
    return found


@pytest.fixture(scope="module")
def record(outputs) -> dict:
    return json.loads(outputs["json"])


def test_every_format_carries_the_transcript(long_file, outputs, record):
    path, _, texts = long_file
    text = record["text"]
    assert outputs["txt"] == text + "\n"
    assert outputs["tsv"] == f"{path}\t{text}\n"
    assert record["file"] == str(path)
    assert text == " ".join(s["text"] for s in record["segments"])
    # The same sentences each in a file of their own, as the card's figures are measured:
    # the pauses restart the encoders and the segment (decode.restart_pause_s), so the long
    # file reads as well as they do, within three binomial standard deviations. Without
    # the restarts it read 10-14 points worse here (bench/long_stream.py).
    files = [str(HELDOUT / row["audio"]) for row in sample(SPLIT)[: len(texts)]]
    done = transcribe(*files)
    assert done.returncode == 0, done.stderr
    alone = wer(texts, [line.split("\t", 1)[1] for line in done.stdout.splitlines()]).rate
    errors = wer([" ".join(texts)], [text])
    assert errors.rate <= with_three_deviations(alone, errors.reference_length), (text, alone)


def test_json_times_are_monotone_within_the_audio_and_where_the_speech_is(long_file, record):
    _, spans, _ = long_file
    # each pause ends a segment (the restart) and the decoder ends none inside a sentence
    assert len(record["segments"]) == len(spans), [s["text"] for s in record["segments"]]
    for segment, (start, end) in zip(record["segments"], spans):
        assert start - PAUSE_S <= segment["start"] and segment["end"] <= end + 0.5
    duration = spans[-1][1] + PAUSE_S
    assert record["duration"] == pytest.approx(duration, abs=1e-3)
    previous_end = 0.0
    times = []
    for n, segment in enumerate(record["segments"]):
        assert (segment["segment"], segment["type"], segment["final"]) == (n, "final", True)
        assert previous_end <= segment["start"] < segment["end"] <= duration
        previous_end = segment["end"]
        assert len(segment["token_times"]) == len(segment["tokens"]) > 0
        assert segment["token_times"] == sorted(segment["token_times"])
        assert segment["start"] < segment["token_times"][0]
        assert segment["token_times"][-1] == segment["end"]  # a final ends at its last token
        times += segment["token_times"]
    # Each token is emitted while its sentence is spoken (or just after): none in the
    # pauses, and every sentence has some.
    heard = [[t for t in times if start <= t <= end + 0.5] for start, end in spans]
    assert sum(map(len, heard)) == len(times), (spans, times)
    assert all(heard), (spans, times)


def parse_subtitles(fmt: str, text: str) -> list[tuple[float, float, str]]:
    """(start, end, text) of each cue, read by a real parser of the format (srt or vtt)."""
    if fmt == "srt":
        subtitles = list(srt.parse(text))
        assert [s.index for s in subtitles] == list(range(1, len(subtitles) + 1))
        return [(s.start.total_seconds(), s.end.total_seconds(), s.content) for s in subtitles]
    captions = webvtt.from_string(text).captions
    return [
        (c.start_time.in_milliseconds() / 1000, c.end_time.in_milliseconds() / 1000, c.text)
        for c in captions
    ]


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_subtitles_parse_and_their_cues_tile_the_segments(outputs, record, fmt):
    """Every segment's cues run from its start to its end without gaps, cut only at a word's
    emission time, one line each of at most CUE_CHARS characters, with the segment's words."""
    cues = parse_subtitles(fmt, outputs[fmt])
    assert cues, outputs[fmt]
    for segment in record["segments"]:
        mine = [c for c in cues if segment["start"] <= c[0] < segment["end"]]
        assert mine[0][0] == pytest.approx(segment["start"], abs=5e-4)
        assert mine[-1][1] == pytest.approx(segment["end"], abs=5e-4)
        for (_, end, _), (start, _, _) in zip(mine, mine[1:]):
            assert start == end
            assert any(abs(end - t) < 5e-4 for t in segment["token_times"]), (end, segment)
        for start, end, text in mine:
            assert start < end
            assert "\n" not in text
            assert len(text) <= CUE_CHARS or " " not in text
        assert " ".join(text for _, _, text in mine) == segment["text"]
    assert len(cues) > len(record["segments"]), "long segments are cut into readable cues"
    assert sum(len(c[2]) for c in cues) + len(cues) - 1 == len(record["text"])


def read_terminal(fd: int, into: list[bytes]) -> None:
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed its side
            return
        if not chunk:
            return
        into.append(chunk)


def test_progress_shows_on_a_terminal_only(long_file, outputs):
    """stderr on a terminal gets a bar counting seconds of audio; stdout is unchanged."""
    path, spans, _ = long_file
    total = spans[-1][1] + PAUSE_S
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    shown: list[bytes] = []
    reader = threading.Thread(target=read_terminal, args=(master, shown))
    reader.start()
    try:
        done = transcribe(str(path), "--format", "txt", stderr=slave)
    finally:
        os.close(slave)
        reader.join(30)
        os.close(master)
    assert done.returncode == 0
    assert done.stdout == outputs["txt"]
    terminal = b"".join(shown).decode()
    counts = [float(n) for n in re.findall(rf"([\d.]+)/{total:.1f} s of audio", terminal)]
    assert counts, terminal
    # a bar is redrawn at most every 0.1 s, so the last 5 s step may not show
    assert counts == sorted(counts) and counts[-1] >= total - OFFLINE_CHUNK_S, counts
    assert len(set(counts)) >= 3, "the bar moves as the audio is decoded"


def Segment(segment: int, text: str, tokens: list, times: list, start: float, end: float):
    """A final segment as `asr.formats` reads it (any object with these attributes)."""
    return types.SimpleNamespace(
        segment=segment, text=text, tokens=tokens, token_times=times, start=start, end=end
    )


def test_bare_space_pieces_and_unmapped_pieces_still_cut_cues():
    """A bare "▁" piece is a space, not a word; a segment whose pieces do not spell its text
    (or that has none) is cut by its characters, so no cue is ever longer than CUE_CHARS."""
    words = [f"word{i:02d}" for i in range(20)]
    pieces = [p for w in words for p in ("▁", w)] + ["▁"]  # as a model cut off mid-word says
    times = [0.1 * i for i in range(len(pieces))]
    spelled = Segment(0, " ".join(words), pieces, times, 0.0, 5.0)
    cues = formats._cues([spelled])
    assert len(cues) > 1 and all(len(text) <= CUE_CHARS for _, _, text in cues)
    assert {end for _, end, _ in cues[:-1]} <= {times[2 * i + 1] for i in range(20)}
    bare = Segment(1, " ".join(words), [], [], 5.0, 9.0)
    cues = formats._cues([bare])
    assert all(len(text) <= CUE_CHARS for _, _, text in cues)
    assert cues[0][0] == 5.0 and cues[-1][1] == 9.0
    assert all(a[1] == b[0] < b[1] for a, b in zip(cues, cues[1:]))
    assert " ".join(text for _, _, text in cues) == bare.text
