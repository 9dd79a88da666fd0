"""Two-pass finals written by Whisper-base's own decoder.

When a segment closes, its log-mel frames (floored as Whisper floors them:
:func:`whisper_floor`) go through the full-attention teacher at the segment's own length
(not padded to Whisper's 30 s: a tenth of the cost for a 3 s segment), and Whisper's
decoder, which learnt English from 680,000 hours of speech, writes the final: cased and
punctuated. Whisper learnt to read a 30 s window whose end is padding, so
the memory it reads is the segment's states followed by the teacher's states of a silent
window (computed once), unless ``silence_after`` is off.

The rules that keep it safe on short and empty segments, Whisper's and one of ours:

- no speech: a segment whose first-step probability of ``<|nocaptions|>`` is above
  ``no_speech_threshold`` gives an empty final (not a hallucinated "Thank you.") when the
  audio does not explain its text: the text is no more likely per token (by
  ``min_audio_gain`` nats) reading the segment than reading encoded silence. Whisper writes
  "you" for silence, noise and breath with an average log-probability of -0.5 to -0.7,
  which its own rule (below -1) keeps, while it drops clear short utterances it reads at
  -1.4 ("Zulu Papa"); reading silence gives that "you" the same probability (a gain of
  0.05 nats or less), where speech gained 1.25 and more on the shipped held-out files;
- loops: a hypothesis that repeats itself (``loop_start``: 4 copies of a run, and at least
  ``LOOP_SPAN`` tokens of them, so that "words words words words" stays) is cut where the
  repeats begin; a text that still compresses too well (zlib ratio above ``compression_ratio_threshold``)
  gives way to the first pass's final (:attr:`FinalText.fallback`);
- suppressed tokens: non-speech symbols and special tokens are never written, and a blank
  or the end never first.

Segments that close together are decoded as one padded batch: the decoder's weights are
read once a step for all of them. Token times come from the cross-attention of Whisper's
alignment heads, aligned to the segment's states by dynamic time warping.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numba
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from asr.config import WhisperFinalsConfig
from asr.frontend import STATE_SECONDS
from asr.whisper_decoder import (
    DecoderCache,
    Memory,
    TokenRules,
    WhisperTextDecoder,
    bfloat16_kernels,
    loop_start,
)
from asr.whisper_encoder import WhisperEncoder, int8_linears
from asr.whisper_features import SAMPLE_RATE, log_mel
from asr.whisper_text import WhisperVocabulary

STATES_PER_WINDOW = 1500  # Whisper's 30 s window, in encoder states
MEDIAN_WIDTH = 7  # Whisper's filter of alignment weights along time
# a run said over and over is a loop once its copies span this many tokens (and 4 copies)
LOOP_SPAN = 8


@dataclass
class FinalText:
    """Whisper's reading of one segment: its text tokens, their texts, and for each the
    segment-relative state after which it was spoken (its end); ``fallback``: the text
    failed a check (a loop) and the first pass's final should stand instead."""

    tokens: list[int]
    text: str
    pieces: list[str]
    ends: list[int]
    avg_logprob: float
    no_speech_prob: float
    fallback: bool = False


@dataclass(frozen=True)
class Extension:
    """A hypothesis a beam step makes: its parent's index among the step's hypotheses, its
    tokens (the parent's and one more; those before a loop's repeats where it ended in
    one) and their summed log-probability."""

    parent: int
    tokens: list[int]
    logprob: float


