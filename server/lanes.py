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

A model process can die under the server (OOM killer, crash, ``kill -9``); its
lane then replaces it (``server/supervision.py`` decides when), and the lane's
sessions of the dead process end with an error instead of continuing silently
without their state.

Model processes ignore SIGINT and SIGTERM: Ctrl-C at a terminal, a SIGTERM to the
process group or to a whole container or unit reaches them too, and the server
must flush its open sessions through them before it stops them itself. They
still go with the server: a closed pipe ends them.

Uploads (``Lane.transcribe``) run as sessions of the lane too, one piece at a time,
so a long file takes turns with the streaming sessions instead of holding the
model thread for all of its length.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import multiprocessing.util
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, get_args

import numpy as np

from asr.audio import check_sample_rate
from asr.config import SessionOptions, StreamingDecoder
from asr.events import Event
from asr.recognizer import offline_pieces
from server.batching import BatchWorker, Outcome, Step, step_sessions
from server.settings import Settings


class LaneDied(RuntimeError):
    """The model process of a lane exited: the sessions it held are lost."""


REFUSABLE = ("two_pass", "streaming_decoder")  # options a model may be unable to serve


@dataclass(frozen=True)
class Capabilities:
    """What a session may ask of the lane's model, learnt once when the model loads, so a
    request the model cannot serve is refused before any stream exists."""

    # what a start frame that chooses nothing gets: the model's settings
    two_pass_default: bool = False
    streaming_decoder_default: StreamingDecoder = "lstm"
    # why a session may not have an option's offer (two-pass finals, Whisper's streaming
    # decoder), by option
    problems: dict[str, str] = field(
        default_factory=lambda: dict.fromkeys(REFUSABLE, "no model is loaded")
    )

    @property
    def two_pass(self) -> bool:
        """Whether a session may ask for two-pass finals."""
        return "two_pass" not in self.problems

    @property
    def streaming_decoders(self) -> list[StreamingDecoder]:
        """The streaming decoders a session may ask for."""
        choices = get_args(StreamingDecoder)
        return [c for c in choices if c == "lstm" or "streaming_decoder" not in self.problems]

    def refusal(self, options: SessionOptions) -> str | None:
        """Why a session's ``options`` cannot be served (None: they can), naming the option."""
        asks = {
            "two_pass": bool(options.two_pass),
            "streaming_decoder": options.streaming_decoder == "whisper",
        }
        for option, asked in asks.items():
            if asked and option in self.problems:
                return f"{option}: {self.problems[option]}"
        return None


class Lane:
    """One model thread or process and its batching queue.

    ``live`` says whether new sessions may go to the lane; ``died`` resolves when
    the model that the lane's current sessions live in is gone (a process lane
    gets a new future with each model process).
    """

    def __init__(self, settings: Settings, run_batch: Any, on_batch: Any) -> None:
        self.settings = settings
        self.worker = BatchWorker(
            settings.batch_max_size,
            settings.batch_max_wait_ms / 1000.0,
            run_batch=run_batch,
            on_batch=on_batch,
        )
        self.sessions = 0  # open streaming sessions
        self.uploads = 0  # whole-file transcriptions under way
        self.live = False
        self.capabilities = Capabilities()  # of the model last loaded
        self.died: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def load(self) -> None:
        raise NotImplementedError

    @property
    def busy(self) -> int:
        """What the choice of a lane for new work ranks: its sessions and uploads."""
        return self.sessions + self.uploads

    def open(self, sample_rate: int, options: SessionOptions | None = None) -> Any:
        """A new stream (raises ValueError for an unsupported rate); ``options`` (None: the
        model's settings) must be ones ``capabilities`` allows."""
        stream = self._new_stream(sample_rate, options or SessionOptions())
        self.sessions += 1
        return stream

    def _new_stream(self, sample_rate: int, options: SessionOptions) -> Any:
        raise NotImplementedError

    def close(self, stream: Any) -> None:
        """The session is over: release the stream."""
        self._forget(stream)
        self.sessions -= 1

    def _forget(self, stream: Any) -> None:
        """Release a stream's state in the model (the process lane's job)."""

    async def transcribe(self, samples: np.ndarray, sample_rate: int) -> list[Event]:
        """The finals of a whole file: a session of the lane fed the pieces offline
        transcription feeds (the same finals), each a step of its own that waits its turn
        with the streaming sessions' steps, so none of them waits for the whole file."""
        stream = self._new_stream(sample_rate, SessionOptions())
        self.uploads += 1
        try:
            events: list[Event] = []
            for piece in offline_pieces(samples, sample_rate):
                events += await self.worker.accept(stream, piece)
            events += await self.worker.finish(stream)
        finally:
            self.uploads -= 1
            self._forget(stream)
        return [event for event in events if event.final]

    async def stop(self) -> None:
        await self.worker.close()


