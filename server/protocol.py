"""The /v1/stream wire protocol: typed JSON control frames, binary audio frames.

Client -> server: ``start`` (sample rate, encoding, two-pass finals or not), binary audio,
``stop``.
Server -> client: ``ready``, ``partial``/``final`` results, ``end``, ``error``.
A message is dispatched on its ``type`` field and validated against its model;
nothing is ever recognised by looking for substrings.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from asr.config import SessionOptions, StreamingDecoder
from asr.events import Event

MIN_SAMPLE_RATE = 8000
MAX_SAMPLE_RATE = 48000
# control frames are flat objects; deeper nesting is refused before parsing, since a
# recursive parser given 100,000 levels fails with RecursionError instead of an answer
MAX_CONTROL_DEPTH = 16
Encoding = Literal["pcm_s16le", "f32le"]
# a time in seconds from the stream's start: finite, not negative, and small enough (31
# years) that a subtitle can print it in milliseconds (1e308 s overflows there)
MAX_SECONDS = 1e9
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]


class ErrorCode(str, Enum):
    """Machine-readable error kinds; each maps to one WebSocket close code."""

    BAD_JSON = "bad_json"
    INVALID_MESSAGE = "invalid_message"
    UNKNOWN_TYPE = "unknown_type"
    AUDIO_BEFORE_START = "audio_before_start"
    ALREADY_STARTED = "already_started"
    UNSUPPORTED_SAMPLE_RATE = "unsupported_sample_rate"
    UNSUPPORTED_ENCODING = "unsupported_encoding"
    UNSUPPORTED_OPTION = "unsupported_option"
    INVALID_AUDIO = "invalid_audio"
    FRAME_TOO_LARGE = "frame_too_large"
    CONTROL_TOO_LARGE = "control_too_large"
    UNAUTHORIZED = "unauthorized"
    ORIGIN_NOT_ALLOWED = "origin_not_allowed"
    TOO_MANY_SESSIONS = "too_many_sessions"
    NOT_READY = "not_ready"
    IDLE_TIMEOUT = "idle_timeout"
    SESSION_TOO_LONG = "session_too_long"
    CLIENT_TOO_SLOW = "client_too_slow"
    INTERNAL = "internal_error"


class CloseCode:
    """RFC 6455 close codes used by the server."""

    NORMAL = 1000
    GOING_AWAY = 1001  # server shutdown, after flushing
    UNSUPPORTED_DATA = 1003
    INVALID_PAYLOAD = 1007
    POLICY = 1008
    TOO_BIG = 1009
    INTERNAL = 1011
    TRY_AGAIN_LATER = 1013


CLOSE_CODES: dict[ErrorCode, int] = {
    ErrorCode.BAD_JSON: CloseCode.INVALID_PAYLOAD,
    ErrorCode.INVALID_MESSAGE: CloseCode.INVALID_PAYLOAD,
    ErrorCode.UNKNOWN_TYPE: CloseCode.UNSUPPORTED_DATA,
    ErrorCode.AUDIO_BEFORE_START: CloseCode.UNSUPPORTED_DATA,
    ErrorCode.ALREADY_STARTED: CloseCode.UNSUPPORTED_DATA,
    ErrorCode.UNSUPPORTED_SAMPLE_RATE: CloseCode.UNSUPPORTED_DATA,
    ErrorCode.UNSUPPORTED_ENCODING: CloseCode.UNSUPPORTED_DATA,
    ErrorCode.UNSUPPORTED_OPTION: CloseCode.UNSUPPORTED_DATA,
    ErrorCode.INVALID_AUDIO: CloseCode.INVALID_PAYLOAD,
    ErrorCode.FRAME_TOO_LARGE: CloseCode.TOO_BIG,
    ErrorCode.CONTROL_TOO_LARGE: CloseCode.TOO_BIG,
    ErrorCode.UNAUTHORIZED: CloseCode.POLICY,
    ErrorCode.ORIGIN_NOT_ALLOWED: CloseCode.POLICY,
    ErrorCode.TOO_MANY_SESSIONS: CloseCode.TRY_AGAIN_LATER,
    ErrorCode.NOT_READY: CloseCode.TRY_AGAIN_LATER,
    ErrorCode.IDLE_TIMEOUT: CloseCode.POLICY,
    ErrorCode.SESSION_TOO_LONG: CloseCode.POLICY,
    ErrorCode.CLIENT_TOO_SLOW: CloseCode.POLICY,
    ErrorCode.INTERNAL: CloseCode.INTERNAL,
}


class ProtocolError(Exception):
    """A fault that ends one session with a typed error message and a close code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def close_code(self) -> int:
        return CLOSE_CODES[self.code]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


M = TypeVar("M", bound=_Message)


# --- client -> server --------------------------------------------------------


class Start(_Message):
    """First frame of a session: how the binary frames that follow are encoded."""

    type: Literal["start"] = "start"
    sample_rate: int = Field(ge=MIN_SAMPLE_RATE, le=MAX_SAMPLE_RATE)
    encoding: Encoding = "pcm_s16le"
    # What this session chooses over the model's defaults (None: the model's), each refused
    # with unsupported_option by a model that cannot serve it. two_pass: finals recomputed by
    # the full-attention encoder and Whisper's decoder over each segment. streaming_decoder:
    # what writes partials and one-pass finals, "lstm" (the model's own decoder, fastest) or
    # "whisper" (Whisper's decoder under the learnt monotonic policy: cased, punctuated and
    # better read, its tokens later)
    two_pass: bool | None = None
    streaming_decoder: StreamingDecoder | None = None

    @property
    def options(self) -> SessionOptions:
        return SessionOptions(self.two_pass, self.streaming_decoder)