def extend_beam(
    prefixes: Sequence[list[int]],
    logprobs: Sequence[float],
    scores: Tensor,
    beam: int,
    end: int,
    ended: list[Extension] | None,
    ended_before: int = 0,
) -> list[Extension]:
    """One step of a beam of Whisper's decoder: the ``beam`` best hypotheses that go on,
    from hypotheses with ``prefixes`` (their summed ``logprobs``) and each one's next-token
    log-probabilities ``scores`` [len(prefixes), vocab], best first.

    With ``ended`` (a segment read whole), a candidate that is the end token, or that makes
    its text a loop (the text before the repeats kept), ends its hypothesis there, into
    ``ended``; the beam stops (nothing goes on) once ``beam`` hypotheses have ended, this
    step's and the ``ended_before`` (Whisper's patience 1). Without (a segment still open,
    :class:`~asr.speller.Speller`), such a candidate is passed over: the memory so far says
    nothing more there, and the hypothesis waits for more."""
    top = scores.topk(beam + 1 if beam > 1 else 1, dim=-1)
    candidates = [
        (logprobs[parent] + value, parent, token)
        for parent in range(len(prefixes))
        for value, token in zip(top.values[parent].tolist(), top.indices[parent].tolist())
    ]
    candidates.sort(key=lambda c: -c[0])
    chosen: list[Extension] = []
    count = ended_before
    for logprob, parent, token in candidates:
        if len(chosen) == beam or count >= beam:
            break
        tokens = [*prefixes[parent], token]
        start = None if token == end else loop_start(tokens, shortest_span=LOOP_SPAN)
        if token == end or start is not None:
            if ended is not None:
                ended.append(
                    Extension(parent, tokens[:-1] if start is None else tokens[:start], logprob)
                )
                count += 1
            continue
        chosen.append(Extension(parent, tokens, logprob))
    return [] if count >= beam else chosen


@dataclass
class _Hypothesis:
    """A hypothesis of one segment: its text tokens, their summed log-probability, and the
    alignment heads' scores [heads, S] of each query that predicted a token (the last
    prompt token's, then each token's own), collected as the search goes, so token times
    need no second pass."""

    tokens: list[int]
    logprob: float = 0.0
    alignment: list[Tensor] = field(default_factory=list)


