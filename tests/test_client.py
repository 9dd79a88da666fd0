"""`asr stream`: a file streamed to a live server prints the expected transcript."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from asr.formats import FORMATS, plain_text, render
from server.live import LiveServer
from server.settings import Settings
from tests.test_formats import parse_subtitles
from tests.test_server_support import offline_text, recognizer, speechlike, write_wav

KEY = "client-key"


@pytest.fixture(scope="module")
def server(tiny_bundle):
    with LiveServer(Settings(model=tiny_bundle, api_key=KEY)) as live:
        yield live


def asr_stream(*args: str, key: str = KEY) -> subprocess.CompletedProcess:
    """Run the real console entry point; the key travels in the environment, as documented."""
    return subprocess.run(
        [sys.executable, "-m", "asr.cli", "stream", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ASR_API_KEY": key},
    )


@pytest.mark.parametrize("fast", [True, False])
def test_client_prints_transcript(server, tiny_bundle, tmp_path, fast):
    samples = speechlike(1.5, 22050, seed=11)
    wav = write_wav(tmp_path / "speech.wav", samples, 22050)
    started = time.monotonic()
    args = [str(wav), "--url", server.url("/v1/stream", "ws")] + (["--fast"] if fast else [])
    done = asr_stream(*args)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    expected = offline_text(tiny_bundle, samples, 22050)
    assert expected, "the test model should say something"
    print(done.stdout)
    assert "\r" not in done.stdout  # not a terminal: finals only, one per line
    assert " ".join(done.stdout.splitlines()) == expected
    if not fast:
        assert elapsed >= 1.4  # real-time pacing


@pytest.mark.parametrize("fmt", FORMATS)
def test_client_writes_the_transcript_formats(server, tiny_bundle, tmp_path, fmt):
    """--format F prints the whole transcript in F at the end; --out FILE writes it there (the
    format from FILE's suffix) and leaves the live finals on stdout. Both are what the one
    formatter makes of the offline segments: the stream's finals carry the same times."""
    samples = speechlike(3.0, 16000, seed=12)
    wav = write_wav(tmp_path / "speech.wav", samples, 16000)
    segments = recognizer(str(tiny_bundle)).transcribe_segments(samples, 16000)
    expected = render(fmt, segments, 3.0)
    url = server.url("/v1/stream", "ws")
    done = asr_stream(str(wav), "--url", url, "--fast", "--format", fmt)
    assert (done.returncode, done.stdout, done.stderr) == (0, expected, ""), done.stderr
    out = tmp_path / f"transcript.{fmt}"
    done = asr_stream(str(wav), "--url", url, "--fast", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8") == expected
    assert " ".join(done.stdout.splitlines()) == plain_text(segments)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "docx"], "invalid choice: 'docx'"),
        (["--out", "transcript.docx"], "cannot tell the format of transcript.docx"),
        (["--out", "missing/transcript.srt"], "missing is not a directory"),
        (["--frame-ms", "0"], "--frame-ms must be a positive number of milliseconds, got 0.0"),
        (["--frame-ms", "-100"], "--frame-ms must be a positive number"),
        (["--frame-ms", "nan"], "--frame-ms must be a positive number"),
        (["--url", "http://127.0.0.1:9/v1/stream"], "scheme isn't ws or wss"),
    ],
)
def test_client_refuses_options_it_cannot_use(tmp_path, args, message):
    """Refused before connecting (the URL is unreachable): exit status 2 and the reason."""
    wav = write_wav(tmp_path / "speech.wav", speechlike(0.5), 16000)
    done = subprocess.run(
        [sys.executable, "-m", "asr.cli", "stream", str(wav), "--url", "ws://127.0.0.1:9/", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_client_reports_server_errors(server, tmp_path):
    wav = write_wav(tmp_path / "speech.wav", speechlike(0.5), 16000)
    done = asr_stream(str(wav), "--url", server.url("/v1/stream", "ws"), "--fast", key="wrong")
    assert done.returncode == 1
    assert "unauthorized" in done.stderr


def test_client_wrong_path_is_a_one_line_error(server, tmp_path):
    """A server that answers the handshake with an HTTP status (no WebSocket at that path)."""
    wav = write_wav(tmp_path / "speech.wav", speechlike(0.5), 16000)
    done = asr_stream(str(wav), "--url", server.url("/v1/nowhere", "ws"), "--fast")
    assert done.returncode == 1
    assert "refused the stream" in done.stderr and "HTTP 403" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.fixture(scope="module")
def short_sessions(tiny_bundle):
    """Sessions end with session_too_long after 2 s, their finals flushed first."""
    with LiveServer(Settings(model=tiny_bundle, max_session_s=2.0, workers=0)) as live:
        yield live


def test_client_keeps_the_finals_of_a_session_ended_by_an_error(short_sessions, tmp_path):
    """The server flushes the finals before session_too_long: --out still writes them and
    --format still prints them; then the error is reported, exit status 1."""
    wav = write_wav(tmp_path / "speech.wav", speechlike(4.0, seed=14), 16000)
    url = short_sessions.url("/v1/stream", "ws")
    out = tmp_path / "transcript.srt"
    done = asr_stream(str(wav), "--url", url, "--out", str(out))
    assert done.returncode == 1
    assert done.stderr.startswith("asr stream: server error session_too_long:"), done.stderr
    live = " ".join(done.stdout.splitlines())
    assert live, "the finals before the limit should say something"
    assert " ".join(cue[2] for cue in parse_subtitles("srt", out.read_text())) == live
    done = asr_stream(str(wav), "--url", url, "--format", "txt")
    assert done.returncode == 1
    assert "server error session_too_long" in done.stderr
    assert done.stdout.strip() and done.stdout.count("\n") == 1, done.stdout


def test_client_two_pass_flags(server, tiny_bundle, tmp_path):
    """--two-pass and --no-two-pass travel in the start frame: the fbank test model refuses
    the first (it has no two-pass finals) and streams as usual with the second."""
    samples = speechlike(1.0, 16000, seed=13)
    wav = write_wav(tmp_path / "speech.wav", samples, 16000)
    url = server.url("/v1/stream", "ws")
    done = asr_stream(str(wav), "--url", url, "--fast", "--two-pass")
    assert done.returncode == 1
    assert "server error unsupported_option: two_pass:" in done.stderr
    done = asr_stream(str(wav), "--url", url, "--fast", "--no-two-pass")
    assert done.returncode == 0, done.stderr
    assert " ".join(done.stdout.splitlines()) == offline_text(tiny_bundle, samples, 16000)


def test_client_unreachable_server(tmp_path):
    wav = write_wav(tmp_path / "speech.wav", speechlike(0.5), 16000)
    done = asr_stream(str(wav), "--url", "ws://127.0.0.1:9/v1/stream", "--fast")
    assert done.returncode == 1
    assert "cannot reach" in done.stderr


def test_mic_without_sounddevice_or_device_is_a_clear_error():
    done = asr_stream("--mic", "--url", "ws://127.0.0.1:9/v1/stream")
    if done.returncode == 0:
        pytest.skip("this machine has a working microphone")
    assert done.returncode == 2
    assert "sounddevice" in done.stderr or "no audio input device" in done.stderr
