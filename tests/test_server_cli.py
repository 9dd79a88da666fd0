"""`asr serve`: a clear error without a model, and a real process that shuts down gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from asr.audio import read_audio
from asr.bundle import load_model
from server.client import file_frames, stream
from server.live import LiveServer
from server.settings import Settings
from tests.conftest import build_bundle
from tests.test_server_support import offline_text, s16le, speechlike

REPO = Path(__file__).resolve().parents[1]


def test_serve_without_a_model_names_the_missing_path(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "asr.cli", "serve", "--model", "models/none"],
        cwd=tmp_path,  # no models/none here
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert "models/none" in done.stderr and "Traceback" not in done.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(process: subprocess.Popen, port: int, log: IO[str]) -> None:
    """Poll /readyz until the server has loaded its model (failing if the process dies)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                assert json.loads(r.read())["status"] == "ready"
                return
        except (urllib.error.URLError, ConnectionError):
            assert process.poll() is None, log.seek(0) or log.read()
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.2)


@dataclass
class Served:
    """A running `asr serve` process, its port, and (once stopped) everything it printed."""

    process: subprocess.Popen
    port: int
    output: str = ""


@contextlib.contextmanager
def serve_process(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, own_group: bool = False
):
    """Run ``args`` (an `asr serve` command line) with ``--port`` a free port until it is
    ready; on exit send SIGTERM, as an orchestrator would, and keep its output.
    ``own_group``: in a process group of its own (its pid is the group's id), as a
    terminal or an orchestrator runs it, so that the test may signal the whole group.

    The output goes to a file, not a pipe: a long-running server would block on a full
    pipe that nobody reads."""
    port = free_port()
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [*args, "--port", str(port)],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            process_group=0 if own_group else None,
        )
        served = Served(process, port)
        try:
            wait_ready(process, port, log)
            yield served
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
            log.seek(0)
            served.output = log.read()


def test_serve_runs_and_stops_on_sigterm(tiny_bundle):
    args = [sys.executable, "-m", "asr.cli", "serve", "--model", str(tiny_bundle)]
    with serve_process(args, REPO) as served:
        with urllib.request.urlopen(f"http://127.0.0.1:{served.port}/", timeout=5) as page:
            assert b"Start microphone" in page.read()
    # uvicorn re-raises the signal once it has shut down cleanly
    assert served.process.returncode in (0, -signal.SIGTERM), served.output
    assert "Application shutdown complete" in served.output


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (its model processes, the multiprocessing helpers)."""
    found = []
    for path in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(c) for c in path.read_text().split()]
    return found


def gone(pids: list[int], timeout: float = 10.0) -> bool:
    """Whether every process in ``pids`` has exited (and been reaped) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() for pid in pids):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_the_process_group_flushes_open_sessions(tiny_bundle, sig):
    """Ctrl-C at a terminal (SIGINT) or a SIGTERM to the process group reaches the model
    processes too: they ignore it, so the server flushes the open session (its finals, end
    with reason shutdown, close 1001), then stops its model processes and exits."""
    sent = speechlike(1.5, seed=1)[:16000]
    args = [sys.executable, "-m", "asr.cli", "serve", "--model", str(tiny_bundle)]

    async def session(served: Served) -> tuple[list[dict], int | None]:
        async with connect(f"ws://127.0.0.1:{served.port}/v1/stream") as ws:
            await ws.send(json.dumps({"type": "start", "sample_rate": 16000}))
            assert json.loads(await ws.recv())["type"] == "ready"
            await ws.send(s16le(sent))
            await asyncio.sleep(0.3)
            os.killpg(served.process.pid, sig)
            messages = []
            with contextlib.suppress(ConnectionClosed):
                while True:
                    messages.append(json.loads(await ws.recv()))
            return messages, ws.close_code

    with serve_process([*args, "--workers", "1"], REPO, own_group=True) as served:
        models = children(served.process.pid)
        messages, close = asyncio.run(session(served))
        served.process.wait(timeout=60)
    assert messages[-1] == {"type": "end", "reason": "shutdown"}, (messages, served.output)
    assert close == 1001
    finals = [m["text"] for m in messages if m["type"] == "final" and m["text"]]
    assert " ".join(finals) == offline_text(tiny_bundle, sent, 16000)
    assert "its sessions end" not in served.output  # no model process died under the server
    assert "Traceback" not in served.output, served.output
    assert models and gone(models)


def test_model_processes_end_with_a_killed_server(tiny_bundle):
    """Model processes that ignore SIGINT and SIGTERM still go when the server is killed
    outright (kill -9): their pipe to it closes, and they leave no orphans."""
    args = [sys.executable, "-m", "asr.cli", "serve", "--model", str(tiny_bundle)]
    with serve_process([*args, "--workers", "1"], REPO, own_group=True) as served:
        models = children(served.process.pid)
        served.process.kill()
        served.process.wait(timeout=60)
    assert models and gone(models)