class WhisperFinals:
    """What every session's final pass shares: the teacher, Whisper's decoder and vocabulary,
    its token rules and the memory of encoded silence. Stateless between calls."""

    def __init__(
        self,
        teacher: WhisperEncoder,
        decoder: WhisperTextDecoder,
        rules: TokenRules,
        vocabulary: WhisperVocabulary,
        precision: str = "bfloat16",
    ) -> None:
        """``precision``: "bfloat16" (the decoder by :meth:`WhisperTextDecoder.in_bfloat16`,
        where oneDNN has bfloat16 kernels, float32 elsewhere; the teacher that encodes
        segments by :func:`reduced_teacher`) or "float32" (both as given)."""
        self.teacher = teacher
        self.encoder = teacher if precision == "float32" else reduced_teacher(teacher)
        use_bfloat16 = precision == "bfloat16" and bfloat16_kernels()
        self.decoder = decoder.in_bfloat16() if use_bfloat16 else decoder
        self.rules = rules
        self.vocabulary = vocabulary
        size = len(decoder.embed.weight)
        self._suppress, self._suppress_begin = rules.masks(size, vocabulary.text_tokens)
        self._numerals = vocabulary.numerals(size)  # suppressed with options.numbers "words"
        # the encoded silence of Whisper's window, as it reads past a segment (the streaming
        # speller reads it too, an adapted decoder's memory of the same states): at load,
        # not at a first final
        self.silent_states = silent_states(self.encoder)
        self.silence = self.decoder.memory(self.silent_states)

    @torch.inference_mode()
    def transcribe(self, mels: list[Tensor], options: WhisperFinalsConfig) -> list[FinalText]:
        """Whisper's finals of segments given as log-mel frames [T_i, 80] (each at most 30 s),
        decoded together with ``options`` (a session's decode.whisper_finals)."""
        if not mels:
            return []
        states, lengths, spoken = self.encode(mels, options.window_s)
        return self.decode(states, lengths, options, spoken)

    @torch.inference_mode()
    def decode(
        self,
        states: Tensor,
        lengths: Tensor,
        options: WhisperFinalsConfig,
        spoken: Tensor | None = None,
    ) -> list[FinalText]:
        """Finals of encoder states [B, S, d] of which the first ``lengths`` [B] are each
        segment's (distillation decodes the teacher's cached states this way); ``spoken``
        [B] (default ``lengths``): how many of those are the audio's, not padding, the
        span its tokens are timed in."""
        memory, mask = self.memory(states, lengths, options.silence_after)
        cache = DecoderCache([], memory, mask)
        spans = (lengths if spoken is None else spoken).tolist()
        beams = [
            options.beam_size if span * STATE_SECONDS <= options.beam_max_s else 1 for span in spans
        ]
        found = self._search(cache, beams, options)
        return [
            self._final(best, no_speech, span, options)
            for (best, no_speech), span in zip(found, spans)
        ]

    # -- encoding -------------------------------------------------------------------
    def encode(self, mels: list[Tensor], window_s: float) -> tuple[Tensor, Tensor, Tensor]:
        """The teacher's states of each segment, followed by Whisper's padding up to
        ``window_s`` seconds in all where it is shorter (the batch padded to the longest),
        their counts, and how many of each are the segment's own."""
        window = 2 * STATES_PER_WINDOW
        frames = [len(m) for m in mels]
        if max(frames) > window:
            raise ValueError(f"a Whisper final covers at most 30 s, got {max(frames)} frames")
        least = min(window, round(window_s * 100))
        encoded = torch.tensor([max(f, least) for f in frames])
        # zero frames after each segment: Whisper's transcribe pads its window so (zeros once
        # scaled, not the log-mel of silence), and they are the batch's padding too
        batch = mels[0].new_zeros(len(mels), int(encoded.max()), mels[0].shape[1])
        for row, mel in zip(batch, mels):
            row[: len(mel)] = whisper_floor(mel)
        states, lengths = self.encoder(batch, encoded)
        return states, lengths, self.encoder.output_lengths(torch.tensor(frames))

    def memory(
        self, states: Tensor, lengths: Tensor, silence_after: bool
    ) -> tuple[Memory, Tensor | None]:
        """The decoder's memory of each segment: its states, then encoded silence to the
        window's end (or a mask that hides the padding). Differentiable in ``states``."""
        memory = self.decoder.memory(states)
        if not silence_after:
            width = states.shape[1]
            return memory, torch.arange(width) < lengths.unsqueeze(1)
        return WhisperTextDecoder.cut(memory, self.silence, lengths), None

    @torch.inference_mode()
    def align(self, states: Tensor, tokens: list[int]) -> list[int]:
        """Each of ``tokens``' end (states) from the alignment heads, the decoder
        teacher-forced on them over one segment's teacher states [S, d], as finals time
        their own tokens: the timing of any text, not only of the decoder's own reading."""
        prompt = self.vocabulary.prompt
        memory, mask = self.memory(states[None], torch.tensor([len(states)]), True)
        sequence = torch.tensor([[*prompt, *tokens]])
        heads = self.rules.alignment_heads
        _, _, scores = self.decoder.step(sequence, DecoderCache([], memory, mask), scores_of=heads)
        assert scores is not None
        return token_ends(scores[0, :, len(prompt) - 1 :, : len(states)])

    # -- search ---------------------------------------------------------------------
    def _search(
        self, cache: DecoderCache, beams: list[int], options: WhisperFinalsConfig
    ) -> list[tuple[_Hypothesis, float]]:
        """The best hypothesis of each segment with its no-speech probability: a beam of
        ``beams[k]`` hypotheses for segment k (1: greedy), all segments stepped together; a
        hypothesis ends at the end token, a loop or ``max_tokens``, and the best has the
        highest log-probability per token (Whisper's ranking without a length penalty)."""
        count = len(beams)
        heads = self.rules.alignment_heads
        prompt = torch.tensor([self.vocabulary.prompt] * count)
        logprobs, cache, scores = self.decoder.step(prompt, cache, scores_of=heads)
        assert scores is not None
        no_speech = logprobs[:, 0, self.vocabulary.no_speech].exp().tolist()
        last = logprobs[:, -1]
        alive = [[_Hypothesis([], 0.0, [row])] for row in scores[:, :, -1]]  # per segment
        suppress, suppress_begin = self._suppress, self._suppress_begin
        if options.numbers == "words":
            suppress, suppress_begin = suppress | self._numerals, suppress_begin | self._numerals
        done: list[list[_Hypothesis]] = [[] for _ in range(count)]
        for step in range(options.max_tokens):
            last = last.masked_fill(suppress_begin if step == 0 else suppress, -1e9)
            last = last.log_softmax(-1)
            parents: list[int] = []  # the cache row each new live hypothesis goes on from
            flat = 0
            for segment in range(count):
                hyps = alive[segment]
                chosen = self._extend(
                    hyps, last[flat : flat + len(hyps)], beams[segment], done[segment]
                )
                alive[segment] = [hyp for hyp, _ in chosen]
                parents += [flat + parent for _, parent in chosen]
                flat += len(hyps)
            if not parents:
                break
            live = [hyp for hyps in alive for hyp in hyps]
            cache = cache.select(torch.tensor(parents))
            feed = torch.tensor([[hyp.tokens[-1]] for hyp in live])
            logprobs, cache, scores = self.decoder.step(feed, cache, scores_of=heads)
            assert scores is not None
            for hyp, row in zip(live, scores[:, :, -1]):
                hyp.alignment.append(row)
            last = logprobs[:, -1]
        best = []
        for segment in range(count):  # out of tokens: the live ones end here
            ended = done[segment] + alive[segment]
            top = max(ended, key=lambda h: h.logprob / max(len(h.tokens), 1))
            best.append((top, no_speech[segment]))
        return best

    def _extend(
        self,
        hyps: list[_Hypothesis],
        scores: Tensor,
        beam: int,
        done: list[_Hypothesis],
    ) -> list[tuple[_Hypothesis, int]]:
        """The next live hypotheses of one segment (each with its parent's index among
        ``hyps``); those that end go to ``done``, each with its parent's alignment up to the
        query that predicted its end."""
        ended: list[Extension] = []
        chosen = extend_beam(
            [h.tokens for h in hyps],
            [h.logprob for h in hyps],
            scores,
            beam,
            self.vocabulary.end,
            ended,
            len(done),
        )
        for e in ended:
            done.append(
                _Hypothesis(e.tokens, e.logprob, hyps[e.parent].alignment[: len(e.tokens) + 1])
            )
        return [
            (_Hypothesis(c.tokens, c.logprob, list(hyps[c.parent].alignment)), c.parent)
            for c in chosen
        ]

    # -- checks and times -------------------------------------------------------------
    def _final(
        self, best: _Hypothesis, no_speech: float, length: int, config: WhisperFinalsConfig
    ) -> FinalText:
        tokens = best.tokens
        avg = best.logprob / (len(tokens) + 1)  # Whisper counts the end token too
        silent = (
            no_speech > config.no_speech_threshold
            and avg - self._silence_logprob(tokens) < config.min_audio_gain
        )
        if silent or not tokens:
            return FinalText([], "", [], [], avg, no_speech)
        text = self.vocabulary.decode(tokens)
        loops = compression_ratio(text) > config.compression_ratio_threshold
        ends = token_ends(torch.stack(best.alignment, dim=1)[:, :, :length])
        pieces = self.vocabulary.pieces(tokens)
        return FinalText(tokens, text, pieces, ends, avg, no_speech, fallback=loops)

    def _silence_logprob(self, tokens: list[int]) -> float:
        """The average log-probability of ``tokens`` and the end reading encoded silence:
        near that of the segment, the text is what Whisper says of no speech at all."""
        sequence = torch.tensor([[*self.vocabulary.prompt, *tokens, self.vocabulary.end]])
        logprobs, _, _ = self.decoder.step(sequence[:, :-1], DecoderCache([], self.silence))
        count = len(tokens) + 1
        picked = logprobs[0, -count:].gather(-1, sequence[0, -count:, None])
        return float(picked.sum()) / count


