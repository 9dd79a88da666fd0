"""Two-pass finals asked for per session over /v1/stream: real uvicorn on loopback, in both
lane kinds, serving one two-pass bundle; each session's finals are those offline
transcription gives with the same choice, whatever the sessions next to it asked for."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from asr.audio import read_audio
from asr.bundle import load_model
from asr.config import SessionOptions
from server.client import file_frames, stream
from server.lanes import _load
from server.live import LiveServer
from server.protocol import Result
from server.settings import Settings


@pytest.fixture(scope="module", params=[0, 1], ids=["local-lane", "process-lane"])
def live(request: pytest.FixtureRequest, two_pass_bundle: Path):
    """workers=0: the model in the server process; workers=1: in one model process."""
    with LiveServer(Settings(model=two_pass_bundle, workers=request.param)) as server:
        yield server


@pytest.fixture(scope="module")
def utterance(speech_dir: Path) -> tuple[np.ndarray, int]:
    return read_audio(speech_dir / "utt00.wav")  # two segments, where the passes differ


@pytest.fixture(scope="module")
def expected(two_pass_bundle: Path, utterance: tuple[np.ndarray, int]) -> dict[bool, list]:
    """The utterance's finals from offline transcription, with two-pass finals and without."""
    recognizer = load_model(two_pass_bundle)
    finals = {}
    for two_pass in (True, False):
        recognizer.set_search(two_pass=two_pass)
        finals[two_pass] = [
            Result.from_event(e) for e in recognizer.transcribe_segments(*utterance)
        ]
    assert finals[True] != finals[False]
    assert len(finals[True]) == 2
    return finals


def test_each_session_gets_the_finals_it_asks_for(
    live: LiveServer, utterance: tuple[np.ndarray, int], expected: dict[bool, list]
) -> None:
    samples, rate = utterance

    async def sessions() -> list:
        url = live.url("/v1/stream", "ws")
        choices = [True, False, None]  # None: the bundle's default, two-pass finals
        return await asyncio.gather(
            *(
                stream(
                    url,
                    file_frames(samples, rate, paced=False),
                    rate,
                    options=SessionOptions(two_pass=choice),
                )
                for choice in choices
            )
        )

    transcripts = asyncio.run(sessions())
    assert [t.segments for t in transcripts] == [expected[True], expected[False], expected[True]]
    status, ready = live.get_json("/readyz")
    assert status == 200 and ready["two_pass"] == {"available": True, "default": True}


@pytest.mark.parametrize("samples", [10, 200])
def test_a_click_of_audio_ends_with_nothing_said(live: LiveServer, samples: int) -> None:
    """A session stopped after a few samples (too few for one frame) ends normally."""
    click = np.full(samples, 0.1, dtype=np.float32)
    transcript = asyncio.run(
        stream(live.url("/v1/stream", "ws"), file_frames(click, 16000, paced=False), 16000)
    )
    assert transcript.end_at is not None and transcript.segments == []


def test_a_two_pass_bundle_without_its_teacher_does_not_load(
    two_pass_bundle: Path, tmp_path: Path
) -> None:
    """A model process would die on its first session; it is refused at load instead."""
    broken = tmp_path / "bundle"
    shutil.copytree(two_pass_bundle, broken)
    (broken / "whisper_teacher.safetensors").unlink()
    with pytest.raises(ValueError, match="the bundle asks for two-pass finals, but .*teacher"):
        _load(broken, 1, None, None)
