"""Soak: a real `asr serve` (the bundled model, one process per core) through 500
connect-start-stop cycles and 60-minute streams of held-out speech sent unpaced, one
after another until the soak has run for five minutes (a fast model streams an hour
in less than two).

Resident memory of the server and its model processes, summed, may grow by at most
20 MB after the first minute, and their open file descriptors must come back to
where they started. Slow: `python -m pytest -m slow tests/test_soak.py -s` prints
the figures.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import soundfile
from websockets.asyncio.client import connect

from asr.audio import resample
from server.client import stream
from tests.test_server_cli import serve_process

REPO = Path(__file__).resolve().parents[1]
HELDOUT = REPO / "tests" / "data" / "heldout"
CYCLES = 500
STREAM_S = 3600.0
WARM_UP_S = 60.0
MIN_RUN_S = 5 * WARM_UP_S
MAX_GROWTH = 20 * 2**20


class Sampler(threading.Thread):
    """Resident memory and open descriptors of a process and its descendants, every second."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.began = time.monotonic()
        self.samples: list[tuple[float, int, int]] = []  # (seconds since start, rss, fds)
        self.done = threading.Event()

    def measure(self) -> tuple[int, int]:
        rss = fds = 0
        for process in [self.root, *self.root.children(recursive=True)]:
            try:
                rss += process.memory_info().rss
                fds += process.num_fds()
            except psutil.NoSuchProcess:
                continue
        return rss, fds

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.samples.append((time.monotonic() - self.began, *self.measure()))


async def cycle(url: str) -> None:
    """Connect, start, stop at once; the server must end the session normally."""
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "start", "sample_rate": 16000}))
        assert json.loads(await ws.recv())["type"] == "ready"
        await ws.send(json.dumps({"type": "stop"}))
        messages = [json.loads(message) async for message in ws]
    assert messages[-1] == {"type": "end", "reason": "stop"}, messages
    assert ws.close_code == 1000


async def cycles(url: str, count: int, parallel: int = 10) -> None:
    async def worker(n: int) -> None:
        for _ in range(n):
            await cycle(url)

    await asyncio.gather(*(worker(count // parallel) for _ in range(parallel)))


async def speech_frames(seconds: float, rate: int = 16000) -> AsyncIterator[bytes]:
    """``seconds`` of the shipped held-out utterances over and over, as 100 ms f32le frames,
    made as they are sent (60 minutes would be 230 MB at once)."""
    clips = []
    for path in sorted(HELDOUT.glob("*/*.flac")):
        samples, clip_rate = soundfile.read(path, dtype="float32")
        clips += [resample(samples, clip_rate, rate), np.zeros(rate // 4, np.float32)]
    loop = np.concatenate(clips)
    step = rate // 10
    for begin in range(0, int(seconds * rate), step):
        yield np.take(loop, np.arange(begin, begin + step), mode="wrap").astype("<f4").tobytes()


@pytest.mark.slow
@pytest.mark.timeout(3 * 3600)
def test_soak_memory_and_descriptors_stay_flat():
    args = [sys.executable, "-m", "asr.cli", "serve", "--model", str(REPO / "models" / "default")]
    with serve_process(args, REPO) as served:
        url = f"ws://127.0.0.1:{served.port}/v1/stream"
        sampler = Sampler(served.process.pid)
        _, fds_before = sampler.measure()
        sampler.start()
        began = time.monotonic()
        asyncio.run(cycles(url, CYCLES))
        cycled = time.monotonic() - began
        transcripts = []
        while not transcripts or time.monotonic() - began < MIN_RUN_S:
            transcripts.append(asyncio.run(stream(url, speech_frames(STREAM_S), 16000)))
        streamed = time.monotonic() - began - cycled
        deadline = time.monotonic() + 30
        while (fds_after := sampler.measure()[1]) != fds_before and time.monotonic() < deadline:
            time.sleep(0.5)  # closed sockets may take a moment to be released
        sampler.done.set()
        sampler.join()
    samples = sampler.samples
    baseline = next(rss for t, rss, _ in samples if t >= WARM_UP_S)
    later = [rss for t, rss, _ in samples if t >= WARM_UP_S]
    growth, final_growth = max(later) - baseline, later[-1] - baseline
    print(
        f"\nsoak: {CYCLES} cycles in {cycled:.0f} s, {len(transcripts)} {STREAM_S / 60:.0f}-minute "
        f"stream(s) in {streamed:.0f} s ({[len(t.text.split()) for t in transcripts]} words); "
        f"RSS at {WARM_UP_S:.0f} s "
        f"{baseline / 2**20:.1f} MB, peak after it +{growth / 2**20:.1f} MB, at the end "
        f"{final_growth / 2**20:+.1f} MB (first sample {samples[0][1] / 2**20:.1f} MB); "
        f"fds {fds_before} before, {fds_after} after"
    )
    assert samples[-1][0] > 2 * WARM_UP_S, "the soak must run well past its first minute"
    for transcript in transcripts:
        assert transcript.end_at is not None
        assert len(transcript.text.split()) > STREAM_S / 10  # words kept coming to the end
    assert growth <= MAX_GROWTH
    assert fds_after <= fds_before  # none leaked (one open while the models loaded may close)
