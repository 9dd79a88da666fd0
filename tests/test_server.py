"""The streaming server on a real uvicorn over loopback: transcripts, faults, limits, HTTP, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import multiprocessing
import select
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
import soundfile as sf
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from asr.config import SessionOptions
from asr.formats import FORMATS, MEDIA_TYPES, render, transcript_record
from server.client import Transcript, file_frames, stream
from server.live import LiveServer
from server.settings import Settings
from tests.test_formats import parse_subtitles
from tests.test_server_support import offline_text, recognizer, s16le, speechlike

KEY = "s3cret-key"
ORIGIN = "http://good.example"
MAX_FRAME = 64 * 1024  # the WebSocket layer passes 4x this: room for a 200 kB control frame
AUDIO = speechlike(1.5, seed=1)  # the parallel healthy session streams this, paced


@pytest.fixture(scope="module")
def server(tiny_bundle):
    settings = Settings(
        model=tiny_bundle,
        max_sessions=4,
        max_frame_bytes=MAX_FRAME,
        api_key=KEY,
        allowed_origins=[ORIGIN],
    )
    with LiveServer(settings) as live:
        yield live


@pytest.fixture(scope="module")
def limited(tiny_bundle):
    """Short idle timeout, session length and upload limit; no API key."""
    settings = Settings(
        model=tiny_bundle,
        idle_timeout_s=1.0,
        max_session_s=2.0,
        max_upload_bytes=64 * 1024,
        workers=0,  # the model in the server process: the other lane kind
    )
    with LiveServer(settings) as live:
        yield live


def ws_url(live: LiveServer, token: str | None = KEY) -> str:
    return live.url(f"/v1/stream?token={token}" if token else "/v1/stream", "ws")


async def stream_samples(
    live: LiveServer, samples: np.ndarray, rate: int, paced: bool = False, **kwargs
) -> Transcript:
    frames = file_frames(samples, rate, 100.0, paced=paced)
    return await stream(ws_url(live), frames, rate, token=KEY, **kwargs)


async def exchange(url: str, frames: list[str | bytes], headers: dict | None = None):
    """Send ``frames``, then collect every server message until the close; returns (messages, code)."""
    messages = []
    async with connect(url, additional_headers=headers, max_size=None) as ws:
        with contextlib.suppress(ConnectionClosed):  # the server may close before all are sent
            for frame in frames:
                await ws.send(frame)
        try:
            while True:
                messages.append(json.loads(await ws.recv()))
        except ConnectionClosed:
            pass
    return messages, ws.close_code


def start(rate: int = 16000, encoding: str = "pcm_s16le", **options: object) -> str:
    return json.dumps({"type": "start", "sample_rate": rate, "encoding": encoding, **options})


# --- streamed == offline ------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "encoding"),
    [(16000, "f32le"), (16000, "pcm_s16le"), (44100, "pcm_s16le"), (8000, "f32le")],
)
def test_streamed_transcript_equals_offline(server, tiny_bundle, rate, encoding):
    samples = speechlike(3.0, rate, seed=rate)
    # irregular frame sizes: the transcript must not depend on how audio is cut
    cuts = np.cumsum(np.random.default_rng(0).integers(1, rate // 5, size=64))
    pieces = np.split(samples, cuts[cuts < len(samples)])
    encode = s16le if encoding == "pcm_s16le" else (lambda x: x.astype("<f4").tobytes())

    async def frames():
        for piece in pieces:
            yield encode(piece)

    results = []
    transcript = asyncio.run(
        stream(ws_url(server), frames(), rate, encoding, token=KEY, on_result=results.append)
    )
    assert transcript.text == offline_text(tiny_bundle, samples, rate)
    assert all(r.final == (r.type == "final") for r in results)
    segments = [r.segment for r in results]
    assert segments == sorted(segments)


def test_concurrent_sessions_share_the_model_processes(server, tiny_bundle):
    """Four sessions at once on the default server (a model process per core): each gets its
    own offline transcript, and the sessions were spread over the processes."""
    state = server.app.state.asr
    assert len(state.lanes) == server.settings.workers >= 2
    assert len([p for p in multiprocessing.active_children() if p.name == "asr-model"]) >= 2
    clips = [speechlike(1.0 + 0.3 * i, seed=20 + i) for i in range(4)]
    seen: list[list[int]] = []

    async def run_all():
        async def one(clip):
            def note(_):
                seen.append([lane.sessions for lane in state.lanes])

            return await stream(
                ws_url(server), file_frames(clip, 16000, 100.0), 16000, token=KEY, on_result=note
            )

        return await asyncio.gather(*(one(c) for c in clips))

    transcripts = asyncio.run(run_all())
    for clip, transcript in zip(clips, transcripts):
        assert transcript.text == offline_text(tiny_bundle, clip, 16000)
    assert any(min(counts) >= 1 for counts in seen)  # every process held a session at once
    assert all(lane.sessions == 0 for lane in state.lanes)  # closed sessions were released


def test_results_arrive_while_streaming(server, tiny_bundle):
    """Paced real-time input: events come back during the stream, not only after stop."""
    samples = speechlike(3.0, seed=7)
    transcript = asyncio.run(stream_samples(server, samples, 16000, paced=True))
    assert transcript.text == offline_text(tiny_bundle, samples, 16000)
    assert transcript.first_result_at is not None
    assert transcript.first_result_at < transcript.stop_at


def test_bearer_header_is_accepted(server, tiny_bundle):
    frames = file_frames(AUDIO, 16000, paced=False)
    transcript = asyncio.run(stream(ws_url(server, token=None), frames, 16000, token=KEY))
    assert transcript.text == offline_text(tiny_bundle, AUDIO, 16000)


# --- protocol faults, each next to a healthy session ----------------------------


@dataclass
class Fault:
    frames: list[str | bytes]
    code: str
    close: int
    token: str | None = KEY
    headers: dict = field(default_factory=dict)


NAN_F32 = np.full(8, np.nan, dtype="<f4").tobytes()
LONG_START = json.dumps({"type": "start", "sample_rate": 16000, "pad": "x" * 4100})
DEEP = "[" * 100_000 + "]" * 100_000  # 200 kB; json.loads would hit RecursionError
NESTED_START = '{"type": "start", "sample_rate": 16000, "x": ' + "[" * 17 + "]" * 17 + "}"
FAULTS = {
    "audio_before_start": Fault([b"\x00\x00"], "audio_before_start", 1003),
    "bad_json": Fault(["{not json"], "bad_json", 1007),
    "not_an_object": Fault(["[1, 2]"], "invalid_message", 1007),
    "unknown_type": Fault(['{"type": "hello"}'], "unknown_type", 1003),
    "type_by_substring": Fault(['{"type": "restart"}'], "unknown_type", 1003),
    "missing_rate": Fault(['{"type": "start"}'], "invalid_message", 1007),
    "deeply_nested": Fault([DEEP], "bad_json", 1007),
    "over_nested": Fault([NESTED_START], "bad_json", 1007),
    "nan_rate": Fault(['{"type": "start", "sample_rate": NaN}'], "bad_json", 1007),
    "string_rate": Fault(['{"type": "start", "sample_rate": "16000"}'], "invalid_message", 1007),
    "float_rate": Fault(['{"type": "start", "sample_rate": 16000.0}'], "invalid_message", 1007),
    "bool_rate": Fault(['{"type": "start", "sample_rate": true}'], "invalid_message", 1007),
    "overlong_start": Fault([LONG_START], "control_too_large", 1009),
    "overlong_stop": Fault(
        [start(), '{"type": "stop", "x": "' + "y" * 4100 + '"}'], "control_too_large", 1009
    ),
    "stop_before_start": Fault(['{"type": "stop"}'], "invalid_message", 1007),
    # a field stop does not have is an extra field, whatever its name and value
    "rate_on_stop": Fault(
        [start(), '{"type": "stop", "sample_rate": 16000}'], "invalid_message", 1007
    ),
    "encoding_on_stop": Fault(
        [start(), '{"type": "stop", "encoding": "mp3"}'], "invalid_message", 1007
    ),
    "unsupported_rate": Fault([start(96000)], "unsupported_sample_rate", 1003),
    "unsupported_encoding": Fault([start(16000, "mp3")], "unsupported_encoding", 1003),
    "string_two_pass": Fault([start(two_pass="true")], "invalid_message", 1007),
    "integer_two_pass": Fault([start(two_pass=1)], "invalid_message", 1007),
    "two_pass_without_teacher": Fault(
        [start(two_pass=True), s16le(AUDIO)], "unsupported_option", 1003
    ),
    "unknown_streaming_decoder": Fault([start(streaming_decoder="beam")], "invalid_message", 1007),
    "whisper_streaming_without_whisper": Fault(
        [start(streaming_decoder="whisper"), s16le(AUDIO)], "unsupported_option", 1003
    ),
    "odd_byte_count": Fault([start(), b"\x00\x00\x00"], "invalid_audio", 1007),
    "non_finite_f32": Fault([start(16000, "f32le"), NAN_F32], "invalid_audio", 1007),
    "oversized_frame": Fault([start(), bytes(MAX_FRAME + 2)], "frame_too_large", 1009),
    "second_start": Fault([start(), start()], "already_started", 1003),
    "bad_key": Fault([start()], "unauthorized", 1008, token="wrong"),
    "no_key": Fault([start()], "unauthorized", 1008, token=None),
    "bad_bearer": Fault([start()], "unauthorized", 1008, None, {"Authorization": "Bearer nope"}),
    "bad_origin": Fault([start()], "origin_not_allowed", 1008, headers={"Origin": "http://evil"}),
}


def with_healthy_session(live: LiveServer, fault: Callable[[], Awaitable]) -> tuple:
    """Run a paced healthy session, inject ``fault`` mid-stream, return both outcomes."""

    async def main():
        healthy = asyncio.create_task(stream_samples(live, AUDIO, 16000, paced=True))
        await asyncio.sleep(0.3)
        outcome = await fault()
        return outcome, await healthy

    return asyncio.run(main())


@pytest.mark.parametrize("name", list(FAULTS))
def test_protocol_fault(server, tiny_bundle, name):
    fault = FAULTS[name]
    url = ws_url(server, fault.token)
    (messages, close), healthy = with_healthy_session(
        server, lambda: exchange(url, fault.frames, fault.headers)
    )
    assert messages, "the server must explain a fault before closing"
    error = messages[-1]
    assert error["type"] == "error" and error["code"] == fault.code, messages
    assert error["message"]
    assert close == fault.close
    assert [m["type"] for m in messages[:-1]] in ([], ["ready"])
    assert healthy.text == offline_text(tiny_bundle, AUDIO, 16000)


def test_too_many_sessions(server, tiny_bundle):
    async def crowd():
        held = []
        for _ in range(server.settings.max_sessions - 1):  # the healthy one holds the last slot
            ws = await connect(ws_url(server))
            await ws.send(start())
            assert json.loads(await ws.recv())["type"] == "ready"
            held.append(ws)
        outcome = await exchange(ws_url(server), [start()])
        for ws in held:
            await ws.close()
        return outcome

    (messages, close), healthy = with_healthy_session(server, crowd)
    assert messages[-1]["code"] == "too_many_sessions"
    assert close == 1013
    assert healthy.text == offline_text(tiny_bundle, AUDIO, 16000)


def test_twice_max_sessions_at_once(server, tiny_bundle):
    """2 x max_sessions clients connect at the same moment: the extra ones are refused at once
    with too_many_sessions (1013), and every admitted one streams to its transcript.

    Every client waits until all have had their first answer before streaming, so the
    admitted sessions all hold their slots while the others knock."""
    n = server.settings.max_sessions
    clips = [speechlike(1.5, seed=40 + i) for i in range(2 * n)]
    answered: list[str] = []
    everyone = asyncio.Event()

    async def client(clip: np.ndarray) -> tuple[list[dict], int | None, float]:
        began = time.monotonic()
        async with connect(ws_url(server), max_size=None) as ws:
            with contextlib.suppress(ConnectionClosed):  # a refusal may come before start
                await ws.send(start(encoding="f32le"))
            messages = [json.loads(await ws.recv())]
            waited = time.monotonic() - began
            answered.append(messages[0]["type"])
            if len(answered) == len(clips):
                everyone.set()
            await everyone.wait()
            with contextlib.suppress(ConnectionClosed):
                if messages[0]["type"] == "ready":
                    async for frame in file_frames(clip, 16000, 100.0, paced=False):
                        await ws.send(frame)
                    await ws.send(json.dumps({"type": "stop"}))
                while True:
                    messages.append(json.loads(await ws.recv()))
        return messages, ws.close_code, waited

    async def crowd():
        return await asyncio.gather(*(client(clip) for clip in clips))

    outcomes = asyncio.run(crowd())
    admitted = [(clip, o) for clip, o in zip(clips, outcomes) if o[0][0]["type"] == "ready"]
    refused = [o for o in outcomes if o[0][0]["type"] != "ready"]
    assert len(admitted) == len(refused) == n
    for messages, close, waited in refused:
        assert [m.get("code") for m in messages] == ["too_many_sessions"]
        assert close == 1013
        assert waited < 2.0  # at once, not after a queue
    for clip, (messages, close, _) in admitted:
        assert messages[-1] == {"type": "end", "reason": "stop"} and close == 1000
        finals = [m["text"] for m in messages if m["type"] == "final" and m["text"]]
        assert " ".join(finals) == offline_text(tiny_bundle, clip, 16000)


def metric(live: LiveServer, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(live.url("/metrics"), timeout=10).read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def test_vanishing_client(server, tiny_bundle):
    gone_before = metric(server, "asr_errors_total", kind="client_gone")

    async def vanish():
        ws = await connect(ws_url(server))
        await ws.send(start())
        await ws.recv()
        for frame in [s16le(AUDIO[i : i + 1600]) for i in range(0, 8000, 1600)]:
            await ws.send(frame)
        ws.transport.abort()  # no close frame: the TCP connection just disappears

    _, healthy = with_healthy_session(server, vanish)
    assert healthy.text == offline_text(tiny_bundle, AUDIO, 16000)
    for _ in range(100):
        if metric(server, "asr_active_sessions") == 0:
            break
        time.sleep(0.05)
    assert metric(server, "asr_active_sessions") == 0
    assert metric(server, "asr_errors_total", kind="client_gone") == gone_before + 1


# --- limits -------------------------------------------------------------------


def test_idle_timeout_flushes_then_errors(limited, tiny_bundle):
    sent = AUDIO[:8000]
    messages, close = asyncio.run(exchange(ws_url(limited, None), [start(), s16le(sent)]))
    assert messages[0]["type"] == "ready"
    assert messages[-1]["code"] == "idle_timeout"
    assert close == 1008
    finals = [m["text"] for m in messages if m["type"] == "final" and m["text"]]
    assert " ".join(finals) == offline_text(tiny_bundle, sent, 16000)


def test_max_session_length(limited):
    async def main():
        frames = file_frames(speechlike(4.0), 16000, paced=True)
        return await stream(ws_url(limited, None), frames, 16000)

    with pytest.raises(Exception, match="session_too_long"):
        asyncio.run(main())


def test_graceful_shutdown_flushes_open_sessions(tiny_bundle):
    sent = AUDIO[:16000]

    async def main(live: LiveServer):
        async with connect(ws_url(live, None)) as ws:
            await ws.send(start())
            assert json.loads(await ws.recv())["type"] == "ready"
            await ws.send(s16le(sent))
            await asyncio.sleep(0.3)
            stopping = asyncio.create_task(asyncio.to_thread(live.stop))
            messages = []
            try:
                while True:
                    messages.append(json.loads(await ws.recv()))
            except ConnectionClosed:
                pass
            await stopping
            return messages, ws.close_code

    with LiveServer(Settings(model=tiny_bundle)) as live:
        messages, close = asyncio.run(main(live))
    assert messages[-1] == {"type": "end", "reason": "shutdown"}
    assert close == 1001
    finals = [m["text"] for m in messages if m["type"] == "final" and m["text"]]
    assert " ".join(finals) == offline_text(tiny_bundle, sent, 16000)


@pytest.fixture(scope="module")
def narrow(tiny_bundle):
    """A small send buffer and a short send timeout, so that a client that stops reading
    fills what lies between it and the server in seconds, not minutes: the listening
    socket's buffer sizes are inherited by every accepted one, and a fixed SO_SNDBUF turns
    off the kernel's growing of send buffers to megabytes. The receive buffer is fixed
    large: on loopback (64 kB segments) a small one keeps advertising a zero window after
    the server pauses reading, and the client's probes back off for tens of seconds."""
    settings = Settings(model=tiny_bundle, workers=1, max_backlog_s=2.0, send_timeout_s=3.0)
    live = LiveServer(settings)
    live.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    live.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    with live:
        yield live


