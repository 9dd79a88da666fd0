"""Stream a file or the microphone to a recognition server and print the transcript.

Files are sent in real time (100 ms frames) unless --fast is given. On a
terminal, partial text is rewritten in place and every final gets its own
line; when stdout is not a terminal only finals are printed. With --format
(txt, json, srt or vtt) the whole transcript is printed in that format once the
stream ends (the live text then goes to stderr, if that is a terminal); with
--out FILE it is written to FILE instead, in the format --format or FILE's
suffix names. The API key may come from --token or the ASR_API_KEY environment
variable.

examples:
  asr stream talk.wav --fast --format srt > talk.srt
  asr stream --mic --out notes.vtt
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import signal
import sys
import time
import typing
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, TextIO

import numpy as np
from pydantic import TypeAdapter
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.uri import parse_uri

from asr.audio import MAX_RATE, MIN_RATE, read_audio, resample
from asr.config import SessionOptions, StreamingDecoder
from asr.formats import FORMATS, format_of, plain_text, render
from server.protocol import End, Error, Ready, Result, ServerMessage, Start, Stop

DEFAULT_URL = "ws://127.0.0.1:8000/v1/stream"
_SERVER_MESSAGE = TypeAdapter(ServerMessage)
_SAMPLE_BYTES = {"pcm_s16le": 2, "f32le": 4}


class StreamError(Exception):
    """The server refused or ended the stream with an error; ``transcript`` holds what came
    before it (idle_timeout and session_too_long send the finals first)."""

    def __init__(self, code: str, message: str, transcript: Transcript | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.transcript = transcript


@dataclass
class Transcript:
    """Final results of one stream, the audio seconds sent, and the timings a benchmark needs
    (monotonic seconds)."""

    sample_rate: int
    segments: list[Result] = field(default_factory=list)
    samples_sent: int = 0
    first_audio_at: float | None = None
    first_result_at: float | None = None
    stop_at: float | None = None
    end_at: float | None = None

    @property
    def text(self) -> str:
        return plain_text(self.segments)

    @property
    def audio_seconds(self) -> float:
        return self.samples_sent / self.sample_rate


async def stream(
    url: str,
    frames: AsyncIterator[bytes],
    sample_rate: int,
    encoding: str = "f32le",
    token: str | None = None,
    on_result: Callable[[Result], None] | None = None,
    options: SessionOptions | None = None,
) -> Transcript:
    """Run one session: start, send ``frames`` while reading results, stop, wait for end.
    ``options``: what the session asks for over the server's model's defaults."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    transcript = Transcript(sample_rate)
    chosen = dataclasses.asdict(options) if options is not None else {}
    start = Start(sample_rate=sample_rate, encoding=encoding, **chosen)
    async with connect(url, additional_headers=headers, max_size=None) as ws:
        # unset fields stay out of the frame: a server that predates them still accepts it
        await ws.send(start.model_dump_json(exclude_none=True))
        ready = _SERVER_MESSAGE.validate_json(await ws.recv())
        if not isinstance(ready, Ready):
            _raise_unexpected(ready, transcript)
        sender = asyncio.create_task(_send(ws, frames, transcript, _SAMPLE_BYTES[encoding]))
        try:
            async for raw in ws:
                message = _SERVER_MESSAGE.validate_json(raw)
                if isinstance(message, Result):
                    if transcript.first_result_at is None:
                        transcript.first_result_at = time.monotonic()
                    if message.final:
                        transcript.segments.append(message)
                    if on_result is not None:
                        on_result(message)
                elif isinstance(message, End):
                    transcript.end_at = time.monotonic()
                    return transcript
                else:
                    _raise_unexpected(message, transcript)
        except ConnectionClosed as err:
            raise StreamError(
                "closed", f"connection closed without an end message ({err})", transcript
            ) from None
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
    raise StreamError(
        "closed", "the server closed the connection without an end message", transcript
    )


def _raise_unexpected(message: Ready | Result | End | Error, transcript: Transcript) -> NoReturn:
    if isinstance(message, Error):
        raise StreamError(message.code.value, message.message, transcript)
    raise StreamError("protocol", f"unexpected {message.type} message", transcript)


async def _send(
    ws: ClientConnection,
    frames: AsyncIterator[bytes],
    transcript: Transcript,
    sample_bytes: int,
) -> None:
    try:
        async for frame in frames:
            if transcript.first_audio_at is None:
                transcript.first_audio_at = time.monotonic()
            await ws.send(frame)
            transcript.samples_sent += len(frame) // sample_bytes
        transcript.stop_at = time.monotonic()
        await ws.send(Stop().model_dump_json())
    except ConnectionClosed:
        pass  # the reader reports why the server closed


async def file_frames(
    samples: np.ndarray, rate: int, frame_ms: float = 100.0, paced: bool = True
) -> AsyncIterator[bytes]:
    """f32le frames of ``frame_ms``; when paced, frame i leaves at i * frame_ms (real time)."""
    step = max(1, int(rate * frame_ms / 1000))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for i, begin in enumerate(range(0, len(samples), step)):
        if paced:
            await asyncio.sleep(max(0.0, t0 + i * step / rate - loop.time()))
        yield samples[begin : begin + step].astype("<f4").tobytes()


def load_file(path: Path) -> tuple[np.ndarray, int]:
    """Read a file at its own rate; rates the protocol does not accept go to 16 kHz."""
    samples, rate = read_audio(path)
    if not MIN_RATE <= rate <= MAX_RATE:
        samples, rate = resample(samples, rate, 16000), 16000
    return samples, rate


