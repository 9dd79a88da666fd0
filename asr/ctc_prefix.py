"""CTC prefix scores for the online search: joint CTC/attention decoding, streaming.

The model's CTC head (trained alongside the attention decoder, ``model.ctc_weight``) and
the attention decoder err differently: attention reads a word it half heard as a
plausible spelling and may run on past the speech; CTC scores every frame and accounts
for all of them. For each candidate token ``c`` of a hypothesis ``h`` the search adds
log P(the CTC labelling of the frames so far starts with ``h + c``), from the prefix
scores of Watanabe et al. (2017), less the same for CTC's likeliest ``c``, weighted by
``decode.ctc_weight`` against the attention decoder's log-probability. CTC thus reorders
the tokens attention might say next and leaves end-of-sentence to attention: over a
horizon that ends at the state the step selected, CTC has often not yet seen the next
token, and its probability that the labelling ends there would cut sentences short. A
hypothesis that CTC finds impossible (more tokens than states so far) gets no CTC
preference among its next tokens.

Streaming: a step is scored over the segment's encoder states up to the one its
hypothesis selected, which exists when the step is taken, so joint scoring adds no
latency, and offline and streaming decoding (the same steps over the same states) score
alike. Each hypothesis keeps the CTC forward variables of all its prefixes at the last
scored state, and the full history of its own; a new state costs one vector step over the
prefixes, a new token one scan over the history, a step's scores a sum over the states
where the hypothesis may end (the others are more than e^-50 below the most likely).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asr.model import EOS_ID
from asr.tokenizer import BLANK_ID

LOG_ZERO = -1e10  # log of an impossible event, finite so that sums stay ordered
NEGLIGIBLE = 50.0  # states whose ending probability is this far (in log) below the best


def check_weight(weight: float, has_head: bool, name: str) -> None:
    """The one check of a joint CTC weight, wherever it is set (``name``: as its user set
    it, e.g. --ctc-weight or decode.ctc_weight); ``has_head``: the model has a CTC head."""
    if not 0 <= weight < 1:
        raise ValueError(f"{name} must be in [0, 1), got {weight}")
    if weight > 0 and not has_head:
        raise ValueError(
            f"{name}: the model has no CTC head (it was trained with model.ctc_weight 0)"
        )


def _accumulate(start: float, steps: np.ndarray, gains: np.ndarray) -> np.ndarray:
    """``x[t] = logaddexp(x[t-1], steps[t]) + gains[t]`` with ``x[-1] = start``, all at once."""
    offsets = np.cumsum(gains)
    shifted = np.concatenate([[start], steps - np.concatenate([[0.0], offsets[:-1]])])
    return np.logaddexp.accumulate(shifted)[1:] + offsets


@dataclass
class PrefixState:
    """CTC forward variables of one hypothesis over its segment's first ``frames`` states.

    ``column_n``/``column_b`` [L + 1]: for each prefix of the hypothesis (row 0 the empty
    one), the log-probability that the states so far label exactly that prefix, ending in
    its last token (n) or in blank (b). ``history_n``/``history_b`` [frames]: the same for
    the whole hypothesis at every state so far.
    """

    tokens: list[int]
    column_n: np.ndarray
    column_b: np.ndarray
    history_n: np.ndarray
    history_b: np.ndarray

    @property
    def frames(self) -> int:
        return len(self.history_b)


class CTCPrefixScorer:
    """The CTC head's log-probabilities over one segment, and prefix scores read from them."""

    def __init__(self) -> None:
        self.log_probs = np.zeros((0, 0))  # [states of the segment so far, V]

    def append(self, log_probs: np.ndarray) -> None:
        """Add the CTC log-probabilities [n, V] of the segment's next encoder states."""
        if len(self.log_probs) == 0:
            self.log_probs = log_probs.astype(np.float64)
        else:
            self.log_probs = np.concatenate([self.log_probs, log_probs.astype(np.float64)])

    def drop_before(self, count: int) -> None:
        """A new segment starts ``count`` states into this one's."""
        self.log_probs = self.log_probs[count:]

    @staticmethod
    def initial() -> PrefixState:
        """The empty hypothesis before any state."""
        empty = np.zeros(0)
        return PrefixState([], np.full(1, LOG_ZERO), np.zeros(1), empty, empty)

    def extend(self, state: PrefixState, frames: int) -> None:
        """Bring ``state``'s forward variables to the segment's first ``frames`` states."""
        first = state.frames
        if frames <= first:
            return
        lp = self.log_probs
        tokens = np.asarray(state.tokens, dtype=np.int64)
        # a token repeating the one before it needs a blank between them
        repeat = np.zeros(len(tokens), dtype=bool)
        repeat[1:] = tokens[1:] == tokens[:-1]
        column_n, column_b = state.column_n, state.column_b
        new_n, new_b = np.empty(frames - first), np.empty(frames - first)
        for t in range(first, frames):
            if t == 0:  # row 0 is blank so far; row 1 may begin with its token
                n = np.full(len(tokens) + 1, LOG_ZERO)
                b = np.full(len(tokens) + 1, LOG_ZERO)
                b[0] = lp[0, BLANK_ID]
                if len(tokens):
                    n[1] = lp[0, tokens[0]]
            else:
                before = np.where(repeat, column_b[:-1], np.logaddexp(column_b[:-1], column_n[:-1]))
                n = np.empty_like(column_n)
                n[0] = LOG_ZERO
                n[1:] = np.logaddexp(column_n[1:], before) + lp[t, tokens]
                b = np.logaddexp(column_b, column_n) + lp[t, BLANK_ID]
            column_n, column_b = n, b
            new_n[t - first], new_b[t - first] = n[-1], b[-1]
        state.column_n, state.column_b = column_n, column_b
        state.history_n = np.concatenate([state.history_n, new_n])
        state.history_b = np.concatenate([state.history_b, new_b])

    def scores(self, state: PrefixState, frames: int) -> np.ndarray:
        """[V] log P(the labelling of the first ``frames`` states starts with ``state``'s
        hypothesis plus each token), less the largest of them (end-of-sentence: 0, left to
        attention; blank: impossible)."""
        self.extend(state, frames)
        lp = self.log_probs[:frames]
        vocab = lp.shape[1]
        # the hypothesis has ended by state t - 1, so a new token may begin at t
        ended = np.logaddexp(state.history_n[:-1], state.history_b[:-1])
        keep = np.flatnonzero(ended >= ended.max() - NEGLIGIBLE) if len(ended) else np.zeros(0, int)
        terms = ended[keep][:, None] + lp[keep + 1]
        if state.tokens:  # its last token again must come after a blank
            last = state.tokens[-1]
            terms[:, last] = state.history_b[keep] + lp[keep + 1, last]
            found = np.logaddexp.reduce(terms, axis=0) if len(keep) else np.full(vocab, LOG_ZERO)
        else:  # or begin at the first state
            found = np.logaddexp.reduce(np.vstack([lp[:1], terms]), axis=0)
        found[found < LOG_ZERO / 2] = LOG_ZERO  # impossible, however it was reached
        found[BLANK_ID] = -np.inf
        found[EOS_ID] = -np.inf
        found -= found.max()
        found[BLANK_ID] = LOG_ZERO
        found[EOS_ID] = 0.0
        return found

    def child(self, state: PrefixState, token: int) -> PrefixState:
        """``state``'s hypothesis plus ``token``, over the states ``state`` has seen."""
        frames = state.frames
        lp = self.log_probs[:frames]
        if state.tokens and state.tokens[-1] == token:
            ended = state.history_b[:-1]
        else:
            ended = np.logaddexp(state.history_n[:-1], state.history_b[:-1])
        start = 0.0 if not state.tokens else LOG_ZERO  # the first token may begin at state 0
        n = _accumulate(LOG_ZERO, np.concatenate([[start], ended]), lp[:, token])
        b = _accumulate(LOG_ZERO, np.concatenate([[LOG_ZERO], n[:-1]]), lp[:, BLANK_ID])
        return PrefixState(
            [*state.tokens, token],
            np.concatenate([state.column_n, n[-1:]]),
            np.concatenate([state.column_b, b[-1:]]),
            n,
            b,
        )
