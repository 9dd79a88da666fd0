"""Server settings: one dataclass shared by the app factory, the CLI and the tests."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from asr.bundle import default_model
from asr.recognizer import check_beam, check_lm_weight
from server.protocol import MAX_CONTROL_DEPTH


@dataclass
class Settings:
    """Everything the server needs besides the model itself.

    Limits exist so that one misbehaving client can never starve the others:
    every session costs model state and a slot in the batching queue.
    """

    model: Path = field(default_factory=default_model)
    host: str = "127.0.0.1"
    port: int = 8000
    max_sessions: int = 64
    max_frame_bytes: int = 256 * 1024  # one binary (audio) WebSocket message
    max_control_bytes: int = 4096  # one text (JSON control) WebSocket message
    max_upload_bytes: int = 64 * 1024 * 1024  # POST /v1/transcribe body
    idle_timeout_s: float = 30.0  # no frame for this long ends the session
    max_session_s: float = 3600.0  # wall-clock cap on one session
    # audio received but not yet recognised, per session: past this the server reads the
    # client's next frame only once the model has caught up (TCP then slows the sender)
    max_backlog_s: float = 5.0
    # a client that leaves its results unread this long (its socket buffers full) is ended
    send_timeout_s: float = 15.0
    api_key: str | None = None  # None: no authentication
    allowed_origins: list[str] = field(default_factory=list)  # empty: any origin; "*" too
    batch_max_size: int = 32  # streaming steps run in one executor hop
    batch_max_wait_ms: float = 5.0  # how long a non-full batch waits for company
    # model processes, each serving its share of the sessions on one core (see server/lanes.py);
    # None: one per CPU core; 0: the model runs in the server process, on one thread
    workers: int | None = None
    # intra-op threads per model thread: small per-session steps run 3-5x
    # faster on one thread than split over several (sync overhead dominates)
    torch_threads: int = 1
    # a dead model process is replaced at once; one that fails to load, or dies within
    # restart_backoff_max_s of starting, waits restart_backoff_s, doubling up to the max
    restart_backoff_s: float = 1.0
    restart_backoff_max_s: float = 60.0
    shutdown_timeout_s: float = 10.0  # graceful flush of open sessions on shutdown
    beam: int | None = None  # None: the bundle's decode.beam_size
    lm_weight: float | None = None  # None: the bundle's decode.lm_weight
    ctc_weight: float | None = None  # None: the bundle's decode.ctc_weight

    @property
    def search(self) -> tuple[int | None, float | None, float | None]:
        """The bundle's search settings to override (beam, LM weight, joint CTC weight), as
        workers take them."""
        return self.beam, self.lm_weight, self.ctc_weight

    def __post_init__(self) -> None:
        self.model = Path(self.model)
        if self.workers is None:
            self.workers = len(os.sched_getaffinity(0))
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0, got {self.workers}")
        positive = {
            "max_sessions": self.max_sessions,
            "max_frame_bytes": self.max_frame_bytes,
            "max_control_bytes": self.max_control_bytes,
            "max_upload_bytes": self.max_upload_bytes,
            "idle_timeout_s": self.idle_timeout_s,
            "max_session_s": self.max_session_s,
            "max_backlog_s": self.max_backlog_s,
            "send_timeout_s": self.send_timeout_s,
            "restart_backoff_s": self.restart_backoff_s,
            "restart_backoff_max_s": self.restart_backoff_max_s,
            "batch_max_size": self.batch_max_size,
            "torch_threads": self.torch_threads,
        }
        # NaN compares false with everything, so each test is written to fail on it; inf is
        # refused too (an endless batch wait hangs sessions, an endless backlog overflows)
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive finite number, got {value}")
        if not (math.isfinite(self.batch_max_wait_ms) and self.batch_max_wait_ms >= 0):
            raise ValueError(
                f"batch_max_wait_ms must be a finite number >= 0, got {self.batch_max_wait_ms}"
            )
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535 (0: any free port), got {self.port}")
        if self.beam is not None:
            check_beam(self.beam)
        if self.lm_weight is not None:
            check_lm_weight(self.lm_weight)

    @property
    def stream_limits(self) -> dict[str, float]:
        """The limits a /v1/stream client must keep to (served with the schemas)."""
        return {
            "max_frame_bytes": self.max_frame_bytes,
            "max_control_bytes": self.max_control_bytes,
            "max_control_depth": MAX_CONTROL_DEPTH,
            "max_backlog_s": self.max_backlog_s,
            "send_timeout_s": self.send_timeout_s,
            "idle_timeout_s": self.idle_timeout_s,
            "max_session_s": self.max_session_s,
        }

    def origin_allowed(self, origin: str | None) -> bool:
        """Non-browser clients send no Origin header; browsers must be on the allow-list."""
        if origin is None or not self.allowed_origins or "*" in self.allowed_origins:
            return True
        return origin.rstrip("/") in {o.rstrip("/") for o in self.allowed_origins}
