"""Keep every lane's model running: a model process that dies is replaced, with backoff.

The kernel's out-of-memory killer, a crash in native code or an operator's
``kill -9`` can end a model process at any moment. Its lane notices at once
(``Lane.exited``), stops taking sessions, ends the sessions that lived in the
process (``internal_error``) and starts a replacement, which takes sessions
again once it has loaded the model. A replacement that cannot load, or that
dies soon after starting, is not retried in a tight loop: the wait before the
next attempt doubles each time, up to ``restart_backoff_max_s``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time

from prometheus_client import Counter

from server.lanes import ProcessLane
from server.settings import Settings

log = logging.getLogger("server.supervision")


def restart_delay(failures: int, first_s: float, max_s: float) -> float:
    """Seconds to wait before the next start after ``failures`` failed starts in a row."""
    return 0.0 if failures == 0 else min(max_s, first_s * 2 ** (failures - 1))


def describe_exit(code: int | None) -> str:
    """A process's exit code in words, for the log (negative: the signal that ended it)."""
    if code is None:
        return "exited"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


async def supervise(lane: ProcessLane, settings: Settings, restarts: Counter) -> None:
    """Replace the lane's model process whenever it exits; runs until cancelled at shutdown."""
    failures = 0
    while True:
        await lane.exited()
        lived = time.monotonic() - lane.live_since
        log.error(
            "model process %s %s after %.1f s of service; its sessions end",
            lane.pid,
            describe_exit(lane.exitcode),
            lived,
        )
        lane.mark_dead()
        # a process that served a long time was not dying on start: replace it at once
        failures = failures + 1 if lived < settings.restart_backoff_max_s else 0
        while True:
            delay = restart_delay(
                failures, settings.restart_backoff_s, settings.restart_backoff_max_s
            )
            log.info("starting a replacement model process in %.1f s", delay)
            await asyncio.sleep(delay)
            restarts.inc()
            try:
                await lane.load()
                break
            except Exception as err:  # cannot load the model, or died while loading
                failures += 1
                log.error("the replacement model process failed to start: %s", err)
        log.info("model process %s is serving in place of the dead one", lane.pid)