class RawClient:
    """A WebSocket client on a plain blocking socket (websockets' sans-I/O protocol), so the
    test decides when it reads: bytes it does not read stay in the kernel, as with a client
    that has stopped reading."""

    def __init__(self, url: str, rcvbuf: int) -> None:
        self.protocol = ClientProtocol(parse_uri(url), max_size=None)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect
        self.sock.settimeout(30)
        host, port = urllib.parse.urlsplit(url).netloc.split(":")
        self.sock.connect((host, int(port)))
        self.protocol.send_request(self.protocol.connect())
        self._flush()
        self._texts: list[str] = []
        while self.protocol.handshake_exc is None and self.protocol.state is not State.OPEN:
            self._read()

    def send(self, frame: str | bytes) -> None:
        if isinstance(frame, str):
            self.protocol.send_text(frame.encode())
        else:
            self.protocol.send_binary(frame)
        self._flush()

    def receive(self) -> dict | None:
        """The next text message, or None once the server has closed."""
        while not self._texts:
            if self.protocol.close_rcvd is not None or not self._read():
                return None
        return json.loads(self._texts.pop(0))

    def _read(self) -> bool:
        data = self.sock.recv(65536)
        if data:
            self.protocol.receive_data(data)
        else:
            self.protocol.receive_eof()
        for event in self.protocol.events_received():
            if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                self._texts.append(event.data.decode())
        return bool(data)

    def _flush(self) -> None:
        self.sock.sendall(b"".join(self.protocol.data_to_send()))


