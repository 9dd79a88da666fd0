"""The streaming speller (asr.speller): Whisper's decoder reading the bundled student's
states as a session gets them, its policies, and the rules that keep it honest; the learnt
policy (training/speller.py): its loss against a float64 step-by-step reference, its grids
against the speller's own readings, and a tiny policy trained here that streams as it
decodes offline and speaks before the audio ends."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch

from asr.audio import read_audio
from asr.bundle import load_model
from asr.frontend import STATE_SECONDS, Frontend
from asr.speller import (
    AtEnd,
    AttentionGuided,
    Hypothesis,
    Immediate,
    Learnt,
    NextToken,
    Policy,
    PolicyEnergy,
    Reading,
    Speller,
    SpellerModel,
    SpellerOptions,
    bundle_adapter,
)
from asr.whisper_decoder import WhisperTextDecoder, load_decoder
from asr.whisper_finals import STATES_PER_WINDOW, silent_states
from tests.test_bundled_model import HELDOUT, MODEL
from tests.test_streaming import chunk_sizes
from training.speller import (
    PolicyTrainer,
    boundaries_of,
    expected_boundary_loss,
    grid,
    load_grid,
    policy_boundaries,
    styled_reference,
)

RATE = 16000


@pytest.fixture(scope="module")
def bundle() -> tuple[Frontend, SpellerModel]:
    recognizer = load_model(MODEL)
    finals = recognizer.whisper_finals()
    assert finals is not None and recognizer.frontend is not None
    assert recognizer.whisper_files is not None
    model = SpellerModel.load(*recognizer.whisper_files, silent_states(finals.teacher))
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
    model: SpellerModel,
    policy: Policy,
    batches: list[np.ndarray],
    beyond: str = "silence",
    numbers: str = "words",
    stall: int = 0,
) -> tuple[Speller, list[bool]]:
    """A speller fed ``batches`` (the last at the close), and per token whether it came out
    before the close."""
    options = SpellerOptions(beyond=beyond, numbers=numbers, stall=stall)  # type: ignore[arg-type]
    speller = Speller(model, policy, options)
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
    assert online.boundaries == offline.boundaries
    assert any(early)


def test_at_end_reads_the_whole_memory_as_the_ceiling_does(
    bundle: tuple[Frontend, SpellerModel],
) -> None:
    """The only-at-the-end policy says nothing before the close, then exactly what Whisper's
    greedy decoder says under its token rules reading the whole memory (the student's
    states, then the teacher's encoded silence), numerals too: the close reads the rest as
    Whisper writes it."""
    frontend, model = bundle
    samples, _ = heldout("test_unseen_voices", 1)
    batches = arrivals(frontend, samples, chunk_sizes("10ms", RATE, len(samples)))
    speller, early = spell(model, AtEnd(), batches)
    states = torch.from_numpy(np.concatenate(batches))
    memory = whole_memory(model, states)
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
    assert set(speller.boundaries) == {len(states)}


def whole_memory(model: SpellerModel, states: torch.Tensor) -> list:
    """Whisper's window of ``states``: theirs, then the teacher's encoded silence."""
    padded = torch.zeros(1, STATES_PER_WINDOW, states.shape[1])
    padded[0, : len(states)] = states
    return WhisperTextDecoder.cut(
        model.decoder.memory(padded), model.silence, torch.tensor([len(states)])
    )


def reference_beam(model: SpellerModel, memory: list, beam: int) -> tuple[list[int], float]:
    """Beam search of Whisper's decoder over a whole memory, each hypothesis read from
    scratch at every step: the ``beam`` likeliest of each live one's ``beam`` + 1 likeliest
    tokens go on, until ``beam`` have ended; the best by log-probability per token."""
    alive: list[tuple[list[int], float]] = [([], 0.0)]
    ended: list[tuple[list[int], float]] = []
    with torch.inference_mode():
        while alive and len(ended) < beam:
            candidates = []
            for tokens, summed in alive:
                sequence = torch.tensor([[*model.vocabulary.prompt, *tokens]])
                logits = model.decoder(sequence, memory)[0, -1]
                suppress = model.suppress if tokens else model.suppress_begin
                logprobs = logits.log_softmax(-1).masked_fill(suppress, -torch.inf)
                top = logprobs.topk(beam + 1)
                for value, token in zip(top.values.tolist(), top.indices.tolist()):
                    candidates.append((summed + value, tokens, token))
            candidates.sort(key=lambda c: -c[0])
            alive = []
            for summed, tokens, token in candidates:
                if len(alive) == beam or len(ended) >= beam:
                    break
                if token == model.end:
                    ended.append((tokens, summed))
                else:
                    alive.append(([*tokens, token], summed))
    return max(ended, key=lambda e: e[1] / max(len(e[0]), 1))


def test_a_beam_at_the_close_is_whispers_beam_over_the_whole_memory(
    bundle: tuple[Frontend, SpellerModel],
) -> None:
    """With the only-at-the-end policy, a beam of 3 says nothing before the close, then the
    text and log-probability of a beam search that reads each hypothesis from scratch over
    the whole memory: "zero two six two seven two" where greedy reads "026272."."""
    frontend, model = bundle
    samples, _ = heldout("test_unseen_voices", 9)
    batches = arrivals(frontend, samples, chunk_sizes("1s", RATE, len(samples)))
    speller = Speller(model, AtEnd(), SpellerOptions(beam=3))
    assert not [e for batch in batches[:-1] for e in speller.accept(batch)]
    speller.finish(batches[-1])
    states = torch.from_numpy(np.concatenate(batches))
    tokens, summed = reference_beam(model, whole_memory(model, states), 3)
    assert speller.tokens == tokens
    assert speller.hypothesis.logprob == pytest.approx(summed, abs=1e-3)
    greedy, _ = spell(model, AtEnd(), batches)
    assert greedy.tokens != tokens


@pytest.mark.parametrize("chunking", ["10ms", "1s"])
def test_a_beam_streams_as_it_decodes_offline_each_hypothesis_with_its_pointer(
    bundle: tuple[Frontend, SpellerModel], chunking: str
) -> None:
    """A beam of 3 under the attention-guided policy: its hypotheses hold pointers of their
    own; what it lets out before the audio ends is each time the end of its best
    hypothesis; streamed in any chunking it emits the tokens, at the boundaries, of a beam
    fed every state at once."""
    frontend, model = bundle
    samples, _ = heldout("test_unseen_voices", 10)
    streamed = arrivals(frontend, samples, chunk_sizes(chunking, RATE, len(samples)))
    speller = Speller(model, AttentionGuided(8), SpellerOptions(beam=3))
    shown_early = pointers_differ = False
    for batch in streamed[:-1]:
        said = [emission.token for emission in speller.accept(batch)]
        if said:
            assert speller.tokens[len(speller.tokens) - len(said) :] == said
            shown_early = True
        pointers_differ |= len({hyp.pointer for hyp in speller.beam}) > 1
    speller.finish(streamed[-1])
    assert pointers_differ and shown_early
    whole = arrivals(frontend, samples, [len(samples)])
    offline = Speller(model, AttentionGuided(8), SpellerOptions(beam=3))
    offline.accept(np.concatenate(whole[:-1]))
    offline.finish(whole[-1])
    assert speller.tokens == offline.tokens and speller.boundaries == offline.boundaries


def test_numbers_are_spelled_while_the_segment_is_open(
    bundle: tuple[Frontend, SpellerModel],
) -> None:
    """Whisper's numerals wait for the number's end; spelled, a number streams word by
    word. Whisper's own decoder, asked at every chunk end, lets "1,000" out before the close
    where the speller keeps numerals, and no token with a digit or a currency sign where it
    spells them; with the bundle's adapters, "one thousand one hundred three pounds and
    fifty pence" comes out in words before the close."""
    frontend, own = bundle
    adapted, _ = load_model(MODEL).speller()
    assert bundle_adapter(MODEL) is not None
    samples, reference = heldout("test_unseen_voices", 3)
    assert reference == "one thousand one hundred three pounds and fifty pence"
    batches = arrivals(frontend, samples, chunk_sizes("10ms", RATE, len(samples)))
    numeral = own.vocabulary.numerals(len(own.decoder.embed.weight)).nonzero()
    numeral = set(numeral.flatten().tolist())
    for model, numbers, numerals_early in (
        (own, "digits", True),
        (own, "words", False),
        (adapted, "words", False),
    ):
        speller, early = spell(model, Immediate(), batches, numbers=numbers)
        before_close = [t for t, e in zip(speller.tokens, early) if e]
        assert bool(set(before_close) & numeral) == numerals_early, (numbers, speller.text)
    assert len(before_close) >= 6
    assert speller.text.lower().startswith("one thousand one hundred three pounds and")


@dataclass
class Asked:
    """Immediate, remembering at which boundaries it was asked for each token."""

    stride: int = 16
    asked: dict[int, list[int]] = field(default_factory=dict)
    reads_attention: ClassVar[bool] = False

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
    boundaries = speller.boundaries
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


def test_a_stalled_segment_is_read_again_from_its_start(
    bundle: tuple[Frontend, SpellerModel],
) -> None:
    """Emit-at-once lets out a guess from the first 320 ms ("the sense of ...") and then
    waits on the end of text to the close. With ``stall``, a hypothesis that waits that long
    past its last token has the segment read again from its start, from the states so far,
    and goes on from there: the sentence is read right, at the same boundaries in any
    chunking; and a segment read again to the text it had waits without reading again."""
    frontend, model = bundle
    samples, text = heldout("test_seen_voices", 0)
    streamed = arrivals(frontend, samples, chunk_sizes("10ms", RATE, len(samples)))
    whole = arrivals(frontend, samples, [len(samples)])
    whole = [np.concatenate(whole[:-1]), whole[-1]]
    stuck, _ = spell(model, Immediate(), streamed)
    assert stuck.rereads == 0 and not stuck.text.lower().startswith("the census bureau")
    read = []
    for batches in (streamed, whole):
        speller, early = spell(model, Immediate(), batches, stall=32)
        read.append((speller.tokens, speller.boundaries, speller.rereads))
        assert any(early)
    assert read[0] == read[1]
    assert read[0][2] >= 1
    assert speller.text.lower().rstrip(".") == text
    # over 3.2 s more of the clip's last (quiet) state, the sentence is read again once, to
    # the same text: settled, it is not read again
    states = np.concatenate(whole)
    speller = Speller(model, Immediate(), SpellerOptions(stall=32))
    speller.accept(states)
    said, rereads = speller.text, speller.rereads
    assert not speller.hypothesis.settled
    speller.accept(np.repeat(states[-1:], 160, axis=0))
    assert (speller.text, speller.rereads) == (said, rereads + 1)
    assert speller.hypothesis.settled
    with pytest.raises(ValueError, match="stall must be at least 0"):
        SpellerOptions(stall=-1)


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


def test_an_own_wait_token_waits_while_open_and_is_never_written(
    bundle: tuple[Frontend, SpellerModel],
) -> None:
    """Adapters may say "wait" by a token of their own (here the sentence's first token
    plays it): while the segment is open the speller waits where the decoder says it, and
    at the close it is never written, so the decoder reads on to its end of text."""
    frontend, model = bundle
    samples, _ = heldout("test_seen_voices", 0)
    states = np.concatenate(arrivals(frontend, samples, [len(samples)]))
    plain = Speller(model, Immediate())
    plain.accept(states)
    plain.finish()
    assert model.wait == model.end  # Whisper's own decoder waits by the end of text
    first = plain.tokens[0]
    # a decoder of its own (a model hooks its decoder's final norm), with the same weights,
    # so the fixture's memory of silence serves it too
    decoder, rules = load_decoder(MODEL / "whisper_decoder.safetensors")
    waiting = SpellerModel(decoder, rules, model.vocabulary, model.silence, first)
    speller = Speller(waiting, Immediate())
    said = speller.accept(states[:-10])
    assert all(e.token != first for e in said)
    assert not speller.hypothesis.done
    speller.finish(states[-10:])
    assert speller.tokens and first not in speller.tokens
    assert speller.tokens[-1] != model.end


@dataclass(frozen=True)
class FromState:
    """A policy of the test's own: nothing before ``first`` states, then at once."""

    first: int
    stride: int = 16
    reads_attention: ClassVar[bool] = False

    def emits(self, next_token: NextToken, boundary: int) -> bool:
        return boundary >= self.first


def test_agreement_lets_out_what_the_decoder_has_settled_on(
    bundle: tuple[Frontend, SpellerModel],
) -> None:
    """A learnt policy whose energy always says no streams nothing before the close; with
    agreement 2 it lets a token out where the decoder read it alike at two chunk ends in a
    row past the pointer, and only there, so the first tokens come while the audio goes on."""
    frontend, model = bundle
    samples, _ = heldout("test_seen_voices", 2)
    batches = arrivals(frontend, samples, chunk_sizes("10ms", RATE, len(samples)))
    energy = PolicyEnergy()
    with torch.no_grad():
        energy.r.fill_(-100.0)  # p = 0 everywhere
    silent, early = spell(model, Learnt(energy), batches)
    assert silent.tokens and not any(early)
    agreed, early = spell(model, Learnt(energy, agreement=2), batches)
    assert early and early[0], agreed.text
    hyp = Hypothesis(list(model.vocabulary.prompt))
    reader = Speller(model, AtEnd())
    reader.accept(np.concatenate(batches[:-1]))
    early_ones = [(t, b) for t, b, e in zip(agreed.tokens, agreed.boundaries, early) if e]
    with torch.inference_mode():
        for token, boundary in early_ones:  # read alike there and one chunk before
            assert boundary - 16 > hyp.pointer
            readings = [reader.read(hyp, b) for b in (boundary - 16, boundary)]
            assert [r.token for r in readings] == [token, token]
            for later in range(hyp.pointer + 32, boundary, 16):  # and at no chunk end before
                pair = [reader.read(hyp, b).token for b in (later - 16, later)]
                assert pair[0] != pair[1] or pair[1] == model.end
            hyp = hyp.then(readings[1], token, 0.0)


def test_confidence_lets_out_what_the_decoder_is_sure_of(
    bundle: tuple[Frontend, SpellerModel],
) -> None:
    """A learnt policy whose energy always says no, with confidence 0.9, lets a token out
    before the close exactly at the first chunk end from the pointer where the adapted
    decoder's likeliest token has probability 0.9 or more (and may be said), so the first
    tokens come while the audio goes on."""
    frontend, _ = bundle
    model, _ = load_model(MODEL).speller()
    samples, _ = heldout("test_seen_voices", 2)
    batches = arrivals(frontend, samples, chunk_sizes("10ms", RATE, len(samples)))
    energy = PolicyEnergy()
    with torch.no_grad():
        energy.r.fill_(-100.0)  # p = 0 everywhere
    sure, early = spell(model, Learnt(energy, confidence=0.9), batches)
    assert early and early[0], sure.text
    reader = Speller(model, AtEnd())
    reader.accept(np.concatenate(batches[:-1]))
    hyp = Hypothesis(list(model.vocabulary.prompt))
    with torch.inference_mode():
        for token, boundary, before in zip(sure.tokens, sure.boundaries, early):
            if not before:
                break
            for b in range(-(-max(hyp.pointer, 1) // 16) * 16, boundary + 1, 16):
                reading = reader.read(hyp, b)
                said = reading.token != model.end
                assert (b == boundary) == (said and reading.logprobs.max().exp() >= 0.9)
            assert reader.read(hyp, boundary).token == token
            hyp = hyp.then(reader.read(hyp, boundary), token, 0.0)


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
    assert min(late.boundaries) >= 48
    assert late.boundaries == sorted(late.boundaries)


def reference_loss(energy, logp, late, tokens, bounds, weight, cap=1.0):  # noqa: ANN001, ANN201
    """The loss step by step in float64: Raffel's recurrence over boundaries, one token at
    a time, p at each row's close 1, each P above ``cap`` counted as ``cap``."""
    total, count = 0.0, 0
    for b in range(energy.shape[0]):
        width = int(bounds[b].sum())
        previous = [1.0] + [0.0] * (width - 1)
        for i in range(int(tokens[b].sum())):
            p = [torch.sigmoid(energy[b, i, j]) for j in range(width - 1)] + [1.0]
            q, alpha = 0.0, []
            for j in range(width):
                q = (1 - p[j - 1]) * q + previous[j] if j else previous[0]
                alpha.append(p[j] * q)
            like = sum(a * torch.exp(logp[b, i, j]).clamp(max=cap) for j, a in enumerate(alpha))
            total = (
                total
                - torch.log(like)
                + weight * sum(a * late[b, i, j] for j, a in enumerate(alpha))
            )
            count += 1
            previous = alpha
    return total / count


@pytest.mark.parametrize("cap", [1.0, 0.5])
def test_expected_boundary_loss_matches_a_float64_reference(cap: float) -> None:
    """Value and gradient (energies and log-probabilities), on a small random grid with
    rows of different lengths, energies wide enough that p saturates at places; with a
    likelihood cap, P past it counts as the cap (about half the cells here)."""
    torch.manual_seed(0)
    energy = (4 * torch.randn(3, 5, 7, dtype=torch.float64)).requires_grad_()
    logp = (-1.4 * torch.rand(3, 5, 7, dtype=torch.float64)).requires_grad_()
    late = torch.rand(3, 5, 7, dtype=torch.float64)
    tokens = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    bounds = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 6 + [0]], dtype=torch.bool)
    want = reference_loss(energy, logp, late, tokens, bounds, 0.7, cap)
    want_grads = torch.autograd.grad(want, (energy, logp))
    got, _, _ = expected_boundary_loss(
        energy.float(), logp.float(), late.float(), tokens, bounds, 0.7, cap
    )
    got_grads = torch.autograd.grad(got, (energy, logp))
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("prefix", ["reference", "on-policy"])
def test_the_grid_is_what_the_speller_reads(
    bundle: tuple[Frontend, SpellerModel], prefix: str
) -> None:
    """A grid's log P(y_i | b_j) is the speller's reading of token i at b_j once tokens
    before it were emitted at their reference boundaries, or, on-policy, where a policy
    (here: nothing before 48 states, then at once) let each out, teacher-forced."""
    frontend, model = bundle
    samples, _ = heldout("test_seen_voices", 0)
    states = torch.from_numpy(np.concatenate(arrivals(frontend, samples, [len(samples)])))
    whole = Speller(model, AtEnd())
    whole.finish(states)
    sentence = whole.tokens[:4]  # targets: the speller's own reading of the whole memory
    ends = [16, 20, 40, 70]
    refs = None
    if prefix == "on-policy":
        refs = policy_boundaries(model, FromState(48), states, sentence)
        assert refs == [48] * 4
    g = grid(model, states, sentence, ends, len(samples) / RATE, refs)
    assert g["refs"].tolist() == (refs or [16, 32, 48, 80])
    bounds = boundaries_of(len(states))
    speller = Speller(model, AtEnd())
    speller.accept(states)
    hyp = speller.hypothesis
    with torch.inference_mode():
        for i, token in enumerate(sentence):
            for j in (0, 2, len(bounds) - 1):
                reading = speller.read(hyp, bounds[j])
                got = float(reading.logprobs[token])
                assert got == pytest.approx(float(g["logp"][i, j]), abs=1e-4)
            hyp = hyp.then(speller.read(hyp, int(g["refs"][i])), token, 0.0)


@pytest.fixture(scope="module")
def tiny_policy(
    bundle: tuple[Frontend, SpellerModel], tmp_path_factory: pytest.TempPathFactory
) -> Learnt:
    """A policy trained here for seconds on four held-out synthetic utterances (their
    Whisper readings as targets), with a latency weight that makes it speak early."""
    from asr.bundle import load_model
    from asr.config import WhisperFinalsConfig
    from tests.test_bundled_model import MODEL

    frontend, model = bundle
    finals = load_model(MODEL).whisper_finals()
    assert finals is not None
    out = tmp_path_factory.mktemp("policy")
    grids = []
    for k in range(4):
        samples, _ = heldout("test_seen_voices", k)
        stream = frontend.stream()
        stream.keep = True  # type: ignore[attr-defined]
        states = np.concatenate([stream.accept(samples), stream.finish()])
        mel = stream.mel_between(0, 1 << 30)  # type: ignore[attr-defined]
        text = finals.transcribe([mel], WhisperFinalsConfig(beam_size=1))[0]
        path = out / f"{k}.npz"
        np.savez(
            path,
            **grid(model, torch.from_numpy(states), text.tokens, text.ends, len(samples) / RATE),
        )
        grids.append(load_grid(path))
    trainer = PolicyTrainer([g for g in grids if g is not None], out, 2.0, 1e-2, 4, 0)
    trainer.fit(60)
    return Learnt.load(out / "speller_policy.safetensors")


@pytest.mark.parametrize("chunking", ["10ms", "random", "1s"])
def test_a_learnt_policy_streams_as_it_decodes_offline(
    bundle: tuple[Frontend, SpellerModel],
    tiny_policy: Learnt,
    chunking: str,
) -> None:
    """Streamed in any chunking, the tiny learnt policy emits the tokens, at the
    boundaries, it emits fed every state at once, and its first tokens before the close."""
    frontend, model = bundle
    samples, _ = heldout("test_unseen_voices", 3)
    streamed = arrivals(frontend, samples, chunk_sizes(chunking, RATE, len(samples)))
    whole = arrivals(frontend, samples, [len(samples)])
    online, early = spell(model, tiny_policy, streamed)
    offline, _ = spell(model, tiny_policy, [np.concatenate(whole[:-1]), whole[-1]])
    assert online.tokens == offline.tokens and len(online.tokens) > 3
    assert online.boundaries == offline.boundaries
    assert early and early[0], "the first token waited for the close"


def test_a_first_threshold_holds_back_only_a_segments_first_token(
    bundle: tuple[Frontend, SpellerModel],
) -> None:
    """An energy that gives p = 0.7 everywhere lets tokens out as the audio comes; with a
    first token's threshold of 0.9 the first token, and so every one after it, waits for
    the close (the same text); with 0.6 the first comes out early again, where 0.5 has it."""
    frontend, model = bundle
    samples, _ = heldout("test_seen_voices", 2)
    batches = arrivals(frontend, samples, chunk_sizes("10ms", RATE, len(samples)))
    energy = PolicyEnergy()
    with torch.no_grad():
        energy.g.zero_()  # the energy is r alone
        energy.r.fill_(math.log(0.7 / 0.3))
    plain, early = spell(model, Learnt(energy), batches)
    assert early[0]
    held, held_early = spell(model, Learnt(energy, first_threshold=0.9), batches)
    assert not any(held_early)
    closed, _ = spell(model, AtEnd(), batches)
    assert held.tokens == closed.tokens
    eased, eased_early = spell(model, Learnt(energy, first_threshold=0.6), batches)
    assert eased.boundaries[0] == plain.boundaries[0] and eased_early[0]


@dataclass
class Waiting:
    """What a policy sees of a next token (as :class:`NextToken`), the decoder reading the
    same ``token`` at every boundary."""

    tokens: list[int]
    pointer: int
    token: int = 7
    states: torch.Tensor = field(default_factory=lambda: torch.zeros(200, 6))

    def read(self, boundary: int) -> Reading:
        return Reading(boundary, torch.zeros(10), self.token, None, None, torch.zeros(8))  # type: ignore[arg-type]


def test_patience_lets_agreement_free_only_a_token_held_long_after_the_first() -> None:
    """An energy that always says no, agreement 2: from the pointer on, a token goes out
    once two chunk ends past the pointer read it alike; with patience 32 only once the
    pointer has waited 32 states, and a segment's first token never by agreement."""
    energy = PolicyEnergy(8, 6, 4)
    with torch.no_grad():
        energy.r.fill_(-100.0)  # p = 0 everywhere
    eager = Learnt(energy, agreement=2)
    patient = Learnt(energy, agreement=2, patience=32)
    later = Waiting(tokens=[5], pointer=10)
    assert not eager.emits(later, 26)  # the chunk end before lies at the pointer
    assert eager.emits(later, 34) and not patient.emits(later, 34)  # waited 24 states
    assert eager.emits(later, 42) and patient.emits(later, 42)  # waited 32
    first = Waiting(tokens=[], pointer=10)
    assert eager.emits(first, 42) and not patient.emits(first, 200)
    assert not Learnt(energy, patience=32).emits(later, 200)  # patience without agreement


def test_a_memory_cut_mid_word_does_not_end_the_sentence(
    bundle: tuple[Frontend, SpellerModel],
    tiny_policy: Learnt,
) -> None:
    """0.96 s of a 3 s sentence under the learnt policy: no end of text, the segment open."""
    frontend, model = bundle
    samples, _ = heldout("test_seen_voices", 0)
    states = np.concatenate(arrivals(frontend, samples, [len(samples)]))
    speller = Speller(model, tiny_policy)
    said = speller.accept(states[:48])
    assert not speller.hypothesis.done and all(e.token != model.end for e in said)


def test_a_policy_file_round_trips(tmp_path) -> None:  # noqa: ANN001
    energy = PolicyEnergy(8, 6, 4)
    energy.save(tmp_path / "p.safetensors", threshold=0.7, meta={"confidence": "0.9"})
    loaded = Learnt.load(tmp_path / "p.safetensors")
    assert loaded.threshold == 0.7 and math.isclose(float(loaded.energy.r.detach()), -4.0)
    assert loaded.confidence == 0.9 and loaded.agreement == 0
    s, h = torch.randn(8), torch.randn(6)
    with torch.no_grad():
        assert float(loaded.energy(s, h)) == pytest.approx(float(energy(s, h)))
    energy.save(tmp_path / "sure.safetensors", meta={"confidence": "1"})
    with pytest.raises(ValueError, match="confidence must be 0 .off. or in .0, 1."):
        Learnt.load(tmp_path / "sure.safetensors")
    energy.save(tmp_path / "first.safetensors", meta={"first_threshold": "0.9"})
    assert Learnt.load(tmp_path / "first.safetensors").first_threshold == 0.9
    energy.save(tmp_path / "never.safetensors", meta={"first_threshold": "1"})
    with pytest.raises(ValueError, match="first token's threshold must be 0 .off. or in"):
        Learnt.load(tmp_path / "never.safetensors")
    energy.save(tmp_path / "patient.safetensors", meta={"agreement": "2", "patience": "32"})
    assert Learnt.load(tmp_path / "patient.safetensors").patience == 32
    energy.save(tmp_path / "hasty.safetensors", meta={"patience": "-16"})
    with pytest.raises(ValueError, match="patience must be at least 0 states"):
        Learnt.load(tmp_path / "hasty.safetensors")


def train_speller_args(  # noqa: ANN201
    tmp_path,  # noqa: ANN001
    clips: int,
    *extra: str,
    split: str = "test_seen_voices",
    first: int = 0,
):
    """`asr train-speller`'s options over a manifest of ``clips`` held-out clips of
    ``split`` from its ``first``, without text, grids in ``tmp_path``/grids."""
    import argparse

    from training.speller import add_arguments

    manifest = tmp_path / "unlabelled.jsonl"
    rows = (HELDOUT / f"{split}.jsonl").read_text().splitlines()[first : first + clips]
    lines = []
    for line in rows:
        row = json.loads(line)
        audio = str(HELDOUT / row["audio"])
        lines.append(json.dumps({"id": row["id"], "audio": audio, "duration": row["duration"]}))
    manifest.write_text("\n".join(lines) + "\n")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(
        ["--train", str(manifest), "--cache", str(tmp_path / "grids")]
        + ["--out", str(tmp_path / "out"), *extra]
    )


def test_train_speller_learns_from_clips_without_text(tmp_path) -> None:  # noqa: ANN001
    """`asr train-speller` reads Whisper's own transcript of each clip, so unlabelled audio
    (most of the real English) trains the policy: two clips without text give two grids and
    a policy file; with --prefix-policy, two more read where that policy let the tokens
    out, and a policy learnt on another student is refused."""
    import argparse

    from asr.speller import POLICY_FILE, metadata_for
    from training.speller import run

    args = train_speller_args(tmp_path, 2, "--model", str(MODEL), "--epochs", "1", "--batch", "2")
    assert run(args) == 0
    assert len(list((tmp_path / "grids").glob("*.npz"))) == 2
    assert (tmp_path / "out" / POLICY_FILE).is_file()
    # a likelihood cap: recorded in the policy file; one outside (0, 1] refused by name
    capped = argparse.Namespace(
        **vars(args)
        | {"likelihood_cap": 0.5, "agreement": 2, "patience": 32, "out": tmp_path / "cap"}
    )
    assert run(capped) == 0
    assert metadata_for(tmp_path / "cap" / POLICY_FILE, {}, "")["likelihood_cap"] == "0.5"
    served = Learnt.load(tmp_path / "cap" / POLICY_FILE)  # and how it serves
    assert (served.agreement, served.patience) == (2, 32)
    capped.likelihood_cap = 1.5
    with pytest.raises(ValueError, match="--likelihood-cap must be in"):
        run(capped)
    # on-policy: the bundle's policy lets the tokens out, two more grids beside the two
    args.prefix_policy, args.out = MODEL / POLICY_FILE, tmp_path / "dagger"
    assert run(args) == 0
    assert (tmp_path / "dagger" / POLICY_FILE).is_file()
    read = {}  # per clip's transcript, its grids' boundaries of the earlier tokens
    for path in (tmp_path / "grids").glob("*.npz"):
        with np.load(path) as g:
            read.setdefault(tuple(g["tokens"].tolist()), []).append(tuple(g["refs"].tolist()))
    assert sorted(map(len, read.values())) == [2, 2]  # each clip: reference and on-policy
    assert any(a != b for a, b in read.values())
    args.prefix_policy = tmp_path / "out" / POLICY_FILE  # learnt without the bundle's names
    PolicyEnergy().save(args.prefix_policy, meta={"student_sha1": "another"})
    with pytest.raises(ValueError, match="another streaming student"):
        run(args)


def test_grids_follow_the_bundles_student_not_its_path(tmp_path) -> None:  # noqa: ANN001
    """A recipe's candidate bundle keeps its path while its student changes (a new student
    blended in): its grids are computed again, not read from the old student's cache."""
    from asr.frontend import BUNDLE_ENCODER_FILE
    from asr.speller import ADAPTER_FILE, POLICY_FILE
    from asr.whisper_encoder import load_encoder, weights_metadata
    from training.distill import save_encoder
    from training.speller import run

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    for path in MODEL.iterdir():  # without the speller, which was learnt on the old student
        if path.name not in (ADAPTER_FILE, POLICY_FILE):
            (bundle / path.name).symlink_to(path.resolve())
    args = train_speller_args(tmp_path, 1, "--model", str(bundle), "--grids-only")
    grids = tmp_path / "grids"
    assert run(args) == 0
    first = sorted(grids.glob("*.npz"))
    assert len(first) == 1
    written = first[0].stat().st_mtime_ns
    assert run(args) == 0  # the same student: the grid is read, not written again
    assert sorted(grids.glob("*.npz")) == first and first[0].stat().st_mtime_ns == written
    student = load_encoder(MODEL / BUNDLE_ENCODER_FILE)
    with torch.no_grad():
        student.conv1.bias.add_(0.01)
    changed = save_encoder(
        student, tmp_path / "changed", weights_metadata(MODEL / BUNDLE_ENCODER_FILE)
    )
    (bundle / BUNDLE_ENCODER_FILE).unlink()
    (bundle / BUNDLE_ENCODER_FILE).symlink_to(changed)
    assert run(args) == 0
    assert len(list(grids.glob("*.npz"))) == 2


def test_grids_read_a_clip_in_the_bundles_window(tmp_path) -> None:  # noqa: ANN001
    """A grid's targets are Whisper's reading of the clip as the bundle's finals read a
    segment, inside Whisper's padding to decode.whisper_finals.window_s: a short clip read
    from its own states alone (a window of 0) comes out as another sentence (with numbers
    spelled, as the shipped speller's targets), in a grid of its own."""
    from asr.speller import ADAPTER_FILE, POLICY_FILE
    from training.recipes.bundle_config import main as bundle_config
    from training.recipes.textnorm import normalize
    from training.speller import run

    said, seen = {}, set()
    for window in ("10", "0"):
        bundle = tmp_path / f"window{window}"
        bundle.mkdir()
        for path in MODEL.iterdir():
            if path.name not in (ADAPTER_FILE, POLICY_FILE, "config.json"):
                (bundle / path.name).symlink_to(path.resolve())
        (bundle / "config.json").write_text((MODEL / "config.json").read_text())
        assert bundle_config([str(bundle), f"decode.whisper_finals.window_s={window}"]) == 0
        args = train_speller_args(
            tmp_path,
            1,
            *("--model", str(bundle), "--grids-only", "--numbers", "words"),
            split="test_short",
            first=1,
        )
        assert run(args) == 0
        (path,) = set((tmp_path / "grids").glob("*.npz")) - seen  # a grid of its own
        seen.add(path)
        with np.load(path) as data:
            tokens = data["tokens"].tolist()
        finals = load_model(bundle).whisper_finals()
        assert finals is not None
        said[window] = normalize(finals.vocabulary.decode(tokens))
    assert said["10"] == "nineteen eighty three"
    assert "nineteen" not in said["0"]


@pytest.mark.parametrize(
    ("transcript", "reference", "target"),
    [
        # Whisper's misheard words give way to the reference's; its case and marks stay
        ("Seer alpha hotel.", "sierra alpha hotel", "Sierra alpha hotel."),
        ("Hello, Alice. How are you?", "hello alice how are you", "Hello, Alice. How are you?"),
        ("I'm going to be careful.", "nineteen eighty three", "Nineteen eighty three."),
        # words compared as they are scored: numerals as said, spelled letters joined
        ("Platform 14, B.", "platform fourteen b", "Platform 14, B."),
        ("L. W.", "l w", "L. W."),
        ("LWN.", "l w", "LW."),
        ("Bay fifteen acts.", "bay fifteen x", "Bay fifteen X."),
        # the closing mark ends the text, whichever word ends it; a comma does not
        ("Call.", "call maria", "Call maria."),
        ("In command, command, you're in command.", "in command command", "In command, command."),
        ("", "zero one", "Zero one"),
        ("Hello.", "", ""),
    ],
)
def test_a_reference_is_written_as_whisper_writes_the_words_it_heard_right(
    transcript: str, reference: str, target: str
) -> None:
    assert styled_reference(transcript, reference) == target


def test_spoken_manifests_targets_are_their_own_words_in_whispers_style(tmp_path: Path) -> None:
    """``--spoken``: the grid of a clip of such a manifest says its text's words (a short one
    the teacher misreads, "monday the sixteenth"), capitalised and closed as Whisper writes,
    timed in order inside the clip; a clip of another manifest keeps Whisper's reading, its
    text or none; a --spoken manifest of none of the run's clips is refused by name."""
    from training.recipes.textnorm import normalize
    from training.speller import add_arguments, run

    manifests, longest = [], 0.0
    for split, index in (("test_short", 8), ("test_seen_voices", 0)):
        row = json.loads((HELDOUT / f"{split}.jsonl").read_text().splitlines()[index])
        row["audio"] = str(HELDOUT / row["audio"])
        manifests.append(tmp_path / f"{split}.jsonl")
        manifests[-1].write_text(json.dumps(row) + "\n")
        longest = max(longest, row["duration"])
    assert "monday the sixteenth" in manifests[0].read_text()
    finals = load_model(MODEL).whisper_finals()
    assert finals is not None
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    read: dict[str, set[str]] = {}
    for name, spoken in (("whisper", []), ("spoken", [str(manifests[0])])):
        args = parser.parse_args(
            ["--model", str(MODEL), "--train", *map(str, manifests), "--grids-only"]
            + ["--cache", str(tmp_path / name), "--out", str(tmp_path / "out")]
            + ["--numbers", "words", *(["--spoken", *spoken] if spoken else [])]
        )
        assert run(args) == 0
        read[name] = set()
        for path in (tmp_path / name).glob("*.npz"):
            with np.load(path) as grid:
                read[name].add(finals.vocabulary.decode(grid["tokens"].tolist()))
                ends = grid["ends"]
            assert (np.diff(ends) >= 0).all() and ends[-1] <= longest + STATE_SECONDS
    assert len(read["whisper"]) == len(read["spoken"]) == 2
    said = [text for text in read["spoken"] if normalize(text) == "monday the sixteenth"]
    assert len(said) == 1 and said[0][0] == "M" and said[0][-1] in ".?!", read
    assert said[0] not in read["whisper"]  # the teacher misread it
    assert len(read["whisper"] & read["spoken"]) == 1  # the other clip: Whisper's reading
    other = json.loads((HELDOUT / "test_unseen_voices.jsonl").read_text().splitlines()[0])
    other["audio"] = str(HELDOUT / other["audio"])
    args.spoken = [tmp_path / "elsewhere.jsonl"]  # a clip the run does not read
    args.spoken[0].write_text(json.dumps(other) + "\n")
    with pytest.raises(ValueError, match="elsewhere.jsonl: none of its clips is among this run's"):
        run(args)