@torch.no_grad()
def silent_states(teacher: WhisperEncoder) -> Tensor:
    """``teacher``'s states [1, 1500, d] of a silent 30 s window (what a memory that stops
    early is followed by; training through the decoder's cross-attention reads them)."""
    mel = torch.from_numpy(log_mel(np.zeros(30 * SAMPLE_RATE, np.float32), None))
    return teacher(mel[None])[0]


def reduced_teacher(teacher: WhisperEncoder) -> WhisperEncoder:
    """The teacher with each layer's first feed-forward product (fc1, a third of its
    multiply-adds) in int8 (:class:`Int8Linear`): 0.87 of the float32 teacher's time on a
    10 s segment at one thread, with finals as accurate. fc1's products err least in int8
    (0.5% against 0.8-2.5% for the others', which changed finals for the worse); bfloat16
    products took 1.4-1.6 times float32's time where the CPU has no AMX (research record)."""
    return int8_linears(teacher, ("fc1",))


def whisper_floor(mel: Tensor) -> Tensor:
    """Scaled log-mel frames floored as Whisper floors its input, 8 (2 once scaled) below the
    loudest value, rather than at the stream's constant floor (``model.whisper.floor``),
    which cannot wait for the maximum. The teacher learnt from Whisper's floor. Where that
    lies below the stream's, the frames hold nothing lower and keep the stream's."""
    return torch.maximum(mel, mel.max() - 2.0) if len(mel) else mel