CAP = 20_000_000  # bytes of audio a flooding client may push before the test calls it unbounded


def flood_without_reading(live: LiveServer) -> tuple[int, list[dict], int | None, bool]:
    """Start a session, then send audio as fast as the server takes it and read nothing
    until the server reports the session too slow; returns (bytes sent, messages, close,
    whether the connection was reset). Closing a socket with unread input makes the kernel
    send a reset, which can overtake the error and close frames on a busy machine."""
    client = RawClient(ws_url(live, None), rcvbuf=4096)
    client.send(start())
    messages = [client.receive()]
    frames = [s16le(AUDIO[i : i + 1600]) for i in range(0, len(AUDIO) - 1600, 1600)]
    sent = 0
    gave_up = metric(live, "asr_errors_total", kind="client_too_slow") + 1
    deadline = time.monotonic() + 120
    reset = False
    try:
        while sent < CAP:
            assert time.monotonic() < deadline, "the session did not end with client_too_slow"
            if select.select([], [client.sock], [], 0.2)[1]:
                client.send(frames[(sent // 3200) % len(frames)])
                sent += 3200
            elif metric(live, "asr_errors_total", kind="client_too_slow") == gave_up:
                break  # the server stopped reading and ended the session
        while (message := client.receive()) is not None:
            messages.append(message)
    except ConnectionResetError:
        reset = True
    close = client.protocol.close_rcvd.code if client.protocol.close_rcvd else None
    client.sock.close()
    return sent, messages, close, reset


def test_client_that_stops_reading(narrow, tiny_bundle):
    """A client sends audio faster than real time and never reads its results: the server
    takes its frames only as fast as the model goes, stops taking them once results pile up
    unread, and after send_timeout ends the session with client_too_slow (1008), so its
    memory stays bounded; a healthy session alongside is untouched."""
    before = metric(narrow, "asr_errors_total", kind="client_too_slow")
    (sent, messages, close, reset), healthy = with_healthy_session(
        narrow, lambda: asyncio.to_thread(flood_without_reading, narrow)
    )
    assert sent < CAP  # before the fix the server read (and queued) all of it
    assert messages[0]["type"] == "ready"
    assert metric(narrow, "asr_errors_total", kind="client_too_slow") == before + 1
    if not reset:  # a reset (see flood_without_reading) can swallow the last frames
        assert messages[-1]["code"] == "client_too_slow", messages[-1]
        assert close == 1008
    assert all(m["type"] in ("partial", "final") for m in messages[1:-1])
    assert healthy.text == offline_text(tiny_bundle, AUDIO, 16000)


# --- HTTP ---------------------------------------------------------------------


def post_raw(live: LiveServer, path: str, body: bytes, headers: dict) -> tuple[int, str, bytes]:
    """Status, Content-Type and body of a POST."""
    request = urllib.request.Request(live.url(path), data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def post(live: LiveServer, path: str, body: bytes, headers: dict) -> tuple[int, dict]:
    status, _, data = post_raw(live, path, body, headers)
    return status, json.loads(data)


def multipart(filename: str, data: bytes) -> tuple[bytes, dict]:
    boundary = "asr-test-boundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


AUTH = {"Authorization": f"Bearer {KEY}"}
RAW = {"Content-Type": "application/octet-stream"}
JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("fmt", ["WAV", "FLAC"])
def test_http_transcribe_file(server, tiny_bundle, fmt):
    samples = speechlike(2.5, 22050, seed=3)
    buffer = io.BytesIO()
    sf.write(buffer, samples, 22050, format=fmt, subtype="PCM_16")
    body, headers = multipart(f"speech.{fmt.lower()}", buffer.getvalue())
    status, result = post(server, "/v1/transcribe", body, headers | AUTH)
    assert status == 200, result
    assert result["text"] == offline_text(tiny_bundle, samples, 22050)
    assert result["duration"] == pytest.approx(2.5, abs=1e-3)
    assert all(s["type"] in ("partial", "final") for s in result["segments"])


@pytest.mark.parametrize("encoding", ["pcm_s16le", "f32le"])
def test_http_transcribe_raw_pcm(server, tiny_bundle, encoding):
    data = s16le(AUDIO) if encoding == "pcm_s16le" else AUDIO.astype("<f4").tobytes()
    path = f"/v1/transcribe?sample_rate=16000&encoding={encoding}"
    status, result = post(server, path, data, RAW | AUTH)
    assert status == 200, result
    assert result["text"] == offline_text(tiny_bundle, AUDIO, 16000)


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "code"),
    [
        ("/v1/transcribe", b"\x00\x00", RAW | AUTH, 400, "invalid_message"),  # no sample_rate
        (
            "/v1/transcribe?sample_rate=4000",
            b"\x00\x00",
            RAW | AUTH,
            400,
            "unsupported_sample_rate",
        ),
        (
            "/v1/transcribe?sample_rate=16000&encoding=mp3",
            b"",
            RAW | AUTH,
            400,
            "unsupported_encoding",
        ),
        # the rate is an integer, as in a start frame: no float, no text, no untyped 422
        ("/v1/transcribe?sample_rate=16000.0", b"\x00\x00", RAW | AUTH, 400, "invalid_message"),
        ("/v1/transcribe?sample_rate=abc", b"\x00\x00", RAW | AUTH, 400, "invalid_message"),
        ("/v1/transcribe?sample_rate=%2B16000", b"\x00\x00", RAW | AUTH, 400, "invalid_message"),
        ("/v1/transcribe?sample_rate=16000", b"\x00\x00\x00", RAW | AUTH, 400, "invalid_audio"),
        ("/v1/transcribe?sample_rate=16000", b"\x00\x00", RAW, 401, "unauthorized"),
        (
            "/v1/transcribe?sample_rate=16000",
            b"\x00\x00",
            RAW | {"Authorization": "Bearer x"},
            401,
            "unauthorized",
        ),
    ],
)
def test_http_transcribe_errors(server, path, body, headers, status, code):
    got, result = post(server, path, body, headers)
    assert (got, result["code"]) == (status, code)


def test_http_transcribe_undecodable_file(server):
    """The message names the upload, never the server's temporary file."""
    body, headers = multipart("x.wav", b"not audio at all")
    got, result = post(server, "/v1/transcribe", body, headers | AUTH)
    assert (got, result["code"]) == (400, "invalid_audio")
    assert "x.wav" in result["message"] and "/tmp" not in result["message"], result


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


@pytest.mark.parametrize("rate", [4000, 96000])
def test_http_upload_at_an_unsupported_rate(server, rate):
    """A well-formed file at a rate a stream may not declare is refused as such."""
    body, headers = multipart("speech.wav", wav_bytes(speechlike(0.5, rate), rate))
    got, result = post(server, "/v1/transcribe", body, headers | AUTH)
    assert (got, result["type"], result["code"]) == (400, "error", "unsupported_sample_rate")
    assert f"speech.wav: sample rate {rate} Hz" in result["message"], result


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"--x\r\nContent-Disposition: form-data\r\n\r\n", "multipart/form-data"),  # no boundary
        (b"--x\r\ngarbage without headers or an end", "multipart/form-data; boundary=x"),
    ],
)
def test_http_malformed_multipart_is_a_typed_error(server, body, content_type):
    got, result = post(server, "/v1/transcribe", body, {"Content-Type": content_type} | AUTH)
    assert (got, result.get("type"), result.get("code")) == (400, "error", "invalid_message")
    assert result["message"].startswith("malformed multipart body: "), result


