"""Whisper's decoder made to stream: a policy decides *when* each token is spoken, the
decoder decides *which*.

The streaming student's states arrive 16 at a time (320 ms). A :class:`Speller` keeps, for
one segment:

- the memory: every layer's cross-attention keys and values of each state, computed once
  when the state arrives and kept for the segment (:class:`GrowingMemory`);
- per hypothesis (:class:`Hypothesis`; greedy has one, a beam several): the
  tokens emitted so far, each with its *boundary* (the states it was read from), the
  *pointer* (the last token's boundary), how far the scan for the next token has gone,
  and the decoder's self-attention keys and values of every position fed so far.

Token i is read from the memory up to its boundary t(i) >= t(i-1) (monotonic infinite
lookback): the position that predicts it, the previous token's, is fed with the memory cut
at t(i), and its self-attention keys and values are kept as they were then, never
recomputed. What lies beyond the boundary is a setting (:attr:`SpellerOptions.beyond`):
hidden by the mask, or read as the teacher's encoded silence, as Whisper's finals read the
rest of their 30 s window (:mod:`asr.whisper_finals`).

For the next token the speller scans candidate boundaries from where the last scan
stopped, every :attr:`Policy.stride` states, and asks the :class:`Policy` at each whether
the token may be spoken from there; the first yes emits the decoder's most likely token
read at that boundary. No yes by the last state that has arrived: the token waits for
the next chunk. Policies:

- :class:`Immediate` and :class:`AtEnd` (trivial: at the first candidate; only when the
  segment closes, which is the decoder reading the whole memory);
- :class:`AttentionGuided` (Simul-Whisper, Wang et al. 2024, training-free): yes unless
  Whisper's alignment heads put the token's attention within the last ``frames`` states
  of the memory read (or beyond it);
- :class:`Learnt` (Raffel et al. 2017: p(i, j) = sigmoid(energy(s(i-1), h(j))), yes at
  p > 0.5): s(i-1) is the decoder's final-layer state at the position that predicts the
  token, read at the boundary (:attr:`Reading.state`), h(j) the student's last state before
  the boundary; the energy (:class:`~asr.attention.MonotonicEnergy`, eq. 16) is trained in
  expectation over boundaries (``training/speller.py``) and shipped as
  ``speller_policy.safetensors``.

Whatever the policy, the speller never lets the end of text out before the segment
closes: where the decoder's most likely next token is the end, the memory so far says
nothing more, and the token waits (a memory cut mid-word must not end the sentence). At
the close, every token still to come is read from the whole memory until the end.

Candidate boundaries fall on multiples of the stride, whatever the audio chunking, and the
states a segment's close brings are read whole: a speller fed states as a session gets
them emits the same tokens at the same boundaries as one fed them all at once before the
close (:meth:`Speller.accept` then :meth:`Speller.finish`).
"""

from __future__ import annotations

import hashlib
import math
import threading
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Protocol

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from asr.adapters import apply_adapter_weights
from asr.attention import MonotonicEnergy
from asr.config import Numbers
from asr.frontend import BUNDLE_ENCODER_FILE
from asr.whisper_decoder import (
    LINEARS,
    DecoderCache,
    Memory,
    TokenRules,
    WhisperTextDecoder,
    load_decoder,
    loop_start,
)
from asr.whisper_finals import LOOP_SPAN, Extension, extend_beam
from asr.whisper_text import WhisperVocabulary

CHUNK_STATES = 16  # the streaming student's chunk: states arrive 16 at a time (320 ms)
POLICY_FILE = "speller_policy.safetensors"  # a bundle's learnt policy, if it carries one
# a bundle's adapters of the decoder the streaming pass reads with (``asr tune-speller``)
ADAPTER_FILE = "speller_adapter.safetensors"