class Stop(_Message):
    """No more audio: flush, send the last finals and ``end``, then close."""

    type: Literal["stop"] = "stop"


ClientMessage = Annotated[Union[Start, Stop], Field(discriminator="type")]  # noqa: UP007
_CLIENT_TYPES: dict[str, type[_Message]] = {"start": Start, "stop": Stop}
# a value of the right JSON type that is not supported has its field's own error code;
# a value of the wrong type (a string or float sample rate, a bool), or a field the message
# does not have (a sample rate on stop), is an invalid message
_FIELD_CODES: dict[str, tuple[ErrorCode, type]] = {
    "sample_rate": (ErrorCode.UNSUPPORTED_SAMPLE_RATE, int),
    "encoding": (ErrorCode.UNSUPPORTED_ENCODING, str),
}
# the pydantic error kinds of a value outside a declared field's range or choices
_UNSUPPORTED_VALUE = {"greater_than_equal", "less_than_equal", "literal_error"}


def parse_client_message(text: str, max_bytes: int) -> Start | Stop:
    """Decode one text frame, dispatching on its ``type`` field.

    Size and nesting are checked before the JSON parser runs: both are read from
    at most ``max_bytes`` + 1 characters, so a huge or deeply nested frame costs
    no more than a small one.
    """
    depth = json_depth(text[: max_bytes + 1])
    if depth > MAX_CONTROL_DEPTH:
        raise ProtocolError(
            ErrorCode.BAD_JSON,
            f"control frame nests deeper than {MAX_CONTROL_DEPTH} levels",
        )
    size = len(text.encode())
    if size > max_bytes:
        raise ProtocolError(
            ErrorCode.CONTROL_TOO_LARGE,
            f"control frame of {size} bytes exceeds the limit of {max_bytes}",
        )
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as err:  # JSONDecodeError, and NaN/Infinity, which JSON does not have
        raise ProtocolError(ErrorCode.BAD_JSON, f"control frame is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "a control frame must be a JSON object")
    kind = data.get("type")
    model = _CLIENT_TYPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_TYPE,
            f"unknown message type {kind!r}; expected one of {sorted(_CLIENT_TYPES)}",
        )
    return validate(model, data)


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in ``text`` (brackets inside strings do not count).

    Scans without parsing, so it needs no recursion and works on any prefix.
    """
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def validate(model: type[M], data: dict[str, Any]) -> M:
    """Validate a client message strictly (no coercion of strings, floats or bools to
    integers), mapping field problems to their typed error codes."""
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as err:
        problems = err.errors(include_url=False)
        code = next(
            (
                _FIELD_CODES[p["loc"][0]][0]
                for p in problems
                if p["type"] in _UNSUPPORTED_VALUE
                and p["loc"]
                and p["loc"][0] in _FIELD_CODES
                and type(p["input"]) is _FIELD_CODES[p["loc"][0]][1]
            ),
            ErrorCode.INVALID_MESSAGE,
        )
        detail = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in problems)
        raise ProtocolError(code, f"invalid {data.get('type')} message: {detail}") from None


# --- server -> client --------------------------------------------------------


class Ready(_Message):
    """The session exists; audio frames may follow."""

    type: Literal["ready"] = "ready"
    session_id: str


class Result(_Message):
    """A hypothesis for one segment; a ``final`` never changes, partials may."""

    type: Literal["partial", "final"]
    segment: int
    text: str
    tokens: list[str]
    token_times: list[Seconds]  # when each token was emitted, seconds from the stream's start
    start: Seconds
    end: Seconds
    final: bool

    @model_validator(mode="after")
    def _times_agree(self) -> Result:
        """A segment ends no earlier than it starts; every token has its emission time, and
        none comes after the end (a final ends at its last token, a partial at the audio
        heard). Checked here, a /v1/format body cannot make a subtitle run backwards."""
        if self.start > self.end:
            raise ValueError(f"start {self.start} is after end {self.end}")
        if len(self.token_times) != len(self.tokens):
            raise ValueError(
                f"{len(self.tokens)} tokens but {len(self.token_times)} token_times: one per token"
            )
        if any(t > self.end for t in self.token_times):
            raise ValueError(f"a token time is after the segment's end {self.end}")
        return self

    @classmethod
    def from_event(cls, event: Event) -> Result:
        return cls(type=event.kind, **{k: v for k, v in event.to_dict().items() if k != "kind"})


class End(_Message):
    """Last message of a completed session; the server closes right after it."""

    type: Literal["end"] = "end"
    reason: Literal["stop", "shutdown"] = "stop"


class Error(_Message):
    """A fault; the server closes with the matching close code right after it."""

    type: Literal["error"] = "error"
    code: ErrorCode
    message: str


ServerMessage = Annotated[Union[Ready, Result, End, Error], Field(discriminator="type")]  # noqa: UP007


class Transcription(_Message):
    """Response of POST /v1/transcribe."""

    text: str
    duration: Seconds
    segments: list[Result]


def schemas() -> dict[str, Any]:
    """JSON schemas of both directions plus the error -> close code table."""
    return {
        "client": TypeAdapter(ClientMessage).json_schema(),
        "server": TypeAdapter(ServerMessage).json_schema(),
        "transcription": Transcription.model_json_schema(),
        "close_codes": {code.value: close for code, close in CLOSE_CODES.items()},
    }
