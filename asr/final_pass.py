"""Segments waiting for their final from Whisper's decoder, written in batches: within the
streaming step that closed them, or beside the steps on a thread of their own.

A two-pass final costs the full-attention teacher over the segment and Whisper's decoder
writing it: a few hundred milliseconds for a 10 s segment. Written within a step, that
time holds back every other session stepped in the same batch (their partials wait);
written beside the steps (:class:`FinalsInBackground`, as the server's model processes do),
the streaming steps go on and each session gets its finals with one of its next steps.
Either way the segments that are waiting together are decoded as one padded batch.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from asr.config import WhisperFinalsConfig
from asr.events import Event
from asr.whisper_finals import FinalText, WhisperFinals

if TYPE_CHECKING:
    from asr.streaming import StreamingSession


@dataclass
class PendingFinal:
    """A closed segment whose final Whisper's decoder writes (the segment number is taken
    when it closes, so finals keep their order however late they come)."""

    session: StreamingSession
    start: int  # the segment's encoder states [start, end)
    end: int
    number: int
    mel: torch.Tensor  # the segment's log-mel frames
    fallback: Event  # the first pass's final, given where Whisper's text fails its loop check

    @property
    def options(self) -> WhisperFinalsConfig:
        return self.session.config.decode.whisper_finals


def written(pending: list[PendingFinal]) -> dict[int, Event | Exception]:
    """The final of each pending segment (by ``id``): those of one final pass and one set of
    options in one batch; if a batch fails, its segments are written one by one, and a
    segment that still fails gets its error (its session's alone)."""
    out: dict[int, Event | Exception] = {}

    def batch_of(p: PendingFinal) -> tuple[int, tuple[Any, ...]]:
        return id(p.session._whisper), dataclasses.astuple(p.options)

    for key in dict.fromkeys(batch_of(p) for p in pending):
        mine = [p for p in pending if batch_of(p) == key]
        finals, options = mine[0].session._whisper, mine[0].options
        assert finals is not None
        try:
            texts: list[FinalText | Exception] = list(
                finals.transcribe([p.mel for p in mine], options)
            )
        except Exception:
            texts = [_one_final(finals, p.mel, options) for p in mine]
        for p, text in zip(mine, texts):
            out[id(p)] = text if isinstance(text, Exception) else p.session._written(p, text)
    return out


def _one_final(
    finals: WhisperFinals, mel: torch.Tensor, options: WhisperFinalsConfig
) -> FinalText | Exception:
    try:
        return finals.transcribe([mel], options)[0]
    except Exception as err:
        return err


def write_finals(
    decoded: dict[int, list[Event | PendingFinal]],
) -> dict[int, list[Event] | Exception]:
    """Each session's events (by its index) with its pending finals written in their place,
    all in one batch now; a final that failed is its session's outcome."""
    finals = written(
        [e for events in decoded.values() for e in events if isinstance(e, PendingFinal)]
    )
    return {
        k: _outcome([finals[id(e)] if isinstance(e, PendingFinal) else e for e in events])
        for k, events in decoded.items()
    }


def _outcome(events: list[Event | Exception]) -> list[Event] | Exception:
    failed = [e for e in events if isinstance(e, Exception)]
    return failed[0] if failed else [e for e in events if isinstance(e, Event)]


class FinalsInBackground:
    """Writes pending finals on a thread of its own, all that are waiting in one batch.

    :meth:`exchange` hands over a session's new pending segments and gives back the finals
    written for it since its last step, in segment order, ahead of the step's own events;
    at a session's finish it waits until all of its finals are written. A session's results
    live on the session, so a session dropped mid-way leaves nothing behind here."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[PendingFinal] = queue.SimpleQueue()
        self._done = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="asr-finals", daemon=True)
        self._thread.start()

    def exchange(
        self, session: StreamingSession, events: list[Event | PendingFinal], finishing: bool
    ) -> list[Event] | Exception:
        pending = [e for e in events if isinstance(e, PendingFinal)]
        with self._done:
            session._finals_waiting += len(pending)
        for p in pending:
            self._queue.put(p)
        with self._done:
            if finishing:
                self._done.wait_for(lambda: session._finals_waiting == 0)
            ready, session._finals_written = session._finals_written, []
        return _outcome([*ready, *(e for e in events if isinstance(e, Event))])

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get())
            with torch.inference_mode():
                finals = written(batch)
            with self._done:
                for p in batch:
                    p.session._finals_written.append(finals[id(p)])
                    p.session._finals_waiting -= 1
                self._done.notify_all()
