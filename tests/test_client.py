"""`asr stream`: a file streamed to a live server prints the expected transcript."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from server.live import LiveServer
from server.settings import Settings
from tests.test_server_support import offline_text, speechlike, write_wav

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


def test_client_reports_server_errors(server, tmp_path):
    wav = write_wav(tmp_path / "speech.wav", speechlike(0.5), 16000)
    done = asr_stream(str(wav), "--url", server.url("/v1/stream", "ws"), "--fast", key="wrong")
    assert done.returncode == 1
    assert "unauthorized" in done.stderr


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
