"""The /v1/stream WebSocket session: moves frames in and events out, nothing more.

Two coroutines per session. The reader takes frames off the socket, checks
them and queues decoded audio. The pump takes *all* audio queued so far,
hands it to the batching worker in one step and sends whatever events the
decoder produced, so results leave as soon as tokens exist and a slow round
trip never limits throughput (no reply per frame).

Memory per session is bounded both ways. Audio waiting for the model is capped
at ``max_backlog_s``: past it the reader takes no frame until the pump has
caught up, so a client sending faster than real time is slowed by TCP instead
of buffered. A result the client does not take within ``send_timeout_s`` (it
stopped reading; its socket buffers are full) ends the session with
``client_too_slow``, so nothing piles up behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable
from typing import Any, Literal, TypeVar

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect

from asr.audio import decode_pcm
from asr.events import Event
from server.lanes import Lane, LaneDied
from server.protocol import (
    CloseCode,
    End,
    Error,
    ErrorCode,
    ProtocolError,
    Ready,
    Result,
    Start,
    Stop,
    parse_client_message,
)
from server.state import ServerState

log = logging.getLogger("server.stream")

T = TypeVar("T")
EndReason = Literal["stop", "shutdown"]
_LIMITS = (ErrorCode.IDLE_TIMEOUT, ErrorCode.SESSION_TOO_LONG)


class ClientGone(Exception):
    """The peer closed or dropped the connection."""


class ShuttingDown(Exception):
    """The server is draining: the session flushes and ends."""


async def serve_stream(ws: WebSocket, state: ServerState) -> None:
    """Accept, admit and run one session; every failure ends in a typed error and close code."""
    await ws.accept()
    try:
        state.admit(ws.headers, ws.query_params)
    except ProtocolError as err:
        state.metrics.errors.labels(err.code.value).inc()
        await _send_error(ws, err, state.settings.send_timeout_s)
        return
    session = StreamSession(ws, state)
    state.sessions.add(session)
    state.metrics.sessions.inc()
    state.metrics.active_sessions.inc()
    try:
        await session.run()
    finally:
        state.sessions.discard(session)
        state.metrics.active_sessions.dec()


async def _send_error(ws: WebSocket, err: ProtocolError, timeout: float) -> None:
    """The typed error, then its close code; a peer that reads nothing is given up on
    after ``timeout`` (the server then drops the connection)."""

    async def send() -> None:
        await ws.send_text(Error(code=err.code, message=err.message).model_dump_json())
        await ws.close(err.close_code, err.code.value)

    with contextlib.suppress(Exception):  # the peer may already be gone
        await asyncio.wait_for(send(), timeout)


class StreamSession:
    """One client stream from ``start`` to ``end``."""

    def __init__(self, ws: WebSocket, state: ServerState) -> None:
        self.ws = ws
        self.state = state
        self.id = uuid.uuid4().hex
        self.deadline = time.monotonic() + state.settings.max_session_s
        self.start: Start | None = None
        self.lane: Lane | None = None
        self.stream: Any = None  # the lane's handle of this session's recognizer stream
        self.lane_died: asyncio.Future[None] | None = None  # the lane's model went away
        self.audio: asyncio.Queue[np.ndarray | None] = asyncio.Queue()
        self.backlog = 0  # samples queued for the model
        self.backlog_limit = 0  # set from the sample rate on start
        self.room = asyncio.Event()  # set while the backlog is below its limit
        self.room.set()
        self.ready_at = 0.0
        self.results_sent = 0
        self._closing = asyncio.ensure_future(state.closing.wait())

    async def run(self) -> None:
        metrics = self.state.metrics
        timeout = self.state.settings.send_timeout_s
        try:
            await self._open()
            reason = await self._stream()
            await self._send(End(reason=reason).model_dump_json())
            code = CloseCode.NORMAL if reason == "stop" else CloseCode.GOING_AWAY
            with contextlib.suppress(Exception):  # a client that stops reading now is let go
                await asyncio.wait_for(self.ws.close(code), timeout)
        except ProtocolError as err:
            metrics.errors.labels(err.code.value).inc()
            log.info("session %s: %s: %s", self.id, err.code.value, err.message)
            await _send_error(self.ws, err, timeout)
        except ClientGone:
            metrics.errors.labels("client_gone").inc()
            log.info("session %s: client went away", self.id)
        except Exception:
            metrics.errors.labels(ErrorCode.INTERNAL.value).inc()
            log.exception("session %s failed", self.id)
            internal = ProtocolError(ErrorCode.INTERNAL, "internal server error")
            await _send_error(self.ws, internal, timeout)
        finally:
            self._closing.cancel()
            if self.lane is not None:
                self.lane.close(self.stream)

    async def _open(self) -> None:
        """Wait for ``start``, create the recognizer stream and answer ``ready``."""
        kind, payload = await self._receive()
        if kind == "shutdown":
            raise ProtocolError(ErrorCode.NOT_READY, "the server is shutting down")
        if kind == "bytes":
            raise ProtocolError(ErrorCode.AUDIO_BEFORE_START, "send a start message before audio")
        message = self._parse(payload)
        if not isinstance(message, Start):
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, "the first message must be start")
        lane = self.state.least_busy()
        refusal = lane.capabilities.refusal(message.options)
        if refusal is not None:
            raise ProtocolError(ErrorCode.UNSUPPORTED_OPTION, refusal)
        try:
            self.stream = lane.open(message.sample_rate, message.options)
        except ValueError as err:
            raise ProtocolError(ErrorCode.UNSUPPORTED_SAMPLE_RATE, str(err)) from None
        self.lane, self.lane_died = lane, lane.died
        self.start = message
        self.backlog_limit = int(self.state.settings.max_backlog_s * message.sample_rate)
        await self._send(Ready(session_id=self.id).model_dump_json())
        self.ready_at = time.monotonic()

    async def _stream(self) -> EndReason:
        """Run reader and pump until stop (or shutdown, or a limit), then flush."""
        pump = asyncio.create_task(self._pump())
        try:
            try:
                reason: EndReason | None = await self._read(pump)
                limit = None
            except ProtocolError as err:
                if err.code not in _LIMITS:
                    raise
                reason, limit = None, err
            stopped = time.monotonic()
            self.audio.put_nowait(None)
            await pump
            if limit is not None:  # finals were flushed; now say why the session ends
                raise limit
            self.state.metrics.final_latency.observe(time.monotonic() - stopped)
            return reason
        finally:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)

    async def _read(self, pump: asyncio.Task[None]) -> EndReason:
        """Queue audio frames until the client stops; raises on any fault."""
        assert self.start is not None
        encoding, rate = self.start.encoding, self.start.sample_rate
        while True:
            kind, payload = await self._receive(pump)
            if kind == "shutdown":
                return "shutdown"
            if kind == "text":
                message = self._parse(payload)
                if isinstance(message, Stop):
                    return "stop"
                raise ProtocolError(ErrorCode.ALREADY_STARTED, "this session has already started")
            if not payload:
                continue
            try:  # odd byte counts and non-finite floats are refused here
                samples = decode_pcm(payload, encoding)
            except ValueError as err:
                raise ProtocolError(ErrorCode.INVALID_AUDIO, str(err)) from None
            self.state.metrics.add_audio(len(samples) / rate)
            self.audio.put_nowait(samples)
            self.backlog += len(samples)
            if self.backlog >= self.backlog_limit:
                self.room.clear()

    def _parse(self, text: str) -> Start | Stop:
        return parse_client_message(text, self.state.settings.max_control_bytes)

    async def _receive(
        self, pump: asyncio.Task[None] | None = None
    ) -> tuple[Literal["text", "bytes", "shutdown"], str | bytes]:
        """Next frame, or ``shutdown``; enforces the backlog, idle timeout, session length
        and audio frame size (control frames are checked by ``parse_client_message``).

        While the backlog is full no frame is taken: the client waits for the model.
        """
        try:
            await self._unless_interrupted(self.room.wait(), pump, None)
            idle = self.state.settings.idle_timeout_s
            session_left = self.deadline - time.monotonic()
            message = await self._unless_interrupted(
                self.ws.receive(), pump, max(min(idle, session_left), 0.0)
            )
        except ShuttingDown:
            return "shutdown", b""
        except TimeoutError:
            if session_left <= idle:  # timers may fire a hair early: no clock comparison here
                raise ProtocolError(
                    ErrorCode.SESSION_TOO_LONG,
                    f"sessions are limited to {self.state.settings.max_session_s:g} s",
                ) from None
            raise ProtocolError(ErrorCode.IDLE_TIMEOUT, f"no frame for {idle:g} s") from None
        if message["type"] == "websocket.disconnect":
            raise ClientGone
        data = message.get("bytes")
        if data is None:
            return "text", message.get("text") or ""
        if len(data) > self.state.settings.max_frame_bytes:
            raise ProtocolError(
                ErrorCode.FRAME_TOO_LARGE,
                f"frame of {len(data)} bytes exceeds the limit of "
                f"{self.state.settings.max_frame_bytes}",
            )
        return "bytes", data

    async def _unless_interrupted(
        self, awaitable: Awaitable[T], pump: asyncio.Task[None] | None, timeout: float | None
    ) -> T:
        """``awaitable``'s result, unless first: a pump failure (bad audio found by the
        recognizer; re-raised here so the reader stops at once), the death of the model
        process holding this session, shutdown (``ShuttingDown``) or ``timeout``."""
        task = asyncio.ensure_future(awaitable)
        interrupts = [f for f in (pump, self.lane_died, self._closing) if f is not None]
        done, _ = await asyncio.wait(
            {task, *interrupts}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if task in done:
            return task.result()
        task.cancel()
        if pump is not None and pump in done:
            pump.result()  # re-raises the pump's error
        if self.lane_died is not None and self.lane_died in done:
            raise _lane_died()
        if self._closing in done:
            raise ShuttingDown
        raise TimeoutError

    async def _pump(self) -> None:
        """Feed everything queued so far as one step; finish on the end marker."""
        assert self.lane is not None
        worker = self.lane.worker
        metrics = self.state.metrics
        while True:
            chunks = [await self.audio.get()]
            while chunks[-1] is not None and not self.audio.empty():
                chunks.append(self.audio.get_nowait())
            audio = [c for c in chunks if c is not None]
            self.backlog -= sum(len(c) for c in audio)
            if self.backlog < self.backlog_limit:
                self.room.set()
            samples = np.concatenate(audio) if audio else None
            try:
                if chunks[-1] is None:  # the last audio goes with the finish, ahead of others'
                    await self._send_events(await worker.finish(self.stream, samples))
                    return
                if samples is not None:
                    queued = time.monotonic()
                    events = await worker.accept(self.stream, samples)
                    metrics.step_latency.observe(time.monotonic() - queued)
                    await self._send_events(events)
            except LaneDied:
                raise _lane_died() from None
            except ValueError as err:
                raise ProtocolError(ErrorCode.INVALID_AUDIO, str(err)) from None

    async def _send_events(self, events: list[Event]) -> None:
        for event in events:
            if self.results_sent == 0:
                self.state.metrics.first_result_latency.observe(time.monotonic() - self.ready_at)
            self.results_sent += 1
            await self._send(Result.from_event(event).model_dump_json())

    async def _send(self, text: str) -> None:
        timeout = self.state.settings.send_timeout_s
        try:
            await asyncio.wait_for(self.ws.send_text(text), timeout)
        except asyncio.TimeoutError:  # not yet the builtin TimeoutError on Python 3.10
            raise ProtocolError(
                ErrorCode.CLIENT_TOO_SLOW,
                f"results were left unread for {timeout:g} s; read them as they come",
            ) from None
        except (WebSocketDisconnect, OSError, RuntimeError) as err:
            raise ClientGone from err


def _lane_died() -> ProtocolError:
    return ProtocolError(
        ErrorCode.INTERNAL,
        "the model process serving this session has exited; start a new session",
    )