def token_ends(scores: Tensor) -> list[int]:
    """Each token's end, in states from the segment's start, from the alignment heads'
    scores [heads, tokens + 1, states] of the queries that predicted each token and then the
    end (as Whisper aligns words): their attention over the segment's states, normalised
    per state across queries and smoothed along time as Whisper does, then the monotonic
    path through it (:func:`dtw`) that collects the most attention. A token ends where the
    next query's stretch of that path begins (the last token: where the end's begins)."""
    weights = scores.softmax(-1)
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, correction=0)
    weights = (weights - mean) / std.clamp(min=1e-8)
    weights = median_filter(weights, MEDIAN_WIDTH).mean(0)
    starts = [-1] * scores.shape[1]
    for query, state in dtw(-weights.double().numpy()):
        if starts[query] < 0:
            starts[query] = state
    return [max(start, 1) for start in starts[1:]]


def compression_ratio(text: str) -> float:
    """Bytes of text per byte of its zlib compression: high for text that repeats itself."""
    data = text.encode()
    return len(data) / max(len(zlib.compress(data)), 1)


def median_filter(x: Tensor, width: int) -> Tensor:
    """Median over a sliding window of ``width`` (odd) along the last axis, edges reflected."""
    if x.shape[-1] <= width // 2:
        return x
    pad = width // 2
    flat = x.reshape(-1, 1, x.shape[-1])  # reflection pads [N, C, T]
    padded = F.pad(flat, (pad, pad), mode="reflect").reshape(*x.shape[:-1], -1)
    return padded.unfold(-1, width, 1).median(-1).values


@numba.njit(cache=True)
def _dtw_path(cost: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf)
    came = np.zeros((n + 1, m + 1), dtype=np.int8)  # 0 diagonal, 1 from above, 2 from left
    total[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            best, move = total[i - 1, j - 1], 0
            if total[i - 1, j] < best:
                best, move = total[i - 1, j], 1
            if total[i, j - 1] < best:
                best, move = total[i, j - 1], 2
            total[i, j] = cost[i - 1, j - 1] + best
            came[i, j] = move
    path = np.zeros((n + m, 2), dtype=np.int64)
    i, j, k = n, m, 0
    while i > 0 and j > 0:
        path[k, 0], path[k, 1] = i - 1, j - 1
        k += 1
        move = came[i, j]
        if move == 0:
            i, j = i - 1, j - 1
        elif move == 1:
            i -= 1
        else:
            j -= 1
    return path[:k][::-1]


def dtw(cost: np.ndarray) -> list[tuple[int, int]]:
    """The monotonic path (token, state) from (0, 0) to the last token at the last state
    with the least summed cost: each step moves to the next token, the next state or both."""
    return [(int(t), int(s)) for t, s in _dtw_path(np.ascontiguousarray(cost))]
