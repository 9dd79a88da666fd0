"""The streaming pass spelled by Whisper's decoder (``decode.streaming_decoder`` "whisper").

The session's segments end at its endpoints (a pause restart, the length limit, trailing
silence, the end of the stream); within one, the streaming-student states go, as they
arrive, to a :class:`~asr.speller.Speller`, whose learnt monotonic policy lets each of
Whisper's tokens out once its audio is in. Its tokens are the session's partials and
one-pass finals. The session's LSTM search still runs beside it, but its end-of-sentence
does not end a spelled segment: it cuts sentences early, and Whisper's decoder reading
from the middle of a sentence loses it. It only says whether the segment held words
(:attr:`SpelledPass.heard`).

Endpoints fall on encoder states whatever the chunking, and the speller's own boundaries
do not depend on how its states were handed over: streaming gives what offline decoding
gives.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from asr.speller import Policy, Speller, SpellerModel, SpellerOptions


class SpelledPass:
    """One stream's segments spelled by Whisper's decoder; states counted in the streaming
    student's states from the stream's start (``per_state`` of them make one LAS state)."""

    def __init__(
        self, model: SpellerModel, policy: Policy, per_state: int, options: SpellerOptions
    ) -> None:
        self.model = model
        self.policy = policy
        self.options = options
        self.per_state = per_state
        self._unread = torch.zeros(0, 0)  # states not given to the speller yet
        self._first_unread = 0  # the index of its first row
        self._start = 0  # where the open segment begins
        self._speller = Speller(model, policy, options)
        self.heard = False  # whether the first pass heard words in the open segment

    @property
    def start(self) -> int:
        """The LAS state at which the open segment begins."""
        return self._start // self.per_state

    @property
    def tokens(self) -> list[int]:
        """The open segment's tokens so far."""
        return list(self._speller.tokens)

    @property
    def boundaries(self) -> list[int]:
        """Each token's boundary: the states (from the stream's start) it was read from."""
        return [self._start + b for b in self._speller.boundaries]

    def add(self, states: np.ndarray | Tensor) -> None:
        """The student's next states [n, d] of the stream, in order."""
        states = torch.as_tensor(states, dtype=torch.float32)
        if len(states):
            self._unread = torch.cat([self._unread, states]) if self._unread.numel() else states

    def read_until(self, las_state: int) -> bool:
        """Give the speller the states of the LAS states before ``las_state``; whether its
        tokens changed (new ones let out, or the segment read again: ``SpellerOptions.stall``)."""
        states = self._take(las_state * self.per_state)
        if not len(states):
            return False
        before = self._speller.tokens
        self._speller.accept(states)
        return self._speller.tokens != before

    def close(self, las_state: int) -> tuple[list[int], list[int]]:
        """End the open segment before LAS state ``las_state``: its tokens and their
        boundaries; the next segment begins there. Its last states are scanned as any others
        (so a segment closed within a chunk reads as one closed between chunks), then every
        token still to come is read from its whole memory, unless the segment said nothing
        so far and the first pass heard nothing in it either: Whisper's decoder, made to
        write, writes "you" for a pause."""
        self.read_until(las_state)
        if self.heard or self._speller.tokens:
            self._speller.finish()
        self.heard = False
        tokens, boundaries = self.tokens, self.boundaries
        self._start = las_state * self.per_state
        self._speller = Speller(self.model, self.policy, self.options)
        return tokens, boundaries

    def text(self, tokens: list[int]) -> str:
        return self.model.vocabulary.decode(tokens).strip()

    def pieces(self, tokens: list[int]) -> list[str]:
        return self.model.vocabulary.pieces(tokens)

    def _take(self, before: int) -> Tensor:
        """The unread states before index ``before`` (removed from the unread)."""
        count = max(0, min(before - self._first_unread, len(self._unread)))
        taken, self._unread = self._unread[:count], self._unread[count:]
        self._first_unread += count
        return taken
