"""Recognition events shared by the streaming session, the server and the clients."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal


@dataclass
class Event:
    """A partial or final hypothesis for one segment of a stream.

    A segment is a stretch of audio between two endpoints. Partials for a
    segment may change; the final for a segment never does, and after it the
    segment number increases.
    """

    kind: Literal["partial", "final"]
    segment: int
    text: str
    tokens: list[str] = field(default_factory=list)
    start: float = 0.0  # seconds from the start of the stream
    end: float = 0.0
    # per token, when it was emitted: the end of the encoder state that selected it
    # (hard monotonic attention fires a token there), in seconds from the start of the stream
    token_times: list[float] = field(default_factory=list)

    @property
    def final(self) -> bool:
        return self.kind == "final"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["final"] = self.final
        return data