class LocalLane(Lane):
    """The model in the server process, on the worker's thread."""

    def __init__(self, settings: Settings, on_batch: Any) -> None:
        super().__init__(settings, step_sessions, on_batch)
        self.recognizer: Any = None

    async def load(self) -> None:
        self.recognizer, self.capabilities = await self.worker.run(
            _load, self.settings.model, self.settings.torch_threads, *self.settings.search
        )
        self.live = True

    def _new_stream(self, sample_rate: int, options: SessionOptions) -> Any:
        return self.recognizer.stream(sample_rate, options)


@dataclass(frozen=True)
class RemoteStream:
    """A session that lives in a model process: its id there, its sample rate and options
    (the process makes the stream on first use), and which of the lane's processes
    (``generation``) holds its state."""

    sid: int
    sample_rate: int
    options: SessionOptions
    generation: int


class ProcessLane(Lane):
    """The model in a child process; the worker's thread talks to it over a pipe.

    The process may be replaced (``load`` again after ``exited``): each one is a new
    generation, and a stream of an earlier generation is refused, never silently
    continued without its state in the new process.
    """

    def __init__(self, settings: Settings, on_batch: Any) -> None:
        super().__init__(settings, self._run_batch, on_batch)
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self.generation = 0
        self.live_since = 0.0  # monotonic time the current process finished loading
        self._ids = itertools.count()
        self._drops: deque[int] = deque()  # ended sessions, sent with the next batch
        self._at_exit: multiprocessing.util.Finalize | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def exitcode(self) -> int | None:
        return self._process.exitcode if self._process is not None else None

    async def load(self) -> None:
        """Start a model process and wait until it has loaded the model (raises if it cannot)."""
        await self.worker.run(self._start)
        self.died = asyncio.get_running_loop().create_future()
        self.live = True
        self.live_since = time.monotonic()

    async def exited(self) -> None:
        """Return as soon as the current process exits (killed, crashed, out of memory):
        its sentinel becomes readable then, so no polling is needed."""
        assert self._process is not None
        loop = asyncio.get_running_loop()
        gone: asyncio.Future[None] = loop.create_future()
        sentinel = self._process.sentinel
        loop.add_reader(sentinel, lambda: gone.done() or gone.set_result(None))
        try:
            await gone
        finally:
            loop.remove_reader(sentinel)

    def mark_dead(self) -> None:
        """Take the lane out of service and end the sessions of the dead process."""
        self.live = False
        self.generation += 1  # read by the worker's thread: an int swap is atomic
        self.died.set_result(None)

    def _start(self) -> None:
        """On the worker's thread, between batches: replace any previous process."""
        self._release()
        context = multiprocessing.get_context("spawn")  # no fork of a threaded parent
        conn, child = context.Pipe()
        process = context.Process(
            target=serve_sessions,
            args=(
                child,
                str(self.settings.model),
                self.settings.torch_threads,
                *self.settings.search,
            ),
            name="asr-model",
            daemon=True,
        )
        # blocked from the start (a child inherits the mask): a signal to the group while
        # the process boots waits, and is dropped once serve_sessions ignores it
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
        try:
            process.start()
        except BaseException:
            conn.close()
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            child.close()
        self._conn, self._process = conn, process
        # the process ignores SIGTERM, which is how multiprocessing ends it at exit before
        # waiting for it: a server that exits without stop() (a second Ctrl-C skips the app's
        # shutdown) closes the pipe first, or that wait would never end
        self._at_exit = multiprocessing.util.Finalize(self, self._release, exitpriority=0)
        self._drops.clear()  # they belonged to the previous process
        self.capabilities = self._receive()  # the load's outcome: what the model can do

    def _release(self) -> None:
        """Close the pipe and reap the process (killed if it does not stop within 5 s)."""
        if self._process is None:
            return
        assert self._conn is not None and self._at_exit is not None
        self._at_exit.cancel()
        self._conn.close()
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._process.close()  # its sentinel's descriptor too
        self._process = self._conn = None

    def _new_stream(self, sample_rate: int, options: SessionOptions) -> RemoteStream:
        rate = check_sample_rate(sample_rate)
        return RemoteStream(next(self._ids), rate, options, self.generation)

    def _forget(self, stream: RemoteStream) -> None:
        if stream.generation == self.generation:
            self._drops.append(stream.sid)

    async def stop(self) -> None:
        await super().stop()  # the worker's thread is done with the pipe
        if self._conn is not None:
            with contextlib.suppress(OSError):  # the process may be gone already
                self._conn.send(("stop", None))
        self._release()

    def _run_batch(self, steps: Sequence[Step], deliver: Callable[[Step, Outcome], None]) -> None:
        generation = self.generation
        current = [s for s in steps if s.stream.generation == generation]
        for step in steps:
            if step.stream.generation != generation:
                deliver(step, LaneDied("the model process serving this session has exited"))
        if not current:
            return
        drops = [self._drops.popleft() for _ in range(len(self._drops))]
        items = [(s.stream.sid, s.stream.sample_rate, s.stream.options, s.samples) for s in current]
        for step, outcome in zip(current, self._call(("steps", (drops, items)))):
            deliver(step, outcome)

    def _call(self, message: tuple[str, Any]) -> Any:
        assert self._conn is not None
        try:
            self._conn.send(message)
        except OSError:  # a broken pipe: the process is gone
            raise LaneDied("the model process has exited") from None
        return self._receive()

    def _receive(self) -> Any:
        assert self._conn is not None
        try:
            reply = self._conn.recv()
        except (EOFError, OSError):
            raise LaneDied("the model process has exited") from None
        if isinstance(reply, Exception):
            raise reply
        return reply