def test_http_multipart_media_type_is_case_insensitive(server, tiny_bundle):
    body, headers = multipart("speech.wav", wav_bytes(AUDIO, 16000))
    headers = {
        "Content-Type": headers["Content-Type"].replace(
            "multipart/form-data", "Multipart/Form-Data"
        )
    }
    status, result = post(server, "/v1/transcribe", body, headers | AUTH)
    assert status == 200, result
    assert result["text"] == offline_text(tiny_bundle, AUDIO, 16000)


def test_http_upload_limit(limited):
    status, result = post(limited, "/v1/transcribe?sample_rate=16000", bytes(70 * 1024), {})
    assert (status, result["code"]) == (413, "too_large")


# --- one model process shared: bad input and long uploads -----------------------


@pytest.fixture(scope="module")
def one_process(tiny_bundle):
    """A single model process: every session and upload shares it."""
    with LiveServer(Settings(model=tiny_bundle, workers=1)) as live:
        yield live


def out_of_range(rate: int) -> np.ndarray:
    """Finite f32 samples far beyond full scale (up to 2.7e38), which once made the front end
    fail (NaN mel energy; an infinite resampler output) and took the model process down."""
    return (speechlike(1.0, rate, seed=11) * np.float32(3e38)).astype("<f4")


@pytest.mark.parametrize("rate", [16000, 22050])
def test_out_of_range_f32_is_clipped_and_harms_no_other_session(one_process, tiny_bundle, rate):
    """Such samples are clipped to [-1, 1], as int16 audio is by construction: that session
    is transcribed as the clipped audio, the paced session beside it on the same model process
    is untouched, and the process never restarts."""
    huge = out_of_range(rate)
    frames = [start(rate, "f32le"), huge.tobytes(), '{"type": "stop"}']
    (messages, close), healthy = with_healthy_session(
        one_process, lambda: exchange(ws_url(one_process), frames)
    )
    assert messages[-1] == {"type": "end", "reason": "stop"} and close == 1000, messages
    finals = [m["text"] for m in messages if m["type"] == "final" and m["text"]]
    assert " ".join(finals) == offline_text(tiny_bundle, np.clip(huge, -1, 1), rate)
    assert healthy.text == offline_text(tiny_bundle, AUDIO, 16000)
    assert metric(one_process, "asr_model_restarts_total") == 0
    assert one_process.get_json("/readyz")[1]["live_processes"] == 1


