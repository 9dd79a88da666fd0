"""Run model work off the event loop, batched across sessions.

Sessions submit steps (new audio for ``accept``, or ``finish``). A worker takes
up to ``max_size`` pending steps, waiting at most ``max_wait`` for a batch to
fill, and runs them all in a single executor hop on one model thread. Each
step's outcome (events or exception) goes back to its own session only, so a
failing or slow client never blocks or breaks another. ``finish`` steps (with
the audio that came with ``stop``) go first and in batches of their own: they
are what a client waits on after ``stop``, and a batch of every other session's
audio would make it wait for all of their encoder work (the audio waits a
finish step's few milliseconds).

``step_sessions`` (the server's) runs the encoder once for all streaming
sessions of a batch (``asr.streaming.step_sessions``); ``step_each``, the
default for any other ``Stream``, runs the steps one by one. Any callable with
the ``BatchStep`` signature works.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

import numpy as np

from asr.events import Event
from asr.final_pass import FinalsInBackground
from asr.streaming import StreamingSession
from asr.streaming import step_sessions as run_sessions

T = TypeVar("T")
Outcome = list[Event] | Exception


class Stream(Protocol):
    """The part of ``asr.streaming.StreamingSession`` the worker drives."""

    def accept(self, samples: np.ndarray) -> list[Event]: ...

    def finish(self) -> list[Event]: ...


@dataclass
class Step:
    """One unit of work: feed ``samples`` to ``stream``, or finish it when ``samples`` is None."""

    stream: Stream
    samples: np.ndarray | None
    future: asyncio.Future[list[Event]] = field(repr=False)


# (steps, deliver): run the steps on the model thread and call deliver(step, outcome)
# once per step, from that thread, as soon as the step's outcome is known
BatchStep = Callable[[Sequence[Step], Callable[[Step, Outcome], None]], None]


def step_each(steps: Sequence[Step], deliver: Callable[[Step, Outcome], None]) -> None:
    """Run steps one after another; each session gets its events without waiting for the rest."""
    for step in steps:
        try:
            events = (
                step.stream.finish() if step.samples is None else step.stream.accept(step.samples)
            )
        except Exception as err:  # goes to the step's own session only
            deliver(step, err)
        else:
            deliver(step, events)


_BACKGROUND: FinalsInBackground | None = None  # the in-process lane's writer of finals


def step_sessions(steps: Sequence[Step], deliver: Callable[[Step, Outcome], None]) -> None:
    """In-process streaming sessions of one model: one encoder call for the whole batch; their
    two-pass finals are written beside the steps (one writer for the process)."""
    global _BACKGROUND
    if _BACKGROUND is None:
        _BACKGROUND = FinalsInBackground()
    outcomes = run_sessions(
        [cast(StreamingSession, step.stream) for step in steps],
        [step.samples for step in steps],
        _BACKGROUND,
    )
    for step, outcome in zip(steps, outcomes):
        deliver(step, outcome)


class BatchWorker:
    """A priority queue of streaming steps served by one model thread."""

    def __init__(
        self,
        max_size: int,
        max_wait_s: float,
        run_batch: BatchStep = step_each,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        self.max_size = max_size
        self.max_wait_s = max_wait_s
        self.run_batch = run_batch
        self.on_batch = on_batch  # (batch size, seconds of compute) for metrics
        # one thread: a single owner of the model keeps each session's steps in order
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr-model")
        self._finishes: deque[Step] = deque()
        self._audio: deque[Step] = deque()
        self._pending = asyncio.Event()  # set when a step arrives
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._serve(), name="asr-batcher")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for step in [*self._finishes, *self._audio]:
            _settle(step, RuntimeError("the model worker has stopped"))
        self._finishes.clear()
        self._audio.clear()
        self._executor.shutdown(wait=True, cancel_futures=True)

    async def accept(self, stream: Stream, samples: np.ndarray) -> list[Event]:
        return await self._submit(stream, samples)

    async def finish(self, stream: Stream, samples: np.ndarray | None = None) -> list[Event]:
        """Flush the stream, after its last ``samples`` if given: both go in the finishing
        queue, so the audio that came with ``stop`` does not wait behind every other
        session's audio and then again for the finish. The events of both; an error of
        either (the audio's first) is raised, once both have run."""
        steps = [] if samples is None else [self._submit(stream, samples, finishing=True)]
        steps.append(self._submit(stream, None))
        outcomes = await asyncio.gather(*steps, return_exceptions=True)
        events: list[Event] = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            events += outcome
        return events

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run non-streaming model work (loading, whole-file transcription) on the model thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _submit(
        self, stream: Stream, samples: np.ndarray | None, finishing: bool = False
    ) -> asyncio.Future[list[Event]]:
        """Queue a step now (in call order); its outcome is the future's."""
        future: asyncio.Future[list[Event]] = asyncio.get_running_loop().create_future()
        queue = self._finishes if samples is None or finishing else self._audio
        queue.append(Step(stream, samples, future))
        self._pending.set()
        return future

    async def _next_arrival(self, timeout: float | None = None) -> None:
        """Wait until a step is submitted (or ``timeout`` seconds pass)."""
        self._pending.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._pending.wait(), timeout)

    async def _collect(self) -> list[Step]:
        while not (self._finishes or self._audio):
            await self._next_arrival()
        batch: list[Step] = []
        deadline = time.monotonic() + self.max_wait_s
        while not self._finishes and len(batch) < self.max_size:
            if self._audio:
                batch.append(self._audio.popleft())
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await self._next_arrival(remaining)
        if self._finishes:  # they go first, alone: the audio waits in its order
            self._audio.extendleft(reversed(batch))
            batch = [
                self._finishes.popleft() for _ in range(min(self.max_size, len(self._finishes)))
            ]
        # a session that went away while queued no longer needs its step
        return [step for step in batch if not step.future.done()]

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()

        def deliver(step: Step, outcome: Outcome) -> None:
            loop.call_soon_threadsafe(_settle, step, outcome)

        while True:
            batch = await self._collect()
            if not batch:
                continue
            started = time.perf_counter()
            try:
                await loop.run_in_executor(self._executor, self.run_batch, batch, deliver)
            except Exception as err:  # a broken batch fails its open steps, not the worker
                for step in batch:
                    _settle(step, err)
            if self.on_batch is not None:
                self.on_batch(len(batch), time.perf_counter() - started)
            # deliveries were queued on the loop before the executor's completion, so they
            # have run by now; a batch step that skipped a step must not leave it hanging
            for step in batch:
                _settle(step, RuntimeError("the batch step gave no outcome for this step"))


def _settle(step: Step, outcome: Outcome) -> None:
    if step.future.done():  # already settled, or the session went away
        return
    if isinstance(outcome, Exception):
        step.future.set_exception(outcome)
    else:
        step.future.set_result(outcome)