def test_a_host_that_exits_without_stopping_the_server_does_not_hang(tiny_bundle):
    """An embedding process that ends without stopping its server (or one whose app never shuts
    down: a second Ctrl-C) exits: multiprocessing's exit handler would SIGTERM the model process,
    which ignores it, and wait for it forever; the lane closes its pipe first."""
    script = (
        "from server.live import LiveServer\n"
        "from server.settings import Settings\n"
        "if __name__ == '__main__':\n"
        f"    LiveServer(Settings(model={str(tiny_bundle)!r}, workers=1)).__enter__()\n"
        "    print('ready', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout == "ready\n", done.stderr


def test_cli_lists_every_command_and_imports_only_the_one_it_runs():
    """`asr --help` lists every subcommand from its module's docstring; building `serve`
    imports no training module (the server image has none), `train --help` still works."""
    probe = (
        "import sys\n"
        "from asr.cli import COMMANDS, build_parser\n"
        "help = build_parser().format_help()\n"
        "build_parser('serve')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'training' and '.' in m))\n"
        "print(all(name in help for name in COMMANDS))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.splitlines() == ["[]", "True"], done.stderr
    train = subprocess.run(
        [sys.executable, "-m", "asr.cli", "train", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert train.returncode == 0 and "--resume" in train.stdout


@pytest.mark.parametrize(
    ("weight", "message"),
    [("1.0", r"--ctc-weight must be in \[0, 1\)"), ("0.3", "has no CTC head")],
)
def test_serve_refuses_a_ctc_weight_the_model_cannot_take(tiny_bundle, weight, message):
    """Refused before any model process starts (tiny_bundle was made without a CTC head)."""
    done = subprocess.run(
        [sys.executable, "-m", "asr.cli", "serve", "--model", str(tiny_bundle)]
        + ["--ctc-weight", weight],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert re.search(message, done.stderr) and "Traceback" not in done.stderr


def test_serve_ctc_weight_reaches_the_model_processes(tmp_path, speech_dir):
    """Sessions of `asr serve --ctc-weight` decode as offline transcription with that weight."""
    bundle = build_bundle(tmp_path / "ctc", speech_dir, overrides=["model.ctc_weight=0.5"])
    samples, rate = read_audio(speech_dir / "utt00.wav")
    recognizer = load_model(bundle)
    recognizer.set_search(ctc_weight=0.5)
    expected = recognizer.transcribe(samples, rate)
    recognizer.set_search(ctc_weight=0.0)
    assert recognizer.transcribe(samples, rate) != expected  # the weight matters here
    with LiveServer(Settings(model=bundle, workers=1, ctc_weight=0.5)) as live:
        got = asyncio.run(
            stream(live.url("/v1/stream", "ws"), file_frames(samples, rate, paced=False), rate)
        )
    assert got.text == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-backlog", "nan"], "max_backlog_s must be a positive finite number, got nan"),
        (["--idle-timeout", "nan"], "idle_timeout_s must be a positive finite number, got nan"),
        (["--max-session", "inf"], "max_session_s must be a positive finite number, got inf"),
        (["--batch-wait-ms", "nan"], "batch_max_wait_ms must be a finite number >= 0, got nan"),
        (["--batch-wait-ms", "inf"], "batch_max_wait_ms must be a finite number >= 0, got inf"),
        (["--port", "99999"], "port must be in 0..65535"),
        (["--port", "-1"], "port must be in 0..65535"),
        (["--beam", "0"], "--beam must be >= 1, got 0"),
        (["--lm-weight", "nan"], "--lm-weight must be a finite number >= 0, got nan"),
        (["--lm-weight", "-1"], "--lm-weight must be a finite number >= 0, got -1.0"),
    ],
)
def test_serve_refuses_settings_it_cannot_run_with(tiny_bundle, args, message):
    """Refused at startup with the reason, before any model process starts or port opens."""
    done = subprocess.run(
        [sys.executable, "-m", "asr.cli", "serve", "--model", str(tiny_bundle), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_serve_keeps_the_api_key_out_of_its_log(tiny_bundle):
    """Browsers send the key as ?token=: uvicorn's access lines, HTTP and WebSocket, show
    the parameter with its value redacted."""
    key = "sekrit-key-123"
    args = [sys.executable, "-m", "asr.cli", "serve", "--model", str(tiny_bundle)]
    with serve_process([*args, "--workers", "0", "--api-key", key], REPO) as served:
        base = f"127.0.0.1:{served.port}"
        with urllib.request.urlopen(f"http://{base}/readyz?token={key}", timeout=5) as r:
            assert r.status == 200

        async def session(query: str) -> None:
            async with connect(f"ws://{base}/v1/stream?{query}") as ws:
                await ws.send(json.dumps({"type": "start", "sample_rate": 16000}))
                assert json.loads(await ws.recv())["type"] == "ready"

        asyncio.run(session(f"token={key}"))
        asyncio.run(session(f"sample_rate=1&tok%65n={key}"))  # the name, percent-encoded
    assert key not in served.output, served.output
    assert re.search(r'"GET /readyz\?token=\*\*\* HTTP/1\.1" 200', served.output), served.output
    assert '"WebSocket /v1/stream?token=***" [accepted]' in served.output, served.output
    assert '"WebSocket /v1/stream?sample_rate=1&tok%65n=***" [accepted]' in served.output