def test_http_out_of_range_f32_is_clipped(one_process, tiny_bundle):
    huge = out_of_range(16000)
    status, result = post(
        one_process, "/v1/transcribe?sample_rate=16000&encoding=f32le", huge.tobytes(), RAW
    )
    assert status == 200, result
    assert result["text"] == offline_text(tiny_bundle, np.clip(huge, -1, 1), 16000)
    assert metric(one_process, "asr_model_restarts_total") == 0


UPLOAD = speechlike(180.0, seed=9)  # ~3 s of the tiny model's compute


async def upload_while(live: LiveServer, during: Callable[[], Awaitable]) -> tuple:
    """POST ``UPLOAD`` and run ``during`` once the server has taken its audio (its model work
    is then queued or running); (the upload's transcript, ``during``'s outcome, the seconds
    from the upload's start at which each ended)."""
    began, ended = time.monotonic(), {}
    audio_before = metric(live, "asr_audio_seconds_total")

    async def upload():
        path = "/v1/transcribe?sample_rate=16000"
        result = await asyncio.to_thread(post, live, path, s16le(UPLOAD), RAW)
        ended["upload"] = time.monotonic() - began
        return result

    uploading = asyncio.create_task(upload())
    while await asyncio.to_thread(metric, live, "asr_audio_seconds_total") < audio_before + 180:
        assert not uploading.done(), uploading.result()  # refused before its audio was taken
        await asyncio.sleep(0.02)
    outcome = await during()
    ended["during"] = time.monotonic() - began
    return await uploading, outcome, ended


