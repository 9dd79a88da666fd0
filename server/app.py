"""FastAPI app factory: WebSocket streaming, HTTP transcription, health, metrics, browser page."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Query, Request, WebSocket
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from asr.audio import check_sample_rate, decode_pcm, read_audio
from asr.formats import (
    FORMATS,
    MEDIA_TYPES,
    FinalSegment,
    check_format,
    render,
    transcript_record,
)
from server import protocol
from server.lanes import LaneDied
from server.protocol import ProtocolError, Start, Transcription, validate
from server.settings import Settings
from server.state import ServerState
from server.stream import serve_stream

log = logging.getLogger("server")
STATIC = Path(__file__).parent / "static"
# the transcript endpoints also answer in these media types (?format=)
_TEXT_RESPONSES: dict[int | str, dict] = {
    200: {"content": {MEDIA_TYPES[f]: {} for f in FORMATS if f != "json"}}
}


class HTTPFault(Exception):
    """An HTTP request refused with a status and a typed error body."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def create_app(settings: Settings) -> FastAPI:
    """Build the app; the model loads in the background once the app starts."""
    state = ServerState(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.start()
        loading = asyncio.create_task(state.load())
        try:
            yield
        finally:
            await state.drain()  # no-op when the server already drained before closing sockets
            loading.cancel()
            await asyncio.gather(loading, return_exceptions=True)
            await state.stop()

    app = FastAPI(title="monotonic-asr", version="1", lifespan=lifespan)
    app.state.asr = state
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(HTTPFault)
    async def _fault(request: Request, err: HTTPFault) -> JSONResponse:
        state.metrics.errors.labels(err.code).inc()
        body = {"type": "error", "code": err.code, "message": err.message}
        return JSONResponse(body, status_code=err.status)

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """200 while at least one model process takes sessions; the body says how many do."""
        body = {
            "status": state.status,
            "model": str(settings.model),
            "processes": len(state.lanes),
            "live_processes": state.live_lanes,
            "two_pass": state.two_pass,
            "streaming_decoder": state.streaming_decoder,
            "error": state.load_error,
        }
        return JSONResponse(body, status_code=200 if state.ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/schemas")
    async def schemas() -> dict:
        return protocol.schemas() | {"limits": settings.stream_limits}

    @app.websocket("/v1/stream")
    async def stream(ws: WebSocket) -> None:
        await serve_stream(ws, state)

    def check_request(request: Request, output: str) -> None:
        """The API key, then the output format (before any body is read)."""
        if not state.authorized(request.headers, request.query_params):
            raise HTTPFault(401, "unauthorized", "missing or wrong API key")
        try:
            check_format(output)
        except ValueError as err:
            raise HTTPFault(400, "unsupported_format", str(err)) from None

    @app.post("/v1/transcribe", response_model=Transcription, responses=_TEXT_RESPONSES)
    async def transcribe(
        request: Request,
        # a string, parsed by _decode_raw as strictly as a start frame's integer: FastAPI's
        # own int would take "16000.0" and answer "abc" with an untyped 422
        sample_rate: str | None = Query(None, description="raw PCM only: Hz, an integer"),
        encoding: str = "pcm_s16le",
        output: str = Query("json", alias="format"),
    ) -> Transcription | Response:
        """Multipart ``file`` (WAV/FLAC/...), or a raw PCM body with ?sample_rate=&encoding=;
        the transcript as JSON, or ?format=txt|srt|vtt."""
        check_request(request, output)
        if not state.ready:
            raise HTTPFault(503, "not_ready", state.why_not_ready)
        started = time.perf_counter()
        body = await _read_body(request, settings.max_upload_bytes)
        if _media_type(request) == "multipart/form-data":
            samples, rate = await _read_upload(request, body)
        else:
            samples, rate = _decode_raw(body, sample_rate, encoding)
        duration = len(samples) / rate
        state.metrics.add_audio(duration)
        try:  # its compute is counted with the lane's batches, which run its pieces
            events = await state.least_busy().transcribe(samples, rate)
        except ProtocolError as err:  # no live model process
            raise HTTPFault(503, err.code.value, err.message) from None
        except LaneDied as err:
            raise HTTPFault(500, "internal_error", str(err)) from None
        except ValueError as err:  # audio the model cannot take
            raise HTTPFault(400, "invalid_audio", str(err)) from None
        except RuntimeError:  # a typed answer all the same, as a stream's internal_error
            log.exception("transcription failed")
            raise HTTPFault(500, "internal_error", "internal server error") from None
        state.metrics.http_latency.observe(time.perf_counter() - started)
        return _formatted(output, events, duration)

    @app.post("/v1/format", response_model=Transcription, responses=_TEXT_RESPONSES)
    async def reformat(
        request: Request, output: str = Query("json", alias="format")
    ) -> Transcription | Response:
        """A JSON transcript (as /v1/transcribe returns it, or the finals of a stream) in
        ?format=txt|json|srt|vtt: the browser page's downloads, made by the one formatter."""
        check_request(request, output)
        body = await _read_body(request, settings.max_upload_bytes)
        try:
            transcript = Transcription.model_validate_json(body)
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            where = ".".join(map(str, first["loc"])) or "body"
            raise HTTPFault(
                400, "invalid_message", f"not a JSON transcript: {where}: {first['msg']}"
            ) from None
        return _formatted(output, transcript.segments, transcript.duration)

    return app


def _formatted(
    output: str, segments: Sequence[FinalSegment], duration: float
) -> Transcription | Response:
    """The transcript in ``output``; JSON is validated against the schema /v1/schemas publishes."""
    if output == "json":
        return Transcription.model_validate(transcript_record(segments, duration))
    return Response(render(output, segments, duration), media_type=MEDIA_TYPES[output])


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it exceeds ``limit``."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise HTTPFault(413, "too_large", f"request body exceeds {limit} bytes")
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPFault(413, "too_large", f"request body exceeds {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


def _media_type(request: Request) -> str:
    """The body's media type without parameters; media types are case-insensitive."""
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


async def _read_upload(request: Request, body: bytes) -> tuple[np.ndarray, int]:
    """Decode the multipart ``file`` field with ``asr.audio.read_audio`` (format from content);
    its rate must be one a stream may declare."""

    async def replay() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(request.scope, replay).form()
    except HTTPException as err:  # Starlette's answer to a malformed body: an untyped detail
        raise HTTPFault(400, "invalid_message", f"malformed multipart body: {err.detail}") from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise HTTPFault(400, "invalid_message", "multipart body needs a 'file' field")
    data = await upload.read()
    name = upload.filename or "the upload"
    try:
        samples, rate = await asyncio.to_thread(_read_audio_bytes, data, name)
    except ValueError as err:
        raise HTTPFault(400, "invalid_audio", f"cannot decode the uploaded file: {err}") from None
    try:
        return samples, check_sample_rate(rate)
    except ValueError as err:
        raise HTTPFault(400, "unsupported_sample_rate", f"{name}: {err}") from None


def _read_audio_bytes(data: bytes, name: str) -> tuple[np.ndarray, int]:
    """Decode through a temporary file; errors name the upload, never the server's path."""
    with tempfile.NamedTemporaryFile(suffix=Path(name).suffix) as tmp:
        tmp.write(data)
        tmp.flush()
        try:
            return read_audio(tmp.name)
        except ValueError as err:
            raise ValueError(str(err).replace(tmp.name, name)) from None


def _decode_raw(body: bytes, sample_rate: str | None, encoding: str) -> tuple[np.ndarray, int]:
    """Raw PCM needs its rate and encoding declared, with the same rules as a stream's start
    (the rate written as an integer: not ``16000.0``)."""
    if sample_rate is None:
        raise HTTPFault(400, "invalid_message", "raw PCM needs ?sample_rate= (and &encoding=)")
    if not re.fullmatch(r"[0-9]{1,18}", sample_rate):
        raise HTTPFault(
            400, "invalid_message", f"sample_rate must be an integer, got {sample_rate!r}"
        )
    try:
        start = validate(
            Start, {"type": "start", "sample_rate": int(sample_rate), "encoding": encoding}
        )
    except ProtocolError as err:
        raise HTTPFault(400, err.code.value, err.message) from None
    try:
        return decode_pcm(body, start.encoding), start.sample_rate
    except ValueError as err:
        raise HTTPFault(400, "invalid_audio", str(err)) from None
