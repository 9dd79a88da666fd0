"""Run the streaming recognition server (WebSocket /v1/stream, HTTP /v1/transcribe, browser page at /).

The API key may also come from the ASR_API_KEY environment variable, which
keeps it out of the process list.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
from pathlib import Path
from urllib.parse import unquote_plus

import uvicorn
from fastapi import FastAPI

from asr.config import Config
from asr.ctc_prefix import check_weight
from server.app import create_app
from server.settings import Settings


class DrainingServer(uvicorn.Server):
    """uvicorn closes WebSockets with 1012 on shutdown; flush sessions (finals, end) first."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # stop accepting while the open sessions drain
        app: FastAPI = self.config.app
        await app.state.asr.drain()
        await super().shutdown(sockets)


# one name=value pair of a query string, as a log line quotes a request's path
_QUERY_PAIR = re.compile(r"([?&])([^=&#\s\"]*)=([^&#\s\"]*)")


def redact_token(text: str) -> str:
    """``text`` with the value of every ``token`` query parameter replaced by ``***`` (the
    name as the server decodes it: ``tok%65n`` is a token too)."""
    return _QUERY_PAIR.sub(
        lambda m: f"{m[1]}{m[2]}=***" if unquote_plus(m[2]) == "token" else m[0], text
    )


class RedactTokens(logging.Filter):
    """Browsers pass the API key as ``?token=``, and uvicorn logs every request's path with
    its query (HTTP access lines, WebSocket accepts and rejects): no key reaches a log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_token(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact_token(a) if isinstance(a, str) else a for a in record.args)
        return True


_REDACT_TOKENS = RedactTokens()  # one instance: adding it again (a second server) is a no-op


def build_server(settings: Settings, log_level: str = "info") -> DrainingServer:
    """A uvicorn server for ``settings``; frames up to 4x the app limit reach the app,
    which answers them with a typed ``frame_too_large`` error instead of a bare close."""
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        ws_max_size=4 * settings.max_frame_bytes,
        # liveness is the session's own business (idle_timeout, send_timeout), which ends
        # with a typed error; uvicorn's keepalive would drop a client that does not read
        # with a bare 1011 before either
        ws_ping_interval=None,
        log_level=log_level,
        timeout_graceful_shutdown=int(settings.shutdown_timeout_s) + 5,
    )
    for name in ("uvicorn.access", "uvicorn.error"):  # configured by uvicorn.Config just now
        logging.getLogger(name).addFilter(_REDACT_TOKENS)
    return DrainingServer(config)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = Settings()
    parser.add_argument(
        "--model", type=Path, default=d.model, help=f"model bundle directory (default: {d.model})"
    )
    parser.add_argument("--host", default=d.host)
    parser.add_argument("--port", type=int, default=d.port)
    parser.add_argument("--max-sessions", type=int, default=d.max_sessions)
    parser.add_argument(
        "--max-frame-bytes",
        type=int,
        default=d.max_frame_bytes,
        help="largest binary (audio) frame (default: %(default)s)",
    )
    parser.add_argument(
        "--max-control-bytes",
        type=int,
        default=d.max_control_bytes,
        help="largest text (JSON control) frame (default: %(default)s)",
    )
    parser.add_argument("--max-upload-bytes", type=int, default=d.max_upload_bytes)
    parser.add_argument("--idle-timeout", type=float, default=d.idle_timeout_s, metavar="S")
    parser.add_argument("--max-session", type=float, default=d.max_session_s, metavar="S")
    parser.add_argument(
        "--max-backlog",
        type=float,
        default=d.max_backlog_s,
        metavar="S",
        help="seconds of a session's audio that may wait for the model; a faster sender is "
        "slowed down, not buffered (default: %(default)s)",
    )
    parser.add_argument(
        "--send-timeout",
        type=float,
        default=d.send_timeout_s,
        metavar="S",
        help="a client that leaves its results unread this long is disconnected with "
        "client_too_slow (default: %(default)s)",
    )
    parser.add_argument("--api-key", default=os.environ.get("ASR_API_KEY") or None)
    parser.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="browser origin allowed to stream (repeatable; default: any)",
    )
    parser.add_argument("--batch-size", type=int, default=d.batch_max_size)
    parser.add_argument("--batch-wait-ms", type=float, default=d.batch_max_wait_ms)
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="model processes, each serving its share of the sessions "
        f"(default: one per CPU core, {d.workers} here; 0: the model in the server process)",
    )
    parser.add_argument("--torch-threads", type=int, default=d.torch_threads)
    parser.add_argument("--beam", type=int, help="beam size (default: the bundle's)")
    parser.add_argument(
        "--lm-weight",
        type=float,
        help="shallow fusion with the bundle's lm.npz (default: the bundle's)",
    )
    parser.add_argument(
        "--ctc-weight",
        type=float,
        help="joint scoring with the model's CTC head, 0 <= w < 1 (default: the bundle's)",
    )
    parser.add_argument("--log-level", default="info")


def run(args: argparse.Namespace) -> int:
    if not (args.model / "config.json").is_file():
        raise FileNotFoundError(
            f"no model bundle at {args.model} (expected {args.model / 'config.json'}); "
            "pass --model DIR"
        )
    if args.ctc_weight is not None:  # refused now, not by model processes that then restart
        # the model makes its CTC head exactly when model.ctc_weight > 0
        has_head = Config.load(args.model / "config.json").model.ctc_weight > 0
        check_weight(args.ctc_weight, has_head, "--ctc-weight")
    settings = Settings(
        model=args.model,
        host=args.host,
        port=args.port,
        max_sessions=args.max_sessions,
        max_frame_bytes=args.max_frame_bytes,
        max_control_bytes=args.max_control_bytes,
        max_upload_bytes=args.max_upload_bytes,
        idle_timeout_s=args.idle_timeout,
        max_session_s=args.max_session,
        max_backlog_s=args.max_backlog,
        send_timeout_s=args.send_timeout,
        api_key=args.api_key,
        allowed_origins=args.allow_origin,
        batch_max_size=args.batch_size,
        batch_max_wait_ms=args.batch_wait_ms,
        workers=args.workers,
        torch_threads=args.torch_threads,
        beam=args.beam,
        lm_weight=args.lm_weight,
        ctc_weight=args.ctc_weight,
    )
    build_server(settings, args.log_level).run()
    return 0