def test_upload_takes_turns_with_the_streams_of_its_model_process(one_process, tiny_bundle):
    """A long upload runs in pieces between the streaming steps of its model process, so a
    session started while it runs is served to its end long before the upload finishes (it
    once waited for the whole upload); the upload's transcript is the offline one."""
    (status, result), transcript, ended = asyncio.run(
        upload_while(one_process, lambda: stream_samples(one_process, AUDIO, 16000))
    )
    assert status == 200, result
    assert result["text"] == offline_text(tiny_bundle, UPLOAD, 16000)
    assert transcript.text == offline_text(tiny_bundle, AUDIO, 16000)
    assert ended["during"] < ended["upload"] / 2, ended


def test_uploads_count_when_a_model_process_is_chosen(tiny_bundle):
    """A session started while an upload runs goes to the model process without it (ranked
    by open sessions alone, both went to the first)."""

    async def session_lanes(live: LiveServer) -> list[int]:
        async with connect(ws_url(live)) as ws:
            await ws.send(start())
            assert json.loads(await ws.recv())["type"] == "ready"
            return [lane.sessions for lane in live.app.state.asr.lanes]

    with LiveServer(Settings(model=tiny_bundle, workers=2)) as live:
        (status, result), lanes, _ = asyncio.run(upload_while(live, lambda: session_lanes(live)))
    assert status == 200, result
    assert lanes == [0, 1]


