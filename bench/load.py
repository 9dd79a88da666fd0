"""Load test for the streaming server: N concurrent clients over real WebSockets.

Phase 1 (paced): every client sends 100 ms frames at real-time pace, like a
microphone. Reports p50/p95 time to first result (first audio frame sent ->
first partial or final received), p50/p95 final latency (stop sent -> end
received) and errors. Phase 2 (unpaced): every client sends as fast as it can;
reports the aggregate real-time factor (wall time / audio seconds).

    python bench/load.py --model models/default --clients 20 --steady
    python bench/load.py --url ws://host:8000/v1/stream --clients 20 --audio speech.wav
    python bench/load.py --no-two-pass --clients 50 --json load.json   # figures as JSON too
    python bench/load.py --capacity --two-pass            # streams carried, two-pass finals
    python bench/load.py --capacity --two-pass --steady   # the same, users talking on
    python bench/load.py --capacity --steady --streaming-decoder whisper   # Whisper's live text

``--two-pass``: every client asks for two-pass finals (``two_pass`` in ``start``), which
Whisper's decoder writes where the bundle carries it, ``--no-two-pass`` for one-pass finals;
without either, the server's model decides (its ``/readyz`` says which, and the figures name
it); ``--streaming-decoder``: for that
decoder's streaming pass (``streaming_decoder`` in ``start``). ``--capacity``: paced phases of more and
more clients (``--steps``), up to the first that has an error or a p95 final latency above
``--max-final-latency``; the last that passed is the number of real-time streams this
machine carries. Paced clients start within one second of each other, so their stops (and
their finals) come within a second too: a burst. ``--steady``: each client talks on, streaming
the audio three times (``--rounds``), a session after another, and their starts are spread
over one utterance, so that their stops are too: N users talking all the time, the load a
server carries for hours, rather than N users all stopping in the same second.

Without --url the server is started as a subprocess (`asr serve`) on a free
port. Without --audio one sentence is spoken by espeak-ng.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import typing
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.config import SessionOptions, StreamingDecoder  # noqa: E402
from server.client import Transcript, file_frames, load_file, stream  # noqa: E402

SENTENCE = "the quick brown fox jumps over the lazy dog while the band plays on"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--url", help="an already running server's /v1/stream URL")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--audio", type=Path, help="WAV/FLAC to stream (default: espeak-ng)")
    parser.add_argument("--frame-ms", type=float, default=100.0)
    parser.add_argument("--token", help="API key of the server, if it needs one")
    parser.add_argument("--skip-unpaced", action="store_true")
    parser.add_argument("--server-arg", action="append", default=[], help="extra `asr serve` args")
    parser.add_argument("--json", type=Path, help="also write the printed figures here as JSON")
    parser.add_argument(
        "--two-pass",
        action=argparse.BooleanOptionalAction,
        help="clients ask for two-pass finals (--no-two-pass: for one-pass finals; default: the "
        "server's model decides)",
    )
    parser.add_argument(
        "--streaming-decoder",
        choices=typing.get_args(StreamingDecoder),
        help="clients ask for this decoder's streaming pass (default: the model's)",
    )
    parser.add_argument(
        "--capacity",
        action="store_true",
        help="find the most paced clients with no error and p95 final latency within bounds",
    )
    parser.add_argument("--steps", type=int, nargs="+", default=[5, 10, 15, 20, 25, 30, 40, 50])
    parser.add_argument("--max-final-latency", type=float, default=1.0, help="seconds (--capacity)")
    parser.add_argument(
        "--steady",
        action="store_true",
        help="paced clients talk on: each streams the audio --rounds times, one session after "
        "another, their starts (and so their stops) spread over one utterance",
    )
    parser.add_argument(
        "--rounds", type=int, help="sessions per client (default: 3 with --steady, else 1)"
    )
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (3 if args.steady else 1)
    if args.capacity:
        args.clients = max(args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        audio = args.audio or spoken(Path(tmp) / "sentence.wav")
        samples, rate = load_file(audio)
        figures: dict[str, object] = {"clients": args.clients, "audio_seconds": len(samples) / rate}
        with server(args) as url:
            if args.two_pass is None:
                args.two_pass = served_two_pass(url, args.token)
            figures["finals"] = "two-pass" if args.two_pass else "one-pass"
            if args.capacity:
                figures = capacity(url, args, samples, rate)
                args.skip_unpaced = True
            else:
                print(f"{args.clients} clients, {len(samples) / rate:.2f} s of audio each, {url}")
                paced = asyncio.run(run_clients(url, args, samples, rate, paced=True))
                figures["paced"] = report_paced(paced)
            if not args.skip_unpaced:
                started = time.monotonic()
                unpaced = asyncio.run(run_clients(url, args, samples, rate, paced=False))
                wall = time.monotonic() - started
                figures["unpaced"] = report_unpaced(unpaced, wall, len(samples) / rate)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def capacity(
    url: str, args: argparse.Namespace, samples: np.ndarray, rate: int
) -> dict[str, object]:
    """Paced phases of ``args.steps`` clients in turn, until one fails the bounds; the figures
    of each, and the most clients that passed."""
    carried, phases = 0, {}
    mode = "two-pass" if args.two_pass else "one-pass"
    what = f"{mode} finals"
    if args.streaming_decoder:
        what += f", the {args.streaming_decoder} decoder's streaming pass"
    for clients in sorted(args.steps):
        args.clients = clients
        print(f"{clients} clients ({what}), {len(samples) / rate:.2f} s of audio each")
        figures = report_paced(asyncio.run(run_clients(url, args, samples, rate, paced=True)))
        phases[clients] = figures
        final = figures["final_latency"]
        p95 = final["p95_ms"] if isinstance(final, dict) else float("inf")
        if figures["errors"] or p95 > 1000 * args.max_final_latency:
            break
        carried = clients
    load = "steady" if args.steady else "burst"
    print(
        f"capacity ({what}, {load}): {carried} real-time streams with p95 final "
        f"latency <= {1000 * args.max_final_latency:.0f} ms and no errors"
    )
    return {
        "finals": mode,
        "streaming_decoder": args.streaming_decoder,
        "load": load,
        "capacity": carried,
        "phases": phases,
    }


def spoken(path: Path) -> Path:
    if shutil.which("espeak-ng") is None:
        sys.exit("espeak-ng is not installed: pass --audio FILE")
    subprocess.run(["espeak-ng", "-w", str(path), SENTENCE], check=True, capture_output=True)
    return path


def served_two_pass(url: str, token: str | None) -> bool:
    """Whether the server's model gives two-pass finals by default (its /readyz says)."""
    http = url.replace("ws", "http", 1).rsplit("/v1/", 1)[0]
    request = urllib.request.Request(f"{http}/readyz")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        ready = json.load(response)
    return bool((ready.get("two_pass") or {}).get("default"))


