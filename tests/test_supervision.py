"""Model processes under supervision: kill -9 one while sessions run, and one that cannot start.

Real uvicorn on loopback, real model processes, real signals; the bundled model
transcribes shipped held-out speech, and every transcript is checked against
offline transcription of the same audio.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from server.client import StreamError, file_frames, stream
from server.live import LiveServer
from server.settings import Settings
from tests.test_server import exchange, metric, start
from tests.test_server_support import offline_text, speechlike

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "default"
HELDOUT = REPO / "tests" / "data" / "heldout"


@pytest.fixture(autouse=True)
def _no_stray_model_processes():
    """Every model process a test started is gone when it ends (reaped, none left running)."""
    yield
    assert not [p for p in multiprocessing.active_children() if p.name == "asr-model"]


def heldout(min_seconds: float) -> list[tuple[np.ndarray, int]]:
    """Shipped held-out utterances at least ``min_seconds`` long, both splits."""
    clips = []
    for path in sorted(HELDOUT.glob("*/*.flac")):
        samples, rate = soundfile.read(path, dtype="float32")
        if len(samples) >= min_seconds * rate:
            clips.append((samples, rate))
    return clips


def url(live: LiveServer) -> str:
    return live.url("/v1/stream", "ws")


async def transcribe_live(live: LiveServer, samples: np.ndarray, rate: int) -> str:
    """One paced session: the transcript, or the error code the server ended it with."""
    try:
        transcript = await stream(url(live), file_frames(samples, rate), rate)
    except StreamError as err:
        return f"error: {err.code}"
    return transcript.text


async def wait_for(condition, timeout: float) -> float:
    """Poll ``condition`` (a blocking call, run off the loop) until true; the seconds it took."""
    began = time.monotonic()
    while not await asyncio.to_thread(condition):
        assert time.monotonic() - began < timeout, "timed out"
        await asyncio.sleep(0.05)
    return time.monotonic() - began


def live_processes(live: LiveServer) -> int:
    return live.get_json("/readyz")[1]["live_processes"]


def test_killed_model_process_is_replaced():
    """Ten real-time sessions over two model processes; kill -9 one of them. Its sessions get
    internal_error, the others finish with the right transcript, new sessions meanwhile go to
    the live process, and within 30 s a replacement serves and every new session succeeds."""
    clips = heldout(2.1)[:10]
    assert len(clips) == 10
    expected = [offline_text(MODEL, samples, rate) for samples, rate in clips]

    async def main(live: LiveServer):
        state = live.app.state.asr
        sessions = [asyncio.create_task(transcribe_live(live, *clip)) for clip in clips]
        await wait_for(lambda: sum(lane.sessions for lane in state.lanes) == len(clips), 30)
        victim = state.lanes[0]
        held, pid = victim.sessions, victim.pid
        os.kill(pid, signal.SIGKILL)
        detected = await wait_for(lambda: live_processes(live) == 1, 30)
        meanwhile = await asyncio.gather(*(transcribe_live(live, *clip) for clip in clips[:2]))
        outcomes = await asyncio.gather(*sessions)
        back = detected + await wait_for(lambda: live_processes(live) == 2, 30)
        after = await asyncio.gather(*(transcribe_live(live, *clip) for clip in clips[:6]))
        return held, pid, victim.pid, detected, meanwhile, outcomes, back, after

    with LiveServer(Settings(model=MODEL, workers=2)) as live:
        errors_before = metric(live, "asr_errors_total", kind="internal_error")
        held, pid, new_pid, detected, meanwhile, outcomes, back, after = asyncio.run(main(live))
        status, ready = live.get_json("/readyz")
        restarts = metric(live, "asr_model_restarts_total")
        errors = metric(live, "asr_errors_total", kind="internal_error") - errors_before

    assert 1 <= held < len(clips)
    assert detected < 3.0  # the death is seen at once, not at the next request
    assert outcomes.count("error: internal_error") == held == errors
    for outcome, text in zip(outcomes, expected):
        assert outcome in (text, "error: internal_error")
    assert meanwhile == expected[:2]  # while one process was down, the other took them
    assert back < 30
    assert after == expected[:6]
    assert (status, ready["processes"], ready["live_processes"]) == (200, 2, 2)
    assert restarts == 1
    assert new_pid != pid


def test_no_live_process_means_not_ready(tiny_bundle):
    """With the only model process dead, new sessions get not_ready (1013) and /readyz says
    503 restarting, until the replacement has loaded."""
    clip = speechlike(1.0, seed=5)
    expected = offline_text(tiny_bundle, clip, 16000)

    async def main(live: LiveServer):
        os.kill(live.app.state.asr.lanes[0].pid, signal.SIGKILL)
        await wait_for(lambda: live.get_json("/readyz")[0] == 503, 5)
        status, body = live.get_json("/readyz")
        refused = await exchange(url(live), [start()])
        await wait_for(lambda: live.get_json("/readyz")[0] == 200, 30)
        return body, refused, await transcribe_live(live, clip, 16000)

    with LiveServer(Settings(model=tiny_bundle, workers=1)) as live:
        body, (messages, close), text = asyncio.run(main(live))
    assert (body["status"], body["processes"], body["live_processes"]) == ("restarting", 1, 0)
    assert [m["code"] for m in messages] == ["not_ready"] and close == 1013
    assert text == expected


def test_process_that_cannot_start_is_retried_with_backoff(tmp_path, tiny_bundle, caplog):
    """A replacement that cannot load (its weights are gone) is retried after 0.5 s, then 1 s,
    then 2 s, not in a tight loop; the other process serves meanwhile, and once the weights
    are back the next attempt serves again."""
    caplog.set_level(logging.INFO, logger="server.supervision")
    bundle = Path(shutil.copytree(tiny_bundle, tmp_path / "bundle"))
    weights, hidden = bundle / "model.safetensors", tmp_path / "hidden.safetensors"
    clip = speechlike(1.0, seed=6)
    expected = offline_text(tiny_bundle, clip, 16000)
    settings = Settings(model=bundle, workers=2, restart_backoff_s=0.5)

    def failed_starts() -> int:
        return sum("failed to start" in r.getMessage() for r in caplog.records)

    async def main(live: LiveServer):
        weights.rename(hidden)
        os.kill(live.app.state.asr.lanes[0].pid, signal.SIGKILL)
        attempts, seen = [], 0.0
        while len(attempts) < 3:  # the restart counter, sampled: when each attempt began
            count = await asyncio.to_thread(metric, live, "asr_model_restarts_total")
            if count > seen:
                attempts.append(time.monotonic())
                seen = count
            if failed_starts() == 2 and hidden.exists():
                hidden.rename(weights)  # the third attempt can load
            await asyncio.sleep(0.05)
        degraded = live.get_json("/readyz")
        meanwhile = await transcribe_live(live, clip, 16000)
        await wait_for(lambda: live_processes(live) == 2, 30)
        return attempts, degraded, meanwhile

    with LiveServer(settings) as live:
        attempts, degraded, meanwhile = asyncio.run(main(live))
        restarts = metric(live, "asr_model_restarts_total")
        after = asyncio.run(transcribe_live(live, clip, 16000))

    delays = [
        float(r.getMessage().split(" in ")[1].rstrip(" s"))
        for r in caplog.records
        if r.getMessage().startswith("starting a replacement")
    ]
    assert delays == [0.5, 1.0, 2.0]
    gaps = np.diff(attempts)
    assert all(gap > delay for gap, delay in zip(gaps, delays[1:]))  # it did wait
    assert failed_starts() == 2 and restarts == 3
    assert degraded[0] == 200 and degraded[1]["live_processes"] == 1
    assert meanwhile == after == expected