# --- transcript formats ---------------------------------------------------------

LONG = speechlike(6.0, seed=5)  # several segments of the tiny model


@pytest.mark.parametrize("fmt", FORMATS)
def test_http_transcribe_formats(server, tiny_bundle, fmt):
    """?format= answers in that format and media type, exactly what the one formatter makes of
    the offline segments; subtitles parse and span the segments."""
    segments = recognizer(str(tiny_bundle)).transcribe_segments(LONG, 16000)
    assert segments, "the test model should say something"
    path = f"/v1/transcribe?sample_rate=16000&encoding=pcm_s16le&format={fmt}"
    status, media_type, body = post_raw(server, path, s16le(LONG), RAW | AUTH)
    assert status == 200, body
    assert media_type == MEDIA_TYPES[fmt]
    text = body.decode()
    if fmt == "json":
        assert json.loads(text) == transcript_record(segments, 6.0)
        assert post(server, path.replace("&format=json", ""), s16le(LONG), RAW | AUTH)[1] == (
            json.loads(text)
        ), "JSON is the default"
        return
    assert text == render(fmt, segments, 6.0)
    if fmt == "txt":
        assert text == offline_text(tiny_bundle, LONG, 16000) + "\n"
        return
    cues = parse_subtitles(fmt, text)
    assert (cues[0][0], cues[-1][1]) == (segments[0].start, segments[-1].end)
    assert " ".join(c[2] for c in cues) == " ".join(s.text for s in segments)


def test_http_format_converts_a_json_transcript(server):
    """/v1/format gives what /v1/transcribe would have given in that format (the page's
    downloads), and refuses anything but a JSON transcript."""
    path = "/v1/transcribe?sample_rate=16000"
    status, transcript = post(server, path, s16le(LONG), RAW | AUTH)
    assert status == 200
    body = json.dumps(transcript).encode()
    for fmt in ("srt", "vtt", "txt"):
        direct = post_raw(server, f"{path}&format={fmt}", s16le(LONG), RAW | AUTH)
        assert post_raw(server, f"/v1/format?format={fmt}", body, JSON | AUTH) == direct
    for bad in (b"{not json", b"[]", json.dumps({"text": "", "segments": [{}]}).encode()):
        status, error = post(server, "/v1/format?format=srt", bad, JSON | AUTH)
        assert (status, error["type"], error["code"]) == (400, "error", "invalid_message")
        assert error["message"].startswith("not a JSON transcript"), error
    assert post(server, "/v1/format?format=srt", body, JSON)[1]["code"] == "unauthorized"


SEGMENT = {
    "type": "final",
    "segment": 0,
    "text": "a b",
    "tokens": ["\u2581a", "\u2581b"],
    "token_times": [0.4, 0.8],
    "start": 0.0,
    "end": 0.8,
    "final": True,
}


def transcript_text(**changes: str) -> bytes:
    """A one-segment JSON transcript with some segment fields replaced by raw JSON text
    (``Infinity`` and ``NaN`` are what Python's and JavaScript's encoders may write)."""
    fields = {k: json.dumps(v) for k, v in SEGMENT.items()} | changes
    segment = "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"
    return f'{{"text": "a b", "duration": 1.0, "segments": [{segment}]}}'.encode()


