"""The streaming speller (asr.speller): Whisper's decoder reading the bundled student's
states as a session gets them, its policies, and the rules that keep it honest."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from asr.audio import read_audio
from asr.bundle import load_model
from asr.frontend import Frontend
from asr.speller import (
    AtEnd,
    AttentionGuided,
    Immediate,
    NextToken,
    Policy,
    Speller,
    SpellerModel,
    SpellerOptions,
)
from asr.whisper_decoder import WhisperTextDecoder
from asr.whisper_finals import STATES_PER_WINDOW
from tests.test_bundled_model import HELDOUT, MODEL
from tests.test_streaming import chunk_sizes

RATE = 16000


@pytest.fixture(scope="module")
def bundle() -> tuple[Frontend, SpellerModel]:
    recognizer = load_model(MODEL)
    finals = recognizer.whisper_finals()
    assert finals is not None and recognizer.frontend is not None
    model = SpellerModel.of(finals.decoder, finals.rules, finals.vocabulary, finals.teacher)
    return recognizer.frontend, model


def heldout(split: str, index: int) -> tuple[np.ndarray, str]:
    row = json.loads((HELDOUT / f"{split}.jsonl").read_text().splitlines()[index])
    samples, rate = read_audio(HELDOUT / row["audio"])
    assert rate == RATE
    return samples, row["text"]


def arrivals(frontend: Frontend, samples: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    """The student's states as a session gets them: per audio chunk, then the close's."""
    stream = frontend.stream()
    got, start = [], 0
    for size in sizes:
        got.append(stream.accept(samples[start : start + size]))
        start += size
    return [*got, stream.finish()]


def spell(
    model: SpellerModel, policy: Policy, batches: list[np.ndarray], beyond: str = "silence"
) -> tuple[Speller, list[bool]]:
    """A speller fed ``batches`` (the last at the close), and per token whether it came out
    before the close."""
    speller = Speller(model, policy, SpellerOptions(beyond=beyond))  # type: ignore[arg-type]
    early = [True for batch in batches[:-1] for _ in speller.accept(batch)]
    return speller, early + [False] * len(speller.finish(batches[-1]))


@pytest.mark.parametrize(
    ("chunking", "beyond"), [("10ms", "silence"), ("random", "mask"), ("1s", "silence")]
)
def test_streaming_equals_offline(
    bundle: tuple[Frontend, SpellerModel], chunking: str, beyond: str
) -> None:
    """Fed states as a session gets them (audio in 10 ms, random or 1 s chunks), the speller
    emits the tokens, at the boundaries, of one fed every state before the close at once."""
    frontend, model = bundle
    samples, _ = heldout("test_seen_voices", 0)
    streamed = arrivals(frontend, samples, chunk_sizes(chunking, RATE, len(samples)))
    whole = arrivals(frontend, samples, [len(samples)])
    assert sum(map(len, streamed)) == sum(map(len, whole))
    policy = AttentionGuided(8)
    online, early = spell(model, policy, streamed, beyond)
    offline, _ = spell(model, policy, [np.concatenate(whole[:-1]), whole[-1]], beyond)
    assert online.tokens == offline.tokens and len(online.tokens) > 3
    assert online.hypothesis.boundaries == offline.hypothesis.boundaries
    assert any(early)


def test_at_end_reads_the_whole_memory_as_the_ceiling_does(
    bundle: tuple[Frontend, SpellerModel],
) -> None:
    """The only-at-the-end policy says nothing before the close, then exactly what Whisper's
    greedy decoder says under its token rules reading the whole memory (the student's
    states, then the teacher's encoded silence): "-5 degrees" here, which the rules make
    "minus five degrees"."""
    frontend, model = bundle
    samples, _ = heldout("test_unseen_voices", 1)
    batches = arrivals(frontend, samples, chunk_sizes("10ms", RATE, len(samples)))
    speller, early = spell(model, AtEnd(), batches)
    states = torch.from_numpy(np.concatenate(batches))
    padded = torch.zeros(1, STATES_PER_WINDOW, states.shape[1])
    padded[0, : len(states)] = states
    memory = WhisperTextDecoder.cut(
        model.decoder.memory(padded), model.silence, torch.tensor([len(states)])
    )
    ceiling: list[int] = []  # Whisper's greedy under its token rules, each step from scratch
    with torch.inference_mode():
        while len(ceiling) < 100:
            sequence = torch.tensor([[*model.vocabulary.prompt, *ceiling]])
            suppress = model.suppress if ceiling else model.suppress_begin
            best = int(model.decoder(sequence, memory)[0, -1].masked_fill(suppress, -1e9).argmax())
            if best == model.end:
                break
            ceiling.append(best)
    assert speller.tokens == ceiling and not any(early)
    assert set(speller.hypothesis.boundaries) == {len(states)}


@dataclass
class Asked:
    """Immediate, remembering at which boundaries it was asked for each token."""

    stride: int = 16
    asked: dict[int, list[int]] = field(default_factory=dict)

    def emits(self, next_token: NextToken, boundary: int) -> bool:
        self.asked.setdefault(len(next_token.tokens), []).append(boundary)
        return True


def test_immediate_emits_at_the_first_boundary_unless_the_decoder_would_end(
    bundle: tuple[Frontend, SpellerModel],
) -> None:
    """Emit-at-once: each token comes from the first boundary it is asked at, except where
    the decoder's most likely next token is the end: a memory cut mid-word (the first
    320 ms of "the census bureau ...") makes Whisper end its guess, and the end waits for
    more states rather than ending the segment."""
    frontend, model = bundle
    samples, _ = heldout("test_seen_voices", 0)
    batches = arrivals(frontend, samples, chunk_sizes("10ms", RATE, len(samples)))
    policy = Asked()
    speller, _ = spell(model, policy, batches)
    boundaries = speller.hypothesis.boundaries
    assert boundaries[0] == 16
    waited = [i for i, asks in policy.asked.items() if len(asks) > 1]
    assert waited, "the decoder never wanted the end before the close"
    for i, asks in policy.asked.items():
        if i < len(boundaries) and boundaries[i] < len(np.concatenate(batches[:-1])):
            assert boundaries[i] == asks[-1]  # emitted at the last boundary it was asked at
    assert model.end not in speller.tokens
    # after its guess (a whole sentence from 320 ms), the end waited at every chunk
    heard = len(np.concatenate(batches[:-1]))
    assert policy.asked[len(boundaries)] == list(range(16, heard + 1, 16))


def test_a_cut_mid_word_does_not_end_the_segment(bundle: tuple[Frontend, SpellerModel]) -> None:
    """States up to 0.96 s of a 3 s sentence: whatever was said, the segment is still open,
    and the rest of the sentence follows once the rest of the states arrive."""
    frontend, model = bundle
    samples, text = heldout("test_seen_voices", 0)
    states = np.concatenate(arrivals(frontend, samples, [len(samples)]))
    speller = Speller(model, Immediate())
    said = speller.accept(states[:48])
    assert not speller.hypothesis.done and all(e.token != model.end for e in said)
    speller.accept(states[48:-10])
    speller.finish(states[-10:])
    assert speller.text.lower().startswith(("the census", "the sense"))


@dataclass(frozen=True)
class FromState:
    """A policy of the test's own: nothing before ``first`` states, then at once."""

    first: int
    stride: int = 16

    def emits(self, next_token: NextToken, boundary: int) -> bool:
        return boundary >= self.first


@pytest.mark.parametrize(("split", "index"), [("test_seen_voices", 2), ("test_unseen_voices", 3)])
def test_first_tokens_come_before_the_audio_ends(
    bundle: tuple[Frontend, SpellerModel], split: str, index: int
) -> None:
    """The attention-guided policy lets the first tokens out while the audio goes on, and a
    policy of one's own plugs in: it is asked only from the pointer on, in order."""
    frontend, model = bundle
    samples, _ = heldout(split, index)
    batches = arrivals(frontend, samples, chunk_sizes("10ms", RATE, len(samples)))
    speller, early = spell(model, AttentionGuided(8), batches)
    assert early and early[0], speller.text
    late, _ = spell(model, FromState(48), batches)
    assert min(late.hypothesis.boundaries) >= 48
    assert late.hypothesis.boundaries == sorted(late.hypothesis.boundaries)
