"""`asr serve`: a clear error without a model, and a real process that shuts down gracefully."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_serve_without_default_model_names_the_missing_path(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "asr.cli", "serve"],
        cwd=tmp_path,  # no models/default here
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert "models/default" in done.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(process: subprocess.Popen, port: int) -> None:
    """Poll /readyz until the server has loaded its model (failing if the process dies)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                assert json.loads(r.read())["status"] == "ready"
                return
        except (urllib.error.URLError, ConnectionError):
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.2)


def test_serve_runs_and_stops_on_sigterm(tiny_bundle):
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "asr.cli",
            "serve",
            "--model",
            str(tiny_bundle),
            "--port",
            str(port),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_ready(process, port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
            assert b"Start microphone" in page.read()
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0]
    # uvicorn re-raises the signal once it has shut down cleanly
    assert process.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output


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