def make_lanes(settings: Settings, on_batch: Any) -> list[Lane]:
    if settings.workers == 0:
        return [LocalLane(settings, on_batch)]
    return [ProcessLane(settings, on_batch) for _ in range(settings.workers)]


# -- the model process -------------------------------------------------------------
GROUP_SIGNALS = {signal.SIGINT, signal.SIGTERM}  # a model process ignores them


def serve_sessions(
    conn: Connection,
    model: str,
    threads: int,
    beam: int | None,
    lm_weight: float | None,
    ctc_weight: float | None,
) -> None:
    """A model process's loop: load the model, say what it can do (which also says it is
    ready), then answer batches until told to stop or the server is gone."""
    for sig in GROUP_SIGNALS:  # the server stops this process itself, after its flush
        signal.signal(sig, signal.SIG_IGN)  # which also drops one that came while booting
    signal.pthread_sigmask(signal.SIG_UNBLOCK, GROUP_SIGNALS)
    try:
        recognizer, capabilities = _load(model, threads, beam, lm_weight, ctc_weight)
    except Exception as err:
        conn.send(RuntimeError(f"cannot load model {model}: {err}"))
        return
    conn.send(capabilities)
    from asr.final_pass import FinalsInBackground

    background = FinalsInBackground()  # two-pass finals, beside the streaming steps
    sessions: dict[int, Any] = {}
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):  # the server is gone
            return
        if kind == "stop":
            return
        try:
            reply: Any = _run_steps(recognizer, sessions, *payload, background=background)
        except Exception as err:  # the batch's steps fail, not the process and its sessions
            reply = [_portable(err)] * len(payload[1])
        try:
            conn.send(reply)
        except OSError:  # the server is gone
            return


def _run_steps(
    recognizer: Any,
    sessions: dict[int, Any],
    drops: list[int],
    items: list[tuple],
    background: Any = None,
) -> list[list[Event] | Exception]:
    """One batch: forget the ended sessions, make the new ones, step them all together
    (their two-pass finals written by ``background``, an asr.final_pass.FinalsInBackground,
    beside the steps)."""
    from asr.streaming import step_sessions as run_sessions

    for sid in drops:
        sessions.pop(sid, None)
    for sid, rate, options, _ in items:
        if sid not in sessions:  # the rate and options were checked on open
            sessions[sid] = recognizer.stream(rate, options)
    streams = [sessions[sid] for sid, _, _, _ in items]
    outcomes = run_sessions(streams, [samples for _, _, _, samples in items], background)
    for (sid, _, _, _), stream in zip(items, streams):
        if stream.finished:
            sessions.pop(sid, None)
    return [_portable(o) if isinstance(o, Exception) else o for o in outcomes]


def _portable(err: Exception) -> Exception:
    """The exception as the server can unpickle and map it: bad input stays a ValueError."""
    return ValueError(str(err)) if isinstance(err, ValueError) else RuntimeError(repr(err))


def _load(
    path: str | Path,
    threads: int,
    beam: int | None,
    lm_weight: float | None,
    ctc_weight: float | None = None,
) -> tuple[Any, Capabilities]:
    """The recognizer and what its sessions may ask of it (asking loads the teacher and
    Whisper's decoder here, off the event loop, rather than in the first session that wants
    them)."""
    import torch

    from asr import load_model

    torch.set_num_threads(threads)  # process-wide: the model thread is torch's only user here
    recognizer = load_model(path)
    recognizer.set_search(beam, lm_weight, None, ctc_weight)
    decode = recognizer.config.decode
    problems = recognizer.option_problems()
    if decode.two_pass and "two_pass" in problems:
        raise ValueError(f"the bundle asks for two-pass finals, but {problems['two_pass']}")
    if decode.streaming_decoder == "whisper" and "streaming_decoder" in problems:
        raise ValueError(
            f"the bundle asks for Whisper's streaming decoder, but {problems['streaming_decoder']}"
        )
    return recognizer, Capabilities(decode.two_pass, decode.streaming_decoder, problems)