@dataclass(frozen=True)
class SpellerOptions:
    """How a speller reads (one frozen object per session)."""

    # what the decoder reads past a token's boundary: "silence", the teacher's encoded
    # silence (as Whisper's finals read the rest of their window), or "mask": nothing
    beyond: Literal["silence", "mask"] = "silence"
    # most tokens of one segment (Whisper's own limit is half its 448 positions)
    max_tokens: int = 224
    # "words": while the segment is open, numbers are spelled as said ("six hundred seventy
    # three"), each word let out once it has ended (tokens with digits, currency or per
    # cent signs suppressed); at the close the rest is read as Whisper writes it (the
    # decoder, tuned on its own numerals, would end the text rather than spell them).
    # "digits": Whisper's numerals ("673") throughout, which it writes only once the whole
    # number has been heard (research record: WER and word latency p95 on the dev splits)
    numbers: Numbers = "words"
    # hypotheses of the beam, each with its own pointer (1: greedy); the best one is shown,
    # and each costs a step of the decoder at each of its candidate boundaries (research
    # record: WER, word latency and cost on the dev splits)
    beam: int = 1
    # states a hypothesis that has said something may wait for its next token before the
    # segment is read again from its start (:meth:`Speller._reread`): the decoder, having let
    # out a sentence it misheard, finds the end of text likeliest at every boundary after
    # it, and an open segment waits on the end (0: it waits for the close)
    stall: int = 0

    def __post_init__(self) -> None:
        if self.beyond not in ("silence", "mask"):
            raise ValueError(f"beyond must be 'silence' or 'mask', got {self.beyond!r}")
        if self.numbers not in typing.get_args(Numbers):
            raise ValueError(f"numbers must be 'words' or 'digits', got {self.numbers!r}")
        if not 1 <= self.max_tokens <= 224:
            raise ValueError(f"max_tokens must be 1 to 224, got {self.max_tokens}")
        if self.beam < 1:
            raise ValueError(f"a speller's beam must be at least 1, got {self.beam}")
        if self.stall < 0:
            raise ValueError(f"a speller's stall must be at least 0 states, got {self.stall}")


