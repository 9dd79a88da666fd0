"""Run the server on a background thread bound to a free loopback port (tests, embedding)."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import torch

from server.cli import build_server
from server.settings import Settings


class LiveServer:
    """A real uvicorn (real sockets, real WebSocket stack) that lives for a ``with`` block."""

    def __init__(self, settings: Settings, ready_timeout_s: float = 120.0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))  # the kernel picks a free port; no race with others
        port = self.sock.getsockname()[1]
        self.settings = dataclasses.replace(settings, host="127.0.0.1", port=port)
        self.server = build_server(self.settings, log_level="warning")
        self.app = self.server.config.app
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.ready_timeout_s = ready_timeout_s

    def url(self, path: str = "", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.settings.port}{path}"

    def get_json(self, path: str) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(self.url(path), timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def __enter__(self) -> LiveServer:
        self._torch_threads = torch.get_num_threads()  # the server sets it process-wide
        self.thread.start()
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.server.started:
                status, body = self.get_json("/readyz")
                if status == 200:
                    return self
                if body.get("status") == "error":
                    break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server did not become ready: {self.get_json('/readyz')}")

    def stop(self) -> None:
        """Graceful shutdown: open sessions are flushed before the sockets close."""
        self.server.should_exit = True
        self.thread.join(timeout=60)
        torch.set_num_threads(self._torch_threads)  # leave the host process as it was

    def __exit__(self, *exc: object) -> None:
        self.stop()