async def mic_frames(frame_ms: float, stop: asyncio.Event) -> tuple[int, AsyncIterator[bytes]]:
    """Open the default input device; frames flow until ``stop`` is set."""
    try:
        import sounddevice as sd
    except (ImportError, OSError) as err:  # OSError: the PortAudio library is missing
        raise ValueError(
            f"--mic needs sounddevice and PortAudio ({err}); "
            "pip install 'monotonic-asr[mic]' and apt-get install libportaudio2"
        ) from None
    try:
        device = sd.query_devices(kind="input")
    except (sd.PortAudioError, ValueError):
        raise ValueError("no audio input device found; stream a file instead") from None
    rate = min(max(int(device["default_samplerate"]), MIN_RATE), MAX_RATE)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    def captured(indata: np.ndarray, *_: object) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, indata[:, 0].astype("<f4").tobytes())

    async def frames() -> AsyncIterator[bytes]:
        blocksize = int(rate * frame_ms / 1000)
        with sd.InputStream(rate, blocksize, channels=1, dtype="float32", callback=captured):
            stopped = asyncio.ensure_future(stop.wait())
            while True:
                frame = asyncio.ensure_future(queue.get())
                await asyncio.wait({frame, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not frame.done():
                    frame.cancel()
                    return
                yield frame.result()

    return rate, frames()


class Printer:
    """Partials rewritten in place on a terminal; finals on their own lines."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out
        self.tty = out.isatty()

    def __call__(self, result: Result) -> None:
        if result.final:
            if result.text:
                self.out.write(("\r\x1b[K" if self.tty else "") + result.text + "\n")
        elif self.tty:
            self.out.write("\r\x1b[K" + result.text)
        self.out.flush()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", type=Path, help="audio file (WAV, FLAC, SPHERE)")
    parser.add_argument("--mic", action="store_true", help="stream the default microphone")
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--fast", action="store_true", help="send a file as fast as possible")
    parser.add_argument("--frame-ms", type=float, default=100.0)
    parser.add_argument("--token", default=os.environ.get("ASR_API_KEY") or None)
    parser.add_argument(
        "--two-pass",
        action=argparse.BooleanOptionalAction,
        help="ask for finals from the full-attention encoder over each segment, or "
        "(--no-two-pass) for none (default: the server's model decides)",
    )
    parser.add_argument(
        "--streaming-decoder",
        choices=typing.get_args(StreamingDecoder),
        help="what writes partials and one-pass finals: the model's LSTM decoder, or "
        "Whisper's decoder (cased and better read, later; default: the server's model decides)",
    )
    parser.add_argument(
        "--format", choices=FORMATS, help="print the whole transcript in this format at the end"
    )
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="write the transcript to FILE (format: its suffix)"
    )


def run(args: argparse.Namespace) -> int:
    if (args.file is None) == (not args.mic):
        raise ValueError("give either an audio FILE or --mic")
    if not (math.isfinite(args.frame_ms) and args.frame_ms > 0):
        raise ValueError(
            f"--frame-ms must be a positive number of milliseconds, got {args.frame_ms}"
        )
    try:
        parse_uri(args.url)
    except InvalidURI as err:
        raise ValueError(f"--url: {err} (e.g. {DEFAULT_URL})") from None
    output = args.format
    if args.out is not None:
        output = output or format_of(args.out)
        if not args.out.parent.is_dir():
            raise ValueError(f"cannot write {args.out}: {args.out.parent} is not a directory")
    live = _live_printer(transcript_on_stdout=output is not None and args.out is None)
    try:
        transcript = asyncio.run(_main(args, live))
    except StreamError as err:
        if output is not None and err.transcript is not None and err.transcript.segments:
            _deliver(err.transcript, output, args.out)  # the finals that came are kept
        print(f"asr stream: server error {err}", file=sys.stderr)
        return 1
    except InvalidHandshake as err:  # not a WebSocket endpoint: a wrong path, an HTTP server
        print(f"asr stream: {args.url} refused the stream: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"asr stream: cannot reach {args.url}: {err}", file=sys.stderr)
        return 1
    return 0 if output is None else _deliver(transcript, output, args.out)


def _deliver(transcript: Transcript, output: str, out: Path | None) -> int:
    """The transcript in ``output``, written to ``out`` or else printed; the exit status."""
    document = render(output, transcript.segments, transcript.audio_seconds)
    if out is None:
        sys.stdout.write(document)
        return 0
    try:
        out.write_text(document, encoding="utf-8")
    except OSError as err:
        print(f"asr stream: cannot write {out}: {err}", file=sys.stderr)
        return 1
    return 0


def _live_printer(transcript_on_stdout: bool) -> Printer | None:
    """The live text goes to stdout, unless the transcript goes there: then to stderr when
    that is a terminal, else nowhere."""
    if not transcript_on_stdout:
        return Printer(sys.stdout)
    return Printer(sys.stderr) if sys.stderr.isatty() else None


async def _main(args: argparse.Namespace, on_result: Callable[[Result], None] | None) -> Transcript:
    if args.mic:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
        rate, frames = await mic_frames(args.frame_ms, stop)
        print(f"listening at {rate} Hz; Ctrl-C to stop", file=sys.stderr)
    else:
        samples, rate = load_file(args.file)
        frames = file_frames(samples, rate, args.frame_ms, paced=not args.fast)
    options = SessionOptions(args.two_pass, args.streaming_decoder)
    return await stream(
        args.url, frames, rate, token=args.token, on_result=on_result, options=options
    )