@pytest.mark.parametrize(
    "changes",
    [
        {"end": "1e308"},  # overflows milliseconds in a subtitle time
        {"end": "Infinity"},
        {"start": "NaN"},
        {"start": "-5"},
        {"start": "0.9"},  # after the end
        {"token_times": "[0.4]"},  # one per token
        {"token_times": "[0.4, 1.2]"},  # emitted after the segment's end
        {"token_times": "[-0.1, 0.8]"},
    ],
)
@pytest.mark.parametrize("fmt", ["srt", "json"])
def test_http_format_refuses_impossible_times(server, changes, fmt):
    """Times are finite seconds from the stream's start, a segment does not end before it
    starts and each token has its emission time inside it: anything else is not a transcript."""
    assert post_raw(server, f"/v1/format?format={fmt}", transcript_text(), JSON | AUTH)[0] == 200
    status, error = post(
        server, f"/v1/format?format={fmt}", transcript_text(**changes), JSON | AUTH
    )
    assert (status, error["type"], error["code"]) == (400, "error", "invalid_message"), error
    assert error["message"].startswith("not a JSON transcript: segments.0"), error


@pytest.mark.parametrize("endpoint", ["/v1/transcribe?sample_rate=16000&", "/v1/format?"])
def test_http_unknown_format_is_a_typed_error(server, endpoint):
    status, error = post(server, f"{endpoint}format=docx", s16le(AUDIO), RAW | AUTH)
    assert (status, error["type"], error["code"]) == (400, "error", "unsupported_format")
    assert "'docx'" in error["message"] and "txt, json, srt, vtt" in error["message"]


@pytest.mark.parametrize("lanes", ["server", "limited"])
def test_fbank_model_serves_two_pass_only_off(request, tiny_bundle, lanes):
    """Both lane kinds know from the model's load that an fbank model has no two-pass finals:
    asking for them is refused before any audio is taken; asking for none is a usual stream."""
    live = request.getfixturevalue(lanes)
    messages, close = asyncio.run(exchange(ws_url(live), [start(two_pass=True), s16le(AUDIO)]))
    assert [m["type"] for m in messages] == ["error"] and close == 1003
    assert messages[0]["code"] == "unsupported_option"
    assert "full-attention Whisper encoder" in messages[0]["message"]
    transcript = asyncio.run(
        stream_samples(live, AUDIO, 16000, options=SessionOptions(two_pass=False))
    )
    assert transcript.text == offline_text(tiny_bundle, AUDIO, 16000)
    assert live.get_json("/readyz")[1]["two_pass"] == {"available": False, "default": False}
    decoders = live.get_json("/readyz")[1]["streaming_decoder"]
    assert decoders == {"available": ["lstm"], "default": "lstm"}


# --- health, schemas, metrics -------------------------------------------------


def test_health_and_schemas(server):
    assert server.get_json("/healthz") == (200, {"status": "ok"})
    status, ready = server.get_json("/readyz")
    assert status == 200 and ready["status"] == "ready"
    status, schemas = server.get_json("/v1/schemas")
    assert status == 200
    assert set(schemas["client"]["discriminator"]["mapping"]) == {"start", "stop"}
    assert set(schemas["server"]["discriminator"]["mapping"]) == {
        "ready",
        "partial",
        "final",
        "end",
        "error",
    }
    assert schemas["close_codes"]["too_many_sessions"] == 1013
    assert schemas["close_codes"]["control_too_large"] == 1009
    assert schemas["close_codes"]["client_too_slow"] == 1008
    assert schemas["close_codes"]["unsupported_option"] == 1003
    error_codes = schemas["server"]["$defs"]["ErrorCode"]["enum"]
    assert set(error_codes) == set(schemas["close_codes"])
    start = schemas["client"]["$defs"]["Start"]["properties"]
    assert start["sample_rate"]["type"] == "integer"
    assert {"type": "boolean"} in start["two_pass"]["anyOf"]
    assert schemas["limits"]["max_control_bytes"] == server.settings.max_control_bytes
    assert schemas["limits"]["max_control_depth"] == 16
    assert (ready["processes"], ready["live_processes"]) == (server.settings.workers,) * 2


def test_metrics_exposed(server):
    asyncio.run(stream_samples(server, AUDIO, 16000))
    asyncio.run(exchange(ws_url(server), ["{bad"]))
    assert metric(server, "asr_audio_seconds_total") >= 1.5
    assert metric(server, "asr_sessions_total") >= 1
    assert metric(server, "asr_real_time_factor") > 0
    assert metric(server, "asr_step_latency_seconds_count") > 0
    assert metric(server, "asr_final_latency_seconds_count") > 0
    assert metric(server, "asr_batch_size_count") > 0
    assert metric(server, "asr_errors_total", kind="bad_json") >= 1
    assert metric(server, "asr_active_sessions") == 0
    assert metric(server, "asr_model_processes_live") == server.settings.workers
    assert metric(server, "asr_model_restarts_total") == 0