class SpellerModel:
    """What every stream's speller shares: Whisper's decoder, its vocabulary and token rules
    (as suppression masks) and the memory of a silent window as the teacher encodes it."""

    def __init__(
        self,
        decoder: WhisperTextDecoder,
        rules: TokenRules,
        vocabulary: WhisperVocabulary,
        silence: Memory,
        wait: int | None = None,
    ) -> None:
        self.decoder = decoder
        self.rules = rules
        self.vocabulary = vocabulary
        self.silence = silence
        # what the decoder says when the memory so far holds no more words: the end of text
        # for Whisper's own decoder; adapters that learnt a token of their own for it
        # (``WAIT_KEY``) keep "wait" apart from the end, so a closed segment's whole memory
        # that ends in speech is not read as one cut short (research record)
        self.wait = vocabulary.end if wait is None else wait
        size = len(decoder.embed.weight)
        self.suppress, self.suppress_begin = rules.masks(size, vocabulary.text_tokens)
        # while a segment is open, by SpellerOptions.numbers: the same masks, but with the
        # adapters' own "wait" said (never at the close), and for "words" numerals suppressed
        opened = (self.suppress.clone(), self.suppress_begin.clone())
        if self.wait != self.end:
            self.suppress[self.wait] = self.suppress_begin[self.wait] = True
            opened[0][self.wait] = opened[1][self.wait] = False
        numerals = vocabulary.numerals(size)
        self.open_masks: dict[Numbers, tuple[Tensor, Tensor]] = {
            "digits": opened,
            "words": (opened[0] | numerals, opened[1] | numerals),
        }
        # the decoder's final-layer state (its last norm's output) of this thread's last
        # step: the decoder's step returns log-probabilities only, and the decoder is shared
        # with other threads (the finals' own), so each thread keeps its own
        self._final = threading.local()
        decoder.norm.register_forward_hook(self._keep_final)

    def _keep_final(self, module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        self._final.state = output

    def final_state(self) -> Tensor:
        """The decoder's final-layer states [B, n, d] of this thread's last step."""
        return self._final.state

    @classmethod
    def load(
        cls,
        decoder_file: Path,
        tokenizer_file: Path,
        silent: Tensor,
        adapter: Path | None = None,
        bfloat16: bool = False,
    ) -> SpellerModel:
        """From a bundle's Whisper files (and its :func:`bundle_adapter`), with the decoder's
        memory of ``silent``, a teacher's states of a silent window
        (:func:`asr.whisper_finals.silent_states`); the decoder in float32 (the policy was
        trained on float32 readings: the finals' bfloat16 copy reads 0.01-0.05 nats apart)
        or, with ``bfloat16``, as the finals serve it."""
        decoder, rules = load_decoder(decoder_file)
        vocabulary = WhisperVocabulary.load(tokenizer_file)
        wait = None
        if adapter is not None:
            apply_adapter_weights(decoder.layers, LINEARS, load_file(str(adapter)))
            wait = adapter_wait(adapter, vocabulary)
        if bfloat16:
            decoder = decoder.in_bfloat16()
        return cls(decoder, rules, vocabulary, decoder.memory(silent), wait)

    @property
    def end(self) -> int:
        return self.vocabulary.end


class GrowingMemory:
    """One segment's memory: each layer's cross-attention keys and values of the states so
    far, computed once per state, in buffers that grow ``ROOM`` states at a time. With
    encoded silence (``silence`` given) a layer's buffer holds the silent window's 1500
    states first and the segment's after them, so that the memory cut at any boundary is
    the buffers whole and a mask: the segment's states before the boundary, the silence's
    from the boundary on. Whole, because a product over part of a buffer (a strided view)
    took four times as long in bfloat16 as one over all of it, masked room and all
    (research record). The buffers are made with the first states (a segment that has none,
    as a session's between two endpoints before any audio, holds nothing: with silence they
    are some 40 MB in float32)."""

    ROOM = 256  # states (5 s): the buffers' room for the segment grows by this much

    def __init__(self, decoder: WhisperTextDecoder, silence: Memory | None) -> None:
        self.decoder = decoder
        self.silence = silence
        self.offset = 0 if silence is None else silence[0][0].shape[2]
        self._buffers: list[tuple[Tensor, Tensor]] = []
        self.length = 0  # states of the segment

    def _make_buffers(self, room: int) -> None:
        decoder = self.decoder
        heads = decoder.layers[0].heads
        width = decoder.embed.weight.shape[1]
        shape = (1, heads, self.offset + room, width // heads)
        # the decoder's own memory type (bfloat16 for the finals' packed decoder)
        dtype = decoder.memory(torch.zeros(1, 1, width))[0][0].dtype
        for layer in range(len(decoder.layers)):
            keys, values = torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)
            if self.silence is not None:
                keys[:, :, : self.offset] = self.silence[layer][0]
                values[:, :, : self.offset] = self.silence[layer][1]
            self._buffers.append((keys, values))

    def _room_for(self, states: int) -> int:
        return -(-states // self.ROOM) * self.ROOM

    def add(self, states: Tensor) -> None:
        """Append encoder states [n, d]."""
        if not len(states):
            return
        need = self.length + len(states)
        if not self._buffers:
            self._make_buffers(self._room_for(need))
        room = self._buffers[0][0].shape[2] - self.offset
        if need > room:
            grow = self._room_for(need) - room
            self._buffers = [(_grown(k, grow), _grown(v, grow)) for k, v in self._buffers]
        start, end = self.offset + self.length, self.offset + need
        for (keys, values), (k, v) in zip(self._buffers, self.decoder.memory(states[None])):
            keys[:, :, start:end] = k
            values[:, :, start:end] = v
        self.length = need

    def cut(self, boundary: int) -> tuple[Memory, Tensor]:
        """The memory read up to ``boundary`` (1 to :attr:`length` states): the buffers and
        their mask [1, slots] (True: read)."""
        if not 0 < boundary <= self.length:
            raise ValueError(f"a boundary must be 1 to {self.length} states, got {boundary}")
        index = torch.arange(self._buffers[0][0].shape[2])
        mask = torch.where(index < self.offset, index >= boundary, index - self.offset < boundary)
        return list(self._buffers), mask[None]

    def state_of(self, slots: Tensor) -> Tensor:
        """The segment's state index of each memory slot (negative: a slot of silence)."""
        return slots - self.offset


def _grown(x: Tensor, more: int) -> Tensor:
    return torch.cat([x, x.new_zeros(*x.shape[:2], more, x.shape[3])], dim=2)


@dataclass
class Reading:
    """The decoder's next token read from the memory up to ``boundary``: its log-probs
    (suppressed tokens at -inf), the most likely ``token``, where the alignment heads
    attend (``attended``: the most attended state; ``boundary`` itself when that lies
    beyond it, in encoded silence), the cache with the fed positions as read here, and the
    decoder's final-layer ``state`` [d] at the position that predicts the token."""

    boundary: int
    logprobs: Tensor
    token: int
    attended: int | None  # None where the policy does not read it (Policy.reads_attention)
    cache: DecoderCache
    state: Tensor


@dataclass
class Emission:
    """A token let out: the states it was read from (its boundary)."""

    token: int
    boundary: int


@dataclass
class Hypothesis:
    """One hypothesis of a segment: its tokens and their boundaries, their summed
    log-probability, the positions still to feed the decoder (the prompt, then the last
    token), how far the scan for the next token has gone and the reading it found there,
    and the decoder's self-attention keys and values of the positions fed."""

    pending: list[int]
    tokens: list[int] = field(default_factory=list)
    boundaries: list[int] = field(default_factory=list)
    logprob: float = 0.0
    scanned: int = 0  # candidate boundaries up to this one said no for the next token
    # the reading the next token will come from, found while the rest of the beam waits
    # (or the boundary where it stalled: Speller._scan)
    ready: Reading | int | None = None
    past: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    done: bool = False
    # read again (Speller._reread) to the text it had, and nothing said since: it waits
    # on what the states say, and may not stall again before its next token
    settled: bool = False

    @property
    def pointer(self) -> int:
        """The last token's boundary (0 before the first)."""
        return self.boundaries[-1] if self.boundaries else 0

    def then(self, reading: Reading, token: int, logprob: float) -> Hypothesis:
        """This hypothesis with ``token`` read at ``reading``'s boundary (summed log-prob
        ``logprob``); the next token may come from the same boundary."""
        return Hypothesis(
            [token],
            [*self.tokens, token],
            [*self.boundaries, reading.boundary],
            logprob,
            reading.boundary - 1,
            past=reading.cache.past,
        )

    def ended(self, tokens: list[int], logprob: float) -> Hypothesis:
        """The hypothesis that ends with ``tokens``, a prefix of this one's (all of them
        where the end came next, those before a loop's repeats where one did)."""
        boundaries = self.boundaries[: len(tokens)]
        return Hypothesis([], tokens, boundaries, logprob, done=True)


class NextToken:
    """What a policy sees of one hypothesis's next token: the tokens so far, the pointer,
    the encoder states that have arrived, and the decoder's reading at any boundary
    (memoised: the speller emits the reading the policy looked at)."""

    def __init__(self, speller: Speller, hypothesis: Hypothesis) -> None:
        self._speller = speller
        self.hypothesis = hypothesis
        self._readings: dict[int, Reading] = {}

    @property
    def tokens(self) -> list[int]:
        return self.hypothesis.tokens

    @property
    def pointer(self) -> int:
        return self.hypothesis.pointer

    @property
    def states(self) -> Tensor:
        """The segment's encoder states so far [S, d]."""
        return self._speller.states

    def read(self, boundary: int) -> Reading:
        if boundary not in self._readings:
            self._readings[boundary] = self._speller.read(self.hypothesis, boundary)
        return self._readings[boundary]


class Policy(Protocol):
    """When the next token may be spoken. The speller asks at candidate boundaries every
    ``stride`` states, in increasing order from the pointer, and emits at the first yes.
    ``reads_attention``: whether it reads :attr:`Reading.attended`, which the decoder's
    alignment heads' scores give at a tenth of a step's time (None in readings otherwise)."""

    stride: int
    reads_attention: ClassVar[bool]

    def emits(self, next_token: NextToken, boundary: int) -> bool:
        """Whether the next token may be read from the memory up to ``boundary`` now."""
        ...


@dataclass(frozen=True)
class Immediate:
    """At the first candidate boundary (the pointer's chunk, or the first)."""

    stride: int = CHUNK_STATES
    reads_attention: ClassVar[bool] = False

    def emits(self, next_token: NextToken, boundary: int) -> bool:
        return True


@dataclass(frozen=True)
class AtEnd:
    """Never before the segment closes: the decoder reads the whole memory."""

    stride: int = CHUNK_STATES
    reads_attention: ClassVar[bool] = False

    def emits(self, next_token: NextToken, boundary: int) -> bool:
        return False


@dataclass(frozen=True)
class AttentionGuided:
    """Simul-Whisper's rule: the token is spoken unless the alignment heads' attention, read
    at the boundary, falls within its last ``frames`` states (or beyond): the decoder is
    then reading the edge of what has arrived, and may be guessing a word cut off there."""

    frames: int
    stride: int = CHUNK_STATES
    reads_attention: ClassVar[bool] = True

    def emits(self, next_token: NextToken, boundary: int) -> bool:
        attended = next_token.read(boundary).attended
        assert attended is not None  # reads_attention
        return attended < boundary - self.frames


class PolicyEnergy(MonotonicEnergy):
    """Raffel et al.'s eq. 16 between the decoder's final-layer state s [..., d_s] and the
    student's state at the boundary h [..., d_h]: g v/|v| . tanh(W s + V h + b) + r."""

    def __init__(self, state_dim: int = 512, key_dim: int = 512, dim: int = 128) -> None:
        super().__init__(state_dim, key_dim, dim, init_r=-4.0, init_g=None)
        self.shape = (state_dim, key_dim, dim)

    def forward(self, s: Tensor, h: Tensor) -> Tensor:
        return self.score(self.query(s), self.keys(h))

    def save(self, path: Path, threshold: float = 0.5, meta: dict[str, str] | None = None) -> None:
        """Weights and shape in a safetensors file a bundle can carry (``POLICY_FILE``)."""
        shape = dict(zip(("state_dim", "key_dim", "dim"), map(str, self.shape)))
        metadata = {**shape, "threshold": str(threshold), **(meta or {})}
        tmp = path.with_name(f".{path.name}.tmp")
        weights = {k: v.detach().float().contiguous() for k, v in self.state_dict().items()}
        save_file(weights, str(tmp), metadata=metadata)
        tmp.chmod(0o644)  # save_file's file is private to its owner; a bundle is to share
        tmp.replace(path)


@dataclass(frozen=True, eq=False)
class Learnt:
    """The learnt policy: yes where p = sigmoid(energy(s, h)) > ``threshold``, s the
    decoder's final-layer state read at the boundary, h the student's last state before it;
    and, with ``agreement`` k > 1, also where the decoder has read the same next token at
    this chunk end and the k - 1 before it, all past the pointer (local agreement, as
    Polak et al. 2022 let a re-read prefix out once consecutive readings agree): the
    energy, trained on readings at reference boundaries, can keep saying no to a token
    the decoder is settled on. On the dev splits k = 2 took the p95 token latency from 0.99
    to 0.75 s (synthetic) and 1.06 to 0.87 s (real), but lets out more of Whisper's guesses
    at a segment's start, and served real speech read 1.9 points worse: the bundle's policy
    does without (the research record). With ``confidence`` c > 0, also where the decoder's
    likeliest token has probability at least c: past a word's end the energy mostly holds
    back tokens the decoder already reads (the research record's waits); at 0.9 it took
    the dev splits' p95 down by 0.2 s but not the held-out one's, and read held-out sets
    worse: the bundle's policy does without. With ``first_threshold``, a segment's first
    token needs p above it instead: a first token said early is Whisper's guess from the
    onset, which the rest of the segment builds on (the research record: 0.9 read 1-3
    word utterances 3.4 points better and the dev splits' p95 0.2 s later). With
    ``patience`` P > 0, agreement lets a token out only once the pointer has waited P
    states, and never a segment's first: it then frees the few tokens the energy holds back
    for seconds (real speech, whose states the energy learnt least) without letting out
    the guesses that agreement from the pointer on lets out (the research record)."""

    energy: PolicyEnergy
    threshold: float = 0.5
    agreement: int = 0
    # also yes where the decoder's likeliest token has at least this probability (0: off)
    confidence: float = 0.0
    # a segment's first token needs p above this instead of the threshold (0: the threshold)
    first_threshold: float = 0.0
    # states the pointer waits before agreement applies, never to a first token (0: at once)
    patience: int = 0
    stride: int = CHUNK_STATES
    reads_attention: ClassVar[bool] = False

    def emits(self, next_token: NextToken, boundary: int) -> bool:
        reading = next_token.read(boundary)
        with torch.no_grad():
            e = float(self.energy(reading.state, next_token.states[boundary - 1]))
        threshold = self.threshold
        if self.first_threshold and not next_token.tokens:
            threshold = self.first_threshold
        return (
            e > math.log(threshold / (1 - threshold))
            or self._sure(reading)
            or self._agreed(next_token, boundary)
        )

    def _sure(self, reading: Reading) -> bool:
        if not self.confidence:
            return False
        return float(reading.logprobs[reading.token]) >= math.log(self.confidence)

    def _agreed(self, next_token: NextToken, boundary: int) -> bool:
        first = boundary - (self.agreement - 1) * self.stride
        if self.agreement < 2 or first <= next_token.pointer:
            return False
        if self.patience and (
            not next_token.tokens or boundary - next_token.pointer < self.patience
        ):
            return False
        token = next_token.read(boundary).token
        earlier = range(first, boundary, self.stride)
        return all(next_token.read(b).token == token for b in earlier)

    @classmethod
    def load(
        cls, path: Path, threshold: float | None = None, learnt_on: Mapping[str, str] | None = None
    ) -> Learnt:
        """The policy saved by :meth:`PolicyEnergy.save` (``threshold``: the file's if None;
        its agreement, patience, confidence and first token's threshold, the file's or
        none); with ``learnt_on`` (a bundle's :func:`learnt_on`), a ValueError unless it
        was learnt on that student's states and that decoder's readings."""
        meta = metadata_for(path, learnt_on or {}, "asr train-speller")
        energy = PolicyEnergy(*(int(meta[k]) for k in ("state_dim", "key_dim", "dim")))
        energy.load_state_dict(load_file(str(path)))
        energy.eval()
        if threshold is None:
            threshold = float(meta.get("threshold", 0.5))
        if not 0 < threshold < 1:
            raise ValueError(f"a policy's threshold must be in (0, 1), got {threshold}")
        agreement = check_count(int(meta.get("agreement", 0)), "agreement")
        patience = check_count(int(meta.get("patience", 0)), "patience", " states")
        confidence = check_optional_probability(float(meta.get("confidence", 0)), "confidence")
        first = float(meta.get("first_threshold", 0))
        first = check_optional_probability(first, "first token's threshold")
        return cls(energy, threshold, agreement, confidence, first, patience)


def check_count(value: int, what: str, unit: str = "") -> int:
    """A learnt policy's ``what``, a count of ``unit`` where 0 is off: its agreement (chunk
    ends in a row that must agree), its patience (states its pointer waits)."""
    if value < 0:
        raise ValueError(f"a policy's {what} must be at least 0{unit}, got {value}")
    return value


def check_optional_probability(value: float, what: str) -> float:
    """A learnt policy's ``what`` (its confidence, its first token's threshold): 0 (off) or
    a probability strictly between 0 and 1."""
    if not 0 <= value < 1:
        raise ValueError(f"a policy's {what} must be 0 (off) or in (0, 1), got {value}")
    return value


def file_sha1(path: Path) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def student_sha1(bundle: Path) -> str:
    """The bundle's streaming student's file hash: a policy learnt on its states is for it."""
    return file_sha1(bundle / BUNDLE_ENCODER_FILE)


def states_of(student: str, prime: int) -> str:
    """What a student's states depend on, for the caches of them: its file's hash, and the
    silence its streams are primed with (``model.whisper.prime``), where they are."""
    return f"{student}+prime{prime}" if prime else student


def learnt_on(bundle: Path) -> dict[str, str]:
    """What a policy for ``bundle`` must have learnt on, as its file's metadata names it:
    the student's states, read by the decoder with the bundle's adapters or without."""
    adapter = bundle / ADAPTER_FILE
    return {
        "student_sha1": student_sha1(bundle),
        "adapter_sha1": file_sha1(adapter) if adapter.is_file() else NO_ADAPTER,
    }


NO_ADAPTER = "none"  # a policy learnt on Whisper's decoder as it is (or before adapters)
WAIT_KEY = "wait"  # adapters' metadata: the token they say for "wait" (none: the end)
UNNAMED = {"adapter_sha1": NO_ADAPTER}  # what a file that names nothing was learnt on


def metadata_for(path: Path, expected: Mapping[str, str], remedy: str) -> dict[str, str]:
    """A safetensors file's metadata, a ValueError unless each ``expected`` key has its
    value there (a file that names no student is taken as it is)."""
    from asr.whisper_encoder import weights_metadata

    meta = weights_metadata(path)
    for key, want in expected.items():
        if meta.get(key, UNNAMED.get(key, want)) != want:
            learnt = "student" if key == "student_sha1" else "decoder (its adapters)"
            raise ValueError(
                f"{path} was learnt on another streaming {learnt} than the bundle's: train "
                f"it again with `{remedy}`"
            )
    return meta


def adapter_wait(path: Path, vocabulary: WhisperVocabulary) -> int | None:
    """The token adapters learnt to say for "wait" (their ``WAIT_KEY`` metadata), or None:
    adapters that name none wait by the end of text."""
    token = metadata_for(path, {}, "asr tune-speller").get(WAIT_KEY)
    if token is None:
        return None
    found = vocabulary.tokenizer.token_to_id(token)
    if found is None:
        raise ValueError(f"{path}: its wait token {token!r} is not in Whisper's vocabulary")
    return found


def bundle_adapter(bundle: Path) -> Path | None:
    """The adapters of the streaming pass's decoder a bundle carries (``ADAPTER_FILE``,
    checked to be for its student), or None: the streaming pass reads with Whisper's
    decoder as it is."""
    path = bundle / ADAPTER_FILE
    if not path.is_file():
        return None
    metadata_for(path, {"student_sha1": student_sha1(bundle)}, "asr tune-speller")
    return path


def bundle_policy(bundle: Path) -> Learnt:
    """The learnt policy a bundle carries (``POLICY_FILE``), checked to be for its student
    and its decoder: a FileNotFoundError or ValueError naming what is missing or
    mismatched."""
    path = bundle / POLICY_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"model bundle {bundle} has no {POLICY_FILE} (train one with `asr train-speller`)"
        )
    return Learnt.load(path, learnt_on=learnt_on(bundle))


class Speller:
    """One segment's streaming reading by Whisper's decoder: a beam of
    :attr:`SpellerOptions.beam` hypotheses (1: greedy), each with its own pointer.

    The beam goes on a token once every hypothesis has found its next token's boundary
    among the states so far (blockwise synchronous beam search, Tsunoo et al. 2021: one
    that has not waits for more states, and the beam with it); each hypothesis is read at
    its own boundary, and the best ``beam`` of their likeliest tokens go on. What is shown
    is the best hypothesis, which a beam may replace (its tokens every hypothesis holds
    can no longer change; waiting for those showed words a second later on the dev
    splits); at the close the beam reads the whole memory to the end of text, and the
    best hypothesis, by log-probability per token as Whisper ranks its own, is the
    segment's text."""

    def __init__(
        self, model: SpellerModel, policy: Policy, options: SpellerOptions | None = None
    ) -> None:
        self.model = model
        self.policy = policy
        self.options = options or SpellerOptions()
        silence = model.silence if self.options.beyond == "silence" else None
        self.memory = GrowingMemory(model.decoder, silence)
        # the tokens never written, and never written first, while the segment is open
        self._open_masks = model.open_masks[self.options.numbers]
        self._states: list[Tensor] = []
        self.beam = [Hypothesis(list(model.vocabulary.prompt))]  # best first
        self._shown: list[int] = []  # the tokens of the best hypothesis last let out
        self.closed = False
        self.rereads = 0  # how many times the segment was read again (options.stall)

    @property
    def states(self) -> Tensor:
        if len(self._states) > 1:
            self._states = [torch.cat(self._states)]
        return self._states[0] if self._states else torch.zeros(0, 512)

    @property
    def hypothesis(self) -> Hypothesis:
        """The best hypothesis so far (after the close, the segment's)."""
        return self.beam[0]

    @property
    def tokens(self) -> list[int]:
        """The best hypothesis's tokens (after the close, the segment's)."""
        return self.hypothesis.tokens

    @property
    def boundaries(self) -> list[int]:
        """Each of :attr:`tokens`' boundary: the states it was read from."""
        return self.hypothesis.boundaries

    @property
    def text(self) -> str:
        return self.model.vocabulary.decode(self.tokens)

    @torch.inference_mode()
    def accept(self, states: Tensor | np.ndarray) -> list[Emission]:
        """Add encoder states [n, d] of the segment; the tokens the policy lets out now (with
        a beam, they may replace the last ones let out: :meth:`_let_out`)."""
        if self.closed:
            raise ValueError("accept() after finish()")
        self._add(states)
        while not self.hypothesis.done:
            readings = []
            for hyp in self.beam:
                hyp.ready = hyp.ready or self._scan(hyp)
                if isinstance(hyp.ready, int):  # it stalled there: the segment is read again
                    self.beam = [self._reread(hyp, hyp.ready)]
                    break
                if hyp.ready is None:  # it waits for more states, and the beam with it
                    return self._let_out()
                readings.append(hyp.ready)
            else:
                self.beam = self._step(readings, None)
        return self._let_out()

    @torch.inference_mode()
    def finish(self, states: Tensor | np.ndarray | None = None) -> list[Emission]:
        """Close the segment, with its last states if any: every token still to come, read
        from the whole memory, until the end of text (or a loop, whose repeats are cut)."""
        if self.closed:
            raise ValueError("finish() called twice")
        if states is not None:
            self._add(states)
        self.closed = True
        ended = [hyp for hyp in self.beam if hyp.done]
        if self.memory.length and not ended:
            while self.beam:
                readings = [self.read(hyp, self.memory.length) for hyp in self.beam]
                ends: list[Extension] = []
                parents = self.beam
                self.beam = self._step(readings, ends, len(ended))
                ended += [parents[e.parent].ended(e.tokens, e.logprob) for e in ends]
                ended += [hyp for hyp in self.beam if hyp.done]
                self.beam = [hyp for hyp in self.beam if not hyp.done]
        if ended:
            self.beam = [max(ended, key=lambda h: h.logprob / max(len(h.tokens), 1))]
        return self._let_out()

    def _add(self, states: Tensor | np.ndarray) -> None:
        states = torch.as_tensor(states, dtype=torch.float32)
        if len(states):
            self._states.append(states)
            self.memory.add(states)

    def _scan(self, hyp: Hypothesis) -> Reading | int | None:
        """The reading ``hyp``'s next token comes from: at the first candidate boundary,
        from where its last scan stopped, where the policy says yes and the decoder's
        likeliest token may be said; None while there is none among the states so far. Or
        the boundary where it stalled: having said something (and not settled), it waited
        ``options.stall`` states past its last token."""
        stride, stall = self.policy.stride, self.options.stall
        view = NextToken(self, hyp)
        first = (hyp.scanned // stride + 1) * stride
        for boundary in range(first, self.memory.length + 1, stride):
            hyp.scanned = boundary
            if self.policy.emits(view, boundary) and self._may_say(hyp, view.read(boundary)):
                return view.read(boundary)
            if stall and hyp.tokens and not hyp.settled and boundary - hyp.pointer >= stall:
                return boundary
        return None

    def _reread(self, stalled: Hypothesis, boundary: int) -> Hypothesis:
        """The segment read again from its start, greedily, every token from the memory up to
        ``boundary`` (as the close reads the whole memory, but the segment still open: until
        the decoder would end or loop). A ``stalled`` hypothesis stuck on a sentence it
        misheard early is replaced by what the states so far say, which may stall again;
        one that only waited on silence reads the same, and is settled."""
        self.rereads += 1
        hyp = Hypothesis(list(self.model.vocabulary.prompt))
        while len(hyp.tokens) < self.options.max_tokens:
            reading = self.read(hyp, boundary)
            if not self._may_say(hyp, reading):
                break
            logprob = hyp.logprob + float(reading.logprobs[reading.token])
            hyp = hyp.then(reading, reading.token, logprob)
        hyp.settled = hyp.tokens == stalled.tokens
        return hyp

    def _step(
        self, readings: list[Reading], ends: list[Extension] | None, ended: int = 0
    ) -> list[Hypothesis]:
        """The beam after one token, each hypothesis read at its ``readings``' boundary
        (:func:`~asr.whisper_finals.extend_beam`: with ``ends``, at the close, those that
        end go there, ``ended`` having ended before)."""
        beam = self.beam
        scores = torch.stack([reading.logprobs for reading in readings])
        prefixes = [hyp.tokens for hyp in beam]
        summed = [hyp.logprob for hyp in beam]
        chosen = extend_beam(
            prefixes, summed, scores, self.options.beam, self.model.end, ends, ended
        )
        after = []
        for c in chosen:
            hyp = beam[c.parent].then(readings[c.parent], c.tokens[-1], c.logprob)
            hyp.done = len(hyp.tokens) >= self.options.max_tokens
            after.append(hyp)
        return after

    def _let_out(self) -> list[Emission]:
        """The best hypothesis's tokens not shown before: those after the tokens it shares
        with the best hypothesis last shown (with a beam, a new best may replace some)."""
        best, shown = self.hypothesis, self._shown
        same = next(
            (i for i, (a, b) in enumerate(zip(best.tokens, shown)) if a != b),
            min(len(best.tokens), len(shown)),
        )
        self._shown = best.tokens
        new = zip(best.tokens[same:], best.boundaries[same:])
        return [Emission(token, boundary) for token, boundary in new]

    def _may_say(self, hyp: Hypothesis, reading: Reading) -> bool:
        """Whether an open segment may let ``reading``'s token out: not the end (the memory
        so far says nothing more), nor a token that makes the text a loop (the decoder is
        stuck on the memory so far): either waits for more states."""
        if reading.token in (self.model.end, self.model.wait):
            return False
        return loop_start([*hyp.tokens, reading.token], shortest_span=LOOP_SPAN) is None

    def read(self, hyp: Hypothesis, boundary: int) -> Reading:
        """The decoder's reading of ``hyp``'s next token from the memory up to ``boundary``."""
        memory, mask = self.memory.cut(boundary)
        cache = DecoderCache(hyp.past, memory, mask)
        heads = self.model.rules.alignment_heads if self.policy.reads_attention else ()
        logprobs, cache, scores = self.model.decoder.step(
            torch.tensor([hyp.pending]), cache, scores_of=heads
        )
        masks = (self.model.suppress, self.model.suppress_begin)
        if not self.closed:
            masks = self._open_masks
        suppress = masks[1] if not hyp.tokens else masks[0]
        last = logprobs[0, -1].masked_fill(suppress, -torch.inf)
        attended = None if scores is None else self._attended(scores, mask, boundary)
        state = self.model.final_state()[0, -1]
        return Reading(boundary, last, int(last.argmax()), attended, cache, state)

    def _attended(self, scores: Tensor, mask: Tensor, boundary: int) -> int:
        """The state the alignment heads attend most for the last query (their weights
        averaged), or ``boundary`` when that is a slot of silence."""
        last = scores[0, :, -1].masked_fill(~mask, -torch.inf)  # [heads, slots]
        slot = int(last.softmax(-1).mean(0).argmax())
        state = int(self.memory.state_of(torch.tensor(slot)))
        return state if state >= 0 else boundary
