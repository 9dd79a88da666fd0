"""Process-wide server state: the model, the batching worker, limits and open sessions."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from server.lanes import Capabilities, Lane, ProcessLane, make_lanes
from server.metrics import Metrics
from server.protocol import ErrorCode, ProtocolError
from server.settings import Settings
from server.supervision import supervise

log = logging.getLogger("server")


@dataclass
class ServerState:
    """Shared by every request handler of one app."""

    settings: Settings
    metrics: Metrics = field(default_factory=Metrics)
    lanes: list[Lane] = field(default_factory=list)
    loaded: bool = False
    load_error: str | None = None
    sessions: set[Any] = field(default_factory=set)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    supervisors: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        self.lanes = make_lanes(self.settings, self.metrics.on_batch)
        self.metrics.live_processes.set_function(lambda: self.live_lanes)
        for lane in self.lanes:
            lane.worker.start()

    async def load(self) -> None:
        """Load the model in every lane; /healthz answers meanwhile, /readyz waits for this.

        A model that cannot load at all is an error to report, not to retry; once
        loaded, every model process is supervised (server/supervision.py).
        """
        try:
            await asyncio.gather(*(lane.load() for lane in self.lanes))
        except Exception as err:
            self.load_error = f"cannot load model {self.settings.model}: {err}"
            log.exception("model load failed")
        else:
            self.loaded = True
            log.info("model %s loaded in %d lane(s)", self.settings.model, len(self.lanes))
            self.supervisors = [
                asyncio.create_task(supervise(lane, self.settings, self.metrics.model_restarts))
                for lane in self.lanes
                if isinstance(lane, ProcessLane)
            ]

    async def stop(self) -> None:
        for task in self.supervisors:  # a process stopped on purpose is not replaced
            task.cancel()
        await asyncio.gather(*self.supervisors, return_exceptions=True)
        await asyncio.gather(*(lane.stop() for lane in self.lanes))

    @property
    def live_lanes(self) -> int:
        return sum(lane.live for lane in self.lanes)

    @property
    def ready(self) -> bool:
        return self.loaded and not self.closing.is_set() and self.live_lanes > 0

    @property
    def two_pass(self) -> dict[str, bool] | None:
        """What /readyz says of two-pass finals: whether a session may ask for them and what
        one that does not ask gets (None while no model process is live)."""
        can = self._capabilities()
        return None if can is None else {"available": can.two_pass, "default": can.two_pass_default}

    @property
    def streaming_decoder(self) -> dict[str, Any] | None:
        """What /readyz says of the streaming decoders: those a session may ask for and what
        one that does not ask gets (None while no model process is live)."""
        can = self._capabilities()
        if can is None:
            return None
        return {"available": can.streaming_decoders, "default": can.streaming_decoder_default}

    def _capabilities(self) -> Capabilities | None:
        """What the live lanes' model offers (they all serve one model), None if none is live."""
        live = [lane.capabilities for lane in self.lanes if lane.live]
        return live[0] if live else None

    def least_busy(self) -> Lane:
        """The lane for a new session or upload: the live one with the fewest open sessions
        and uploads (by sessions alone, every upload would go to the first lane)."""
        live = [lane for lane in self.lanes if lane.live]
        if not live:
            raise ProtocolError(ErrorCode.NOT_READY, self.why_not_ready)
        return min(live, key=lambda lane: lane.busy)

    @property
    def status(self) -> str:
        """What /readyz says: ready, loading, error, shutting down or restarting."""
        if self.ready:
            return "ready"
        if self.closing.is_set():
            return "shutting down"
        if self.load_error:
            return "error"
        return "restarting" if self.loaded else "loading"

    @property
    def why_not_ready(self) -> str:
        return {
            "shutting down": "the server is shutting down",
            "error": "the model could not be loaded",
            "restarting": "no model process is running; try again soon",
        }.get(self.status, "the model is not loaded yet")

    def authorized(self, headers: Any, query: Any) -> bool:
        """Bearer header or ``token`` query parameter, compared in constant time."""
        expected = self.settings.api_key
        if not expected:
            return True
        scheme, _, value = headers.get("authorization", "").partition(" ")
        given = value.strip() if scheme.lower() == "bearer" else query.get("token", "")
        return hmac.compare_digest(given.encode(), expected.encode())

    def admit(self, headers: Any, query: Any) -> None:
        """Decide whether a new stream may start; raises the reason it may not."""
        if not self.settings.origin_allowed(headers.get("origin")):
            raise ProtocolError(ErrorCode.ORIGIN_NOT_ALLOWED, "this origin is not allowed")
        if not self.authorized(headers, query):
            raise ProtocolError(ErrorCode.UNAUTHORIZED, "missing or wrong API key")
        if not self.ready:
            raise ProtocolError(ErrorCode.NOT_READY, self.why_not_ready)
        if len(self.sessions) >= self.settings.max_sessions:
            raise ProtocolError(
                ErrorCode.TOO_MANY_SESSIONS,
                f"the server is at its limit of {self.settings.max_sessions} sessions",
            )

    async def drain(self) -> None:
        """Ask every open session to flush and end, and wait for them (bounded)."""
        self.closing.set()
        deadline = time.monotonic() + self.settings.shutdown_timeout_s
        while self.sessions and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self.sessions:
            log.warning("%d session(s) still open after the shutdown timeout", len(self.sessions))