@contextlib.contextmanager
def server(args: argparse.Namespace) -> Iterator[str]:
    """The URL to load: the given one, or a fresh `asr serve` subprocess."""
    if args.url:
        yield args.url
        return
    if not (args.model / "config.json").is_file():
        sys.exit(f"no model bundle at {args.model}: pass --model DIR or --url")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # from the repository root, so the server runs this checkout's code
    command = [sys.executable, "-m", "asr.cli", "serve", "--model", str(args.model.resolve())]
    command += ["--port", str(port), "--max-sessions", str(args.clients + 8), "--log-level"]
    command += ["warning", *args.server_arg]
    process = subprocess.Popen(command, cwd=ROOT)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    sys.exit("the server did not become ready")
                time.sleep(0.2)
        yield f"ws://127.0.0.1:{port}/v1/stream"
    finally:
        process.terminate()
        process.wait(timeout=60)


async def run_clients(
    url: str, args: argparse.Namespace, samples: np.ndarray, rate: int, paced: bool
) -> list[Transcript | BaseException]:
    """Each client's sessions (``args.rounds`` of them, one after another); a client whose
    session fails stops there, with the error as its result."""
    options = SessionOptions(args.two_pass, args.streaming_decoder)
    # the paced starts are spread over one second, or with --steady over one utterance
    spread = len(samples) / rate if args.steady else 1.0

    async def client(i: int) -> list[Transcript]:
        if paced:
            await asyncio.sleep(i * spread / args.clients)
        done = []
        for _ in range(args.rounds):
            frames = file_frames(samples, rate, args.frame_ms, paced=paced)
            done.append(await stream(url, frames, rate, token=args.token, options=options))
        return done

    clients = await asyncio.gather(
        *(client(i) for i in range(args.clients)), return_exceptions=True
    )
    return [r for c in clients for r in ([c] if isinstance(c, BaseException) else c)]


def split(results: list[Transcript | BaseException]) -> tuple[list[Transcript], list[str]]:
    done = [r for r in results if isinstance(r, Transcript)]
    errors = [f"{type(r).__name__}: {r}" for r in results if not isinstance(r, Transcript)]
    return done, errors


def percentiles(name: str, values: list[float]) -> dict[str, float] | None:
    """Print p50 and p95 of ``values`` (seconds) in ms; return them (None: no values)."""
    if not values:
        print(f"  {name:<22} n/a")
        return None
    p50, p95 = np.percentile(np.array(values) * 1000, [50, 95]).tolist()
    print(f"  {name:<22} p50 {p50:7.0f} ms   p95 {p95:7.0f} ms   (n={len(values)})")
    return {"p50_ms": p50, "p95_ms": p95, "n": len(values)}


def report_paced(results: list[Transcript | BaseException]) -> dict[str, object]:
    """Print the paced phase's figures and return them (for --json)."""
    done, errors = split(results)
    print("paced (real time):")
    first = [t.first_result_at - t.first_audio_at for t in done if t.first_result_at]
    first_result = percentiles("time to first result", first)
    final = percentiles("final latency", [t.end_at - t.stop_at for t in done])
    print(f"  errors                 {len(errors)}")
    for error in sorted(set(errors))[:5]:
        print(f"    {error}")
    return {
        "first_result": first_result,
        "final_latency": final,
        "errors": len(errors),
        "error_kinds": sorted(set(errors))[:5],
    }


def report_unpaced(
    results: list[Transcript | BaseException], wall: float, seconds: float
) -> dict[str, object]:
    """Print the unpaced phase's figures and return them (for --json)."""
    done, errors = split(results)
    audio = seconds * len(done)
    rtf = wall / audio if audio else float("nan")
    print("unpaced (as fast as possible):")
    print(
        f"  {audio:.1f} s of audio in {wall:.1f} s: aggregate RTF {rtf:.3f} ({1 / rtf:.1f}x real time)"
    )
    print(f"  errors                 {len(errors)}")
    return {"audio_seconds": audio, "wall_seconds": wall, "rtf": rtf, "errors": len(errors)}


if __name__ == "__main__":
    sys.exit(main())
