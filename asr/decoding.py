"""Online search with hard monotonic attention: one code path for offline and streaming decoding.

:class:`SegmentSearch` decodes one stream. Encoder states are appended as they
arrive; each hypothesis scans them from its persistent pointer and a token is
emitted as soon as the state that selects it exists. When a scan runs off the
end of the states that exist, the search waits for more. Greedy search is beam
search with one hypothesis. Offline decoding feeds the same object all states
of an utterance, so streaming and offline results agree token for token.

Endpointing: a segment ends when the best hypothesis emits end-of-sentence (if
``endpoint_on_eos``), when the memory is complete and a scan finds nothing
(the paper's "no state chosen"), or when the caller forces it (trailing
silence, maximum segment length). The decoder is then reset and the next
segment starts at the state where the last one ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from asr.attention import MonotonicAttention, SoftmaxAttention
from asr.config import DecodeConfig
from asr.ctc_prefix import CTCPrefixScorer, PrefixState, check_weight
from asr.lm import TokenLM
from asr.model import EOS_ID, DecoderState, Seq2Seq


@dataclass
class Segment:
    """A finished segment: token ids and the encoder-state span it covers."""

    tokens: list[int]
    positions: list[int]  # selected encoder state per token (absolute index; -1: none)
    start: int  # first encoder state of the segment
    end: int  # encoder state after the last one of the segment


@dataclass
class _Beam:
    """N live hypotheses, all at the same output step."""

    state: DecoderState
    tokens: list[list[int]]
    positions: list[list[int]]
    # numpy, not tensors: a step's bookkeeping is a handful of numbers, where each torch
    # call would cost more in dispatch than in arithmetic
    scores: np.ndarray  # [N] float32 log-probabilities
    pointer: np.ndarray  # [N] absolute index the next scan starts from
    repeats: np.ndarray  # [N] tokens already selected at ``pointer``
    # the step in progress (its query exists, its scans may wait for memory)
    pending: tuple[Tensor, list[Tensor], list[Tensor]] | None = None
    # the step's query as the selection energy projects it
    selector: Tensor | None = None
    scan_position: list[int] = field(default_factory=list)  # absolute, per hypothesis
    found: list[int] = field(default_factory=list)  # absolute state chosen so far (-1: none)
    selected: np.ndarray | None = None  # [N] the step's choices, once the step can be taken
    evaluations: int = 0
    prefixes: list[PrefixState] | None = None  # [N] CTC prefix states, with decode.ctc_weight


@dataclass
class _Memory:
    """Encoder states and their projected keys, kept from ``offset`` on."""

    states: Tensor
    keys: Tensor
    offset: int = 0
    total: int = 0  # states received so far (absolute)

    def append(self, states: Tensor, keys: Tensor) -> None:
        self.states = torch.cat([self.states, states])
        self.keys = torch.cat([self.keys, keys])
        self.total += states.shape[0]

    def drop_before(self, index: int) -> None:
        cut = index - self.offset
        if cut > 0:
            self.states = self.states[cut:]
            self.keys = self.keys[cut:]
            self.offset = index


@dataclass
class SegmentSearch:
    """Incremental hard-attention search over one stream (see module docstring)."""

    model: Seq2Seq
    cfg: DecodeConfig
    lm: TokenLM | None = None
    memory: _Memory = field(init=False)
    beam: _Beam = field(init=False)
    segment_start: int = field(init=False, default=0)
    evaluations: int = field(init=False, default=0)
    _direction: Tensor | None = field(init=False, default=None)
    _ctc: CTCPrefixScorer | None = field(init=False, default=None)  # the segment's CTC

    def __post_init__(self) -> None:
        if self.cfg.beam_size < 1 or self.cfg.max_tokens < 1 or self.cfg.max_tokens_per_state < 1:
            raise ValueError(
                "decode.beam_size, max_tokens and max_tokens_per_state must be >= 1, got "
                f"{self.cfg.beam_size}, {self.cfg.max_tokens}, {self.cfg.max_tokens_per_state}"
            )
        if self.cfg.lm_weight < 0:
            raise ValueError(f"decode.lm_weight must be >= 0, got {self.cfg.lm_weight}")
        if self.cfg.lm_weight > 0 and self.lm is None:
            raise ValueError(
                "decode.lm_weight needs a language model: the bundle has no lm.npz (see `asr lm`)"
            )
        check_weight(self.cfg.ctc_weight, self.model.ctc is not None, "decode.ctc_weight")
        if self.cfg.ctc_weight > 0:
            self._ctc = CTCPrefixScorer()
        attention = self.model.decoder.attention
        dim = self.model.cfg.encoder.units
        self.memory = _Memory(torch.zeros(0, dim), attention.keys(torch.zeros(0, dim)))
        # the selection energy's direction: the weights' alone, so once per search
        self._direction = (
            attention.energy.direction() if isinstance(attention, MonotonicAttention) else None
        )
        self.beam = self._fresh_beam(0)

    # -- public ---------------------------------------------------------------
    @property
    def retained_states(self) -> int:
        return self.memory.states.shape[0]

    @property
    def states_seen(self) -> int:
        return self.memory.total

    @property
    def undecided_from(self) -> int:
        """The first state the segment's hypotheses may still select. The segment ends where
        a selection (of end-of-sentence) falls, or after all memory, so the states before
        this one belong to it whatever the audio to come says."""
        beam = self.beam
        if beam.pending is not None:
            return min(beam.scan_position)
        return int(beam.pointer.min())

    def append(self, states: Tensor, keys: Tensor | None = None) -> None:
        """Add encoder states [n, D] and their projected ``keys`` (projected here if not given:
        a second search over the same states takes the first one's)."""
        if states.shape[0]:
            if keys is None:
                keys = self.model.decoder.attention.keys(states)
            self.memory.append(states, keys)
            if self._ctc is not None:
                assert self.model.ctc is not None
                with torch.no_grad():
                    log_probs = torch.log_softmax(self.model.ctc(states), dim=-1)
                self._ctc.append(log_probs.numpy())

    def advance(self, complete: bool = False) -> Segment | None:
        """Decode as far as the memory allows; the segment if it ended (None: waiting for
        memory, and :meth:`stable_prefix` says what the segment holds so far). At most one
        segment ends per call, so callers loop while a segment comes back."""
        while True:
            outcome = self._step(complete)
            if outcome is None:  # waiting for memory
                return None
            if isinstance(outcome, Segment):
                return outcome

    def end_segment(self) -> Segment | None:
        """Force the current segment to end here (trailing silence, length limit)."""
        while True:
            outcome = self._step(complete=True)
            if isinstance(outcome, Segment):
                return outcome if outcome.tokens else None

    @property
    def best_tokens(self) -> list[int]:
        """Tokens of the best live hypothesis of the current segment (may still change)."""
        return list(self.beam.tokens[0])

    @property
    def best_positions(self) -> list[int]:
        """The state that selected each token of :attr:`best_tokens`."""
        return list(self.beam.positions[0])

    def stable_prefix(self) -> list[int]:
        """The segment's tokens every live hypothesis agrees on."""
        tokens = self.beam.tokens
        prefix = tokens[0]
        for other in tokens[1:]:
            n = 0
            while n < min(len(prefix), len(other)) and prefix[n] == other[n]:
                n += 1
            prefix = prefix[:n]
        return list(prefix)

    # -- the search -------------------------------------------------------------
    def _fresh_beam(self, start: int) -> _Beam:
        return _Beam(
            state=self.model.decoder.initial_state(1),
            tokens=[[]],
            positions=[[]],
            scores=np.zeros(1, np.float32),
            pointer=np.full(1, start),
            repeats=np.zeros(1, np.int64),
            prefixes=None if self._ctc is None else [CTCPrefixScorer.initial()],
        )

    def _step(self, complete: bool) -> Segment | None | bool:
        """One output step for the whole beam: None = wait, Segment = ended, True = stepped."""
        beam = self.beam
        decoder = self.model.decoder
        attention = decoder.attention
        if beam.pending is None:
            beam.pending = decoder.query(beam.state)
            if isinstance(attention, MonotonicAttention):
                energy = attention.energy
                beam.selector = energy.query(beam.pending[0])
            # A state may select at most ``max_tokens_per_state`` tokens in a row.
            limit = self.cfg.max_tokens_per_state
            beam.scan_position = [
                p + (r >= limit) for p, r in zip(beam.pointer.tolist(), beam.repeats.tolist())
            ]
            beam.found = [-1] * len(beam.scan_position)
        query, hs, cs = beam.pending
        memory = self.memory

        if isinstance(attention, SoftmaxAttention):
            if not complete:
                return None
            states = memory.states[self.segment_start - memory.offset :]
            if states.shape[0] == 0:
                return self._close(None)
            keys = memory.keys[self.segment_start - memory.offset :]
            context = attention.full_context(query, states, keys)
            beam.selected = np.full_like(beam.pointer, memory.total - 1)
        else:
            assert isinstance(attention, MonotonicAttention)
            todo = [n for n, at in enumerate(beam.found) if at < 0]
            if todo:
                assert beam.selector is not None and self._direction is not None
                projected = beam.selector
                offset = memory.offset
                found, stops, evaluations = attention.walk(
                    projected if len(todo) == len(beam.found) else projected[todo],
                    self._direction,
                    memory.keys,
                    [beam.scan_position[n] - offset for n in todo],
                    memory.total - offset,
                )
                self.evaluations += evaluations
                for n, at, stop in zip(todo, found, stops):
                    beam.scan_position[n] = stop + offset
                    beam.found[n] = at + offset if at >= 0 else -1
                if min(beam.found) < 0 and not complete:
                    return None
                # With complete memory, a scan that found nothing is "no state chosen".
            beam.selected = np.array(beam.found)
            local = torch.tensor([at - memory.offset if at >= 0 else -1 for at in beam.found])
            context = attention.hard_context(query, memory.states, memory.keys, local)

        log_probs = torch.log_softmax(decoder.logits(query, context), dim=-1).detach().numpy()
        return self._extend(log_probs, context, hs, cs)

    def _extend(self, log_probs: np.ndarray, context: Tensor, hs: list[Tensor], cs: list[Tensor]):
        beam = self.beam
        assert beam.selected is not None
        n, vocab = log_probs.shape
        ran_off = beam.selected < 0
        # A hypothesis whose scan found nothing in complete memory can only end.
        ctc = self._ctc_scores() if self._ctc is not None else None
        if ctc is not None:
            weight = np.float32(self.cfg.ctc_weight)
            log_probs = (1 - weight) * log_probs + weight * ctc
        if self.lm is not None and self.cfg.lm_weight > 0:
            fused = np.stack([self.lm.log_probs(tokens) for tokens in beam.tokens])
            log_probs = log_probs + np.float32(self.cfg.lm_weight) * fused
        if not self.cfg.endpoint_on_eos or ran_off.any():  # (most steps: neither)
            log_probs = log_probs.copy()
            log_probs[ran_off] = -np.inf
            log_probs[ran_off, EOS_ID] = 0.0
            if not self.cfg.endpoint_on_eos:
                log_probs[~ran_off, EOS_ID] = -np.inf
        total = (beam.scores[:, None] + log_probs).ravel()
        k = min(self.cfg.beam_size, total.size)
        if k > 1:  # the k best, best first
            best = np.argpartition(-total, k - 1)[:k]
            best = best[np.argsort(-total[best], kind="stable")]
        else:
            best = np.array([total.argmax()])
        hyp, token = np.divmod(best, vocab)
        if token[0] == EOS_ID:
            return self._close(int(hyp[0]))
        keep = token != EOS_ID
        hyp, token, best = hyp[keep], token[keep], best[keep]
        prefixes = None
        if ctc is not None:  # each kept hypothesis' CTC state, one token on
            assert self._ctc is not None and beam.prefixes is not None
            prefixes = [
                self._ctc.child(beam.prefixes[h], t) for h, t in zip(hyp.tolist(), token.tolist())
            ]
        self._adopt(hyp, token, total[best], beam.selected[hyp], context, hs, cs, prefixes)
        if len(self.beam.tokens[0]) >= self.cfg.max_tokens:
            # Cap reached: end with the best hypothesis, resume after its last state.
            last = self.beam.positions[0][-1]
            return self._close(0, last + 1 if last >= 0 else self.memory.total)
        return True

    def _ctc_scores(self) -> np.ndarray:
        """[N, V] CTC scores of each hypothesis' next token, over the segment's states up to
        the one the hypothesis selected (all of them where it selected none)."""
        beam = self.beam
        assert self._ctc is not None and beam.prefixes is not None and beam.selected is not None
        seen = self.memory.total - self.segment_start
        if seen < 1:  # a segment forced to end before any state: nothing to score
            return np.zeros((len(beam.prefixes), self.model.decoder.out.out_features), np.float32)
        rows = []
        for prefix, at in zip(beam.prefixes, beam.selected.tolist()):
            frames = at - self.segment_start + 1 if at >= 0 else seen
            rows.append(self._ctc.scores(prefix, min(max(frames, 1), seen)))
        return np.stack(rows).astype(np.float32)

    def _adopt(self, hyp, token, scores, selected, context, hs, cs, prefixes) -> None:
        beam = self.beam
        same = selected == beam.pointer[hyp]
        rows = torch.from_numpy(hyp)
        self.beam = _Beam(
            state=DecoderState(
                [h[rows] for h in hs], [c[rows] for c in cs], torch.from_numpy(token), context[rows]
            ),
            tokens=[beam.tokens[i] + [t] for i, t in zip(hyp.tolist(), token.tolist())],
            positions=[beam.positions[i] + [p] for i, p in zip(hyp.tolist(), selected.tolist())],
            scores=scores,
            pointer=selected,
            repeats=np.where(same, beam.repeats[hyp] + 1, 1),
            prefixes=prefixes,
        )
        self._trim()

    def _close(self, index: int | None, next_start: int | None = None) -> Segment:
        """End the segment with hypothesis ``index`` and reset the decoder.

        By default the next segment starts at the state where this one's
        end-of-sentence was chosen (or after all memory, if none was). Softmax
        attention has no such state: its segment read all of the memory, so the
        next one starts after it (restarting at the last state would decode that
        state again as a segment of its own).
        """
        beam = self.beam
        tokens = beam.tokens[index] if index is not None else []
        positions = beam.positions[index] if index is not None else []
        if next_start is None:
            eos_at = int(beam.selected[index]) if index is not None else -1
            if isinstance(self.model.decoder.attention, SoftmaxAttention):
                eos_at = -1
            next_start = eos_at if eos_at >= 0 else self.memory.total
        # Every segment moves the start forward, so decoding always terminates.
        next_start = max(next_start, self.segment_start + 1)
        segment = Segment(tokens, positions, self.segment_start, next_start)
        self.restart_at(next_start)
        return segment

    def restart_at(self, index: int) -> None:
        """Begin a fresh segment at state ``index`` (after a forced endpoint)."""
        if self._ctc is not None:
            self._ctc.drop_before(index - self.segment_start)
        self.segment_start = index
        self.beam = self._fresh_beam(index)
        self._trim()

    def _trim(self) -> None:
        """Drop states no hypothesis can read again: bounded memory for endless streams."""
        attention = self.model.decoder.attention
        if isinstance(attention, SoftmaxAttention):
            keep_from = self.segment_start
        else:
            keep_from = int(self.beam.pointer.min()) - attention.lookback
        self.memory.drop_before(max(0, min(keep_from, self.memory.total)))


@torch.no_grad()
def decode_batch(
    model: Seq2Seq, feats: Tensor, feat_lens: Tensor, cfg: DecodeConfig
) -> list[list[Segment]]:
    """Offline decoding of a padded batch: encoder batched, then the online search per utterance."""
    model.eval()
    memory, mem_lens = model.encode(feats, feat_lens)
    return [search_states(model, memory[b, : int(mem_lens[b])], cfg) for b in range(len(memory))]


def search_states(
    model: Seq2Seq, states: Tensor, cfg: DecodeConfig, lm: TokenLM | None = None
) -> list[Segment]:
    """The online search over complete encoder states [n, D]: every non-empty segment."""
    search = SegmentSearch(model, cfg, lm)
    search.append(states)
    return drain(search)


def drain(search: SegmentSearch) -> list[Segment]:
    """Run a search over complete memory to the end, collecting every non-empty segment."""
    segments = []
    while search.segment_start < search.states_seen:
        segment = search.advance(complete=True)
        if segment is not None and segment.tokens:
            segments.append(segment)
    return segments
