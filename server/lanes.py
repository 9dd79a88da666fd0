"""Model lanes: where the sessions' model work runs, each lane batched by its own BatchWorker.

A streaming decoder is mostly Python (one search step per encoder state), and
Python runs one thread of bytecode at a time, so one model thread tops out at
one core. With ``Settings.workers`` = N the server starts N model processes
(default: one per core). Each owns the sessions given to it when they start
(the lane with the fewest open sessions takes the next one), keeps their
``StreamingSession`` objects, and runs every batch its BatchWorker collects as
one ``step_sessions`` call, whose encoder step covers all sessions of the batch.
Audio goes down a pipe (6.4 kB per 100 ms of float32), events come back up.
``workers`` = 0 keeps the model in the server process, on one thread.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from asr.audio import check_sample_rate
from asr.events import Event
from server.batching import BatchWorker, Outcome, Step, step_sessions
from server.settings import Settings


class Lane:
    """One model thread or process and its batching queue."""

    def __init__(self, settings: Settings, run_batch: Any, on_batch: Any) -> None:
        self.settings = settings
        self.worker = BatchWorker(
            settings.batch_max_size,
            settings.batch_max_wait_ms / 1000.0,
            run_batch=run_batch,
            on_batch=on_batch,
        )
        self.sessions = 0  # open streaming sessions

    async def load(self) -> None:
        raise NotImplementedError

    def open(self, sample_rate: int) -> Any:
        """A new stream (raises ValueError for an unsupported rate)."""
        stream = self._new_stream(sample_rate)
        self.sessions += 1
        return stream

    def _new_stream(self, sample_rate: int) -> Any:
        raise NotImplementedError

    def close(self, stream: Any) -> None:
        """The session is over: release the stream."""
        self.sessions -= 1

    async def transcribe(self, samples: np.ndarray, sample_rate: int) -> list[Event]:
        raise NotImplementedError

    async def stop(self) -> None:
        await self.worker.close()


class LocalLane(Lane):
    """The model in the server process, on the worker's thread."""

    def __init__(self, settings: Settings, on_batch: Any) -> None:
        super().__init__(settings, step_sessions, on_batch)
        self.recognizer: Any = None

    async def load(self) -> None:
        self.recognizer = await self.worker.run(
            _load, self.settings.model, self.settings.torch_threads, *self.settings.search
        )

    def _new_stream(self, sample_rate: int) -> Any:
        return self.recognizer.stream(sample_rate)

    async def transcribe(self, samples: np.ndarray, sample_rate: int) -> list[Event]:
        return await self.worker.run(self.recognizer.transcribe_segments, samples, sample_rate)


@dataclass(frozen=True)
class RemoteStream:
    """A session that lives in a model process: its id there and its sample rate."""

    sid: int
    sample_rate: int


class ProcessLane(Lane):
    """The model in a child process; the worker's thread talks to it over a pipe."""

    def __init__(self, settings: Settings, on_batch: Any) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a threaded parent
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=serve_sessions,
            args=(child, str(settings.model), settings.torch_threads, *settings.search),
            name="asr-model",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._ids = itertools.count()
        self._drops: deque[int] = deque()  # ended sessions, sent with the next batch
        super().__init__(settings, self._run_batch, on_batch)

    async def load(self) -> None:
        await self.worker.run(self._receive)

    def _new_stream(self, sample_rate: int) -> RemoteStream:
        return RemoteStream(next(self._ids), check_sample_rate(sample_rate))

    def close(self, stream: RemoteStream) -> None:
        self._drops.append(stream.sid)
        super().close(stream)

    async def transcribe(self, samples: np.ndarray, sample_rate: int) -> list[Event]:
        return await self.worker.run(self._call, ("transcribe", (samples, sample_rate)))

    async def stop(self) -> None:
        await super().stop()  # the worker's thread is done with the pipe
        with contextlib.suppress(OSError):  # the process may be gone already
            self._conn.send(("stop", None))
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
        self._conn.close()

    def _run_batch(self, steps: Sequence[Step], deliver: Callable[[Step, Outcome], None]) -> None:
        drops = [self._drops.popleft() for _ in range(len(self._drops))]
        items = [(s.stream.sid, s.stream.sample_rate, s.samples) for s in steps]
        for step, outcome in zip(steps, self._call(("steps", (drops, items)))):
            deliver(step, outcome)

    def _call(self, message: tuple[str, Any]) -> Any:
        self._conn.send(message)
        return self._receive()

    def _receive(self) -> Any:
        try:
            reply = self._conn.recv()
        except EOFError:
            raise RuntimeError("the model process has exited") from None
        if isinstance(reply, Exception):
            raise reply
        return reply


def make_lanes(settings: Settings, on_batch: Any) -> list[Lane]:
    if settings.workers == 0:
        return [LocalLane(settings, on_batch)]
    return [ProcessLane(settings, on_batch) for _ in range(settings.workers)]


# -- the model process -------------------------------------------------------------
def serve_sessions(
    conn: Connection, model: str, threads: int, beam: int | None, lm_weight: float | None
) -> None:
    """A model process's loop: load the model, then answer batches until told to stop."""
    from asr.streaming import step_sessions as run_sessions

    try:
        recognizer = _load(model, threads, beam, lm_weight)
    except Exception as err:
        conn.send(RuntimeError(f"cannot load model {model}: {err}"))
        return
    conn.send(None)  # ready
    sessions: dict[int, Any] = {}
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if kind == "stop":
            return
        if kind == "transcribe":
            try:
                reply: Any = recognizer.transcribe_segments(*payload)
            except Exception as err:
                reply = _portable(err)
            conn.send(reply)
            continue
        drops, items = payload
        for sid in drops:
            sessions.pop(sid, None)
        for sid, rate, _ in items:
            if sid not in sessions:
                sessions[sid] = recognizer.stream(rate)  # the rate was checked on open
        streams = [sessions[sid] for sid, _, _ in items]
        outcomes = run_sessions(streams, [samples for _, _, samples in items])
        for (sid, _, _), stream in zip(items, streams):
            if stream.finished:
                sessions.pop(sid, None)
        conn.send([_portable(o) if isinstance(o, Exception) else o for o in outcomes])


def _portable(err: Exception) -> Exception:
    """The exception as the server can unpickle and map it: bad input stays a ValueError."""
    return ValueError(str(err)) if isinstance(err, ValueError) else RuntimeError(repr(err))


def _load(path: str | Path, threads: int, beam: int | None, lm_weight: float | None) -> Any:
    import torch

    from asr import load_model

    torch.set_num_threads(threads)  # process-wide: the model thread is torch's only user here
    recognizer = load_model(path)
    recognizer.set_search(beam, lm_weight)
    return recognizer
