"""The online hard-attention search (issue 3, test 4): linear time for hard monotonic
attention and faster-than-linear for softmax in one run, at most T + U energy
evaluations, tokens emitted as soon as the state that selects them exists, and
segment boundaries."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from asr.attention import initial_alignment
from asr.audio import load_audio
from asr.bundle import load_model
from asr.config import Config
from asr.decoding import SegmentSearch, decode_batch, drain
from asr.features import Fbank
from asr.model import EOS_ID, DecoderState, Seq2Seq


def random_model(kind: str, **decode: object) -> tuple[Seq2Seq, Config]:
    """A random decoder over 256-dim memory; r = 0 so the monotonic scan selects states."""
    data = Config().to_dict()
    data["model"]["encoder"].update(units=256)
    data["model"]["decoder"].update(units=64, embed_dim=32)
    data["model"]["attention"].update(kind=kind, dim=128, init_r=0.0)
    data["decode"].update(decode)
    config = Config.from_dict(data)
    torch.manual_seed(0)
    return Seq2Seq(config.model, 40).eval(), config


def random_memory(states: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(states, 256, generator=torch.Generator().manual_seed(seed)).tanh()


@torch.no_grad()
def timed_decode(model: Seq2Seq, config: Config, memory: torch.Tensor):
    start = time.thread_time()  # CPU time of this thread: robust to other jobs on the machine
    search = SegmentSearch(model, config.decode)
    search.append(memory)
    segments = drain(search)
    return time.thread_time() - start, segments, search


def test_decode_time_is_linear_for_hard_monotonic_and_superlinear_for_softmax() -> None:
    base = 100
    results = {}
    for kind in ("monotonic", "softmax"):
        # No end-of-sentence: decoding runs over the whole memory. Softmax stops
        # only at the token cap, which grows with the input as speech would.
        model, config = random_model(kind, endpoint_on_eos=False)
        for factor in (1, 16):
            states = base * factor
            config.decode.max_tokens = states // 2 if kind == "softmax" else 100 * states
            memory = random_memory(states)
            # each run's best time counts (the short one repeated more) so that a moment of
            # load on a shared machine cannot dominate either
            runs = [timed_decode(model, config, memory) for _ in range(3 if factor == 1 else 2)]
            results[kind, factor] = (min(r[0] for r in runs), runs[0][1])

    for kind in ("monotonic", "softmax"):
        for factor in (1, 16):
            _, segments = results[kind, factor]
            states = base * factor
            tokens = sum(len(s.tokens) for s in segments)
            positions = [p for s in segments for p in s.positions]
            # tokens all through the input, and more of them for longer input
            assert tokens >= states // 2 and max(positions) >= 0.95 * states, (kind, factor)

    mono = results["monotonic", 16][0] / results["monotonic", 1][0]
    soft = results["softmax", 16][0] / results["softmax", 1][0]
    assert mono <= 20, f"hard monotonic: 16x input took {mono:.1f}x time"
    assert soft >= 24 and soft >= 1.3 * mono, f"softmax {soft:.1f}x vs monotonic {mono:.1f}x"


@pytest.mark.parametrize("beam", [1, 3])
def test_hard_scan_evaluates_at_most_t_plus_u_energies(beam: int) -> None:
    model, config = random_model("monotonic", endpoint_on_eos=False, beam_size=beam)
    for states in (37, 400):
        config.decode.max_tokens = 100 * states
        with torch.no_grad():
            search = SegmentSearch(model, config.decode)
            search.append(random_memory(states, seed=states))
            segments = drain(search)
        steps = sum(len(s.tokens) + 1 for s in segments)  # tokens and each end of sentence
        assert steps > states  # tokens everywhere, several per state
        assert 0 < search.evaluations <= beam * (states + steps)


@torch.no_grad()
def test_tokens_come_out_as_soon_as_their_state_exists(tiny_bundle: Path, speech_dir: Path) -> None:
    recognizer = load_model(tiny_bundle)
    model = recognizer.model
    config = recognizer.config
    config.decode.endpoint_on_eos = False  # one segment over the whole utterance
    feats = torch.from_numpy(
        Fbank(config.model.features).compute(load_audio(speech_dir / "utt09.wav"))
    )
    memory, _ = model.encode(feats.unsqueeze(0), torch.tensor([len(feats)]))
    offline = drain(_filled(SegmentSearch(model, config.decode), memory[0]))
    assert len(offline) == 1 and len(offline[0].tokens) > 3
    tokens, positions = offline[0].tokens, offline[0].positions
    search = SegmentSearch(model, config.decode)
    for n in range(memory.shape[1]):
        search.append(memory[0, n : n + 1])
        assert search.advance() is None
        prefix = search.stable_prefix()
        # exactly the tokens whose selected state has arrived
        assert prefix == [t for t, p in zip(tokens, positions) if p <= n]
        assert search.evaluations <= n + 1 + len(prefix) + 1
    segment = search.advance(complete=True)
    assert segment is not None and segment.tokens == tokens


def _filled(search: SegmentSearch, memory: torch.Tensor) -> SegmentSearch:
    search.append(memory)
    return search


@torch.no_grad()
def test_softmax_segment_consumes_the_whole_memory() -> None:
    model, config = random_model("softmax")
    with torch.no_grad():
        model.decoder.out.bias[EOS_ID] = 100.0  # end of sentence at once
    search = SegmentSearch(model, config.decode)
    search.append(random_memory(30))
    segment = search.advance(complete=True)
    assert segment is not None and segment.end == 30
    assert search.segment_start == 30  # no second segment over the last state
    assert drain(search) == []


@torch.no_grad()
def test_end_of_sentence_closes_the_segment_and_decoding_resumes_there() -> None:
    model, config = random_model("monotonic", beam_size=2)
    search = SegmentSearch(model, config.decode)
    memory = random_memory(60)
    search.append(memory)
    segments = drain(search)
    for before, after in zip(segments, segments[1:]):
        assert before.end <= after.start
        assert all(before.start <= p < before.end for p in before.positions if p >= 0)


@torch.no_grad()
def test_decode_batch_matches_the_search_per_utterance(tiny_bundle: Path, speech_dir: Path) -> None:
    recognizer = load_model(tiny_bundle)
    fbank = Fbank(recognizer.config.model.features)
    feats = [
        torch.from_numpy(fbank.compute(load_audio(speech_dir / f"utt0{i}.wav"))) for i in range(3)
    ]
    lens = torch.tensor([len(f) for f in feats])
    padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)
    batch = decode_batch(recognizer.model, padded, lens, recognizer.config.decode)
    for f, got in zip(feats, batch):
        one = decode_batch(
            recognizer.model, f.unsqueeze(0), torch.tensor([len(f)]), recognizer.config.decode
        )[0]
        assert [s.tokens for s in got] == [s.tokens for s in one]
        assert sum(len(s.tokens) for s in got) > 0


def test_bad_decode_settings_are_refused() -> None:
    model, config = random_model("monotonic")
    for field in ("beam_size", "max_tokens", "max_tokens_per_state"):
        bad = Config.from_dict(config.to_dict())
        setattr(bad.decode, field, 0)
        with pytest.raises(ValueError, match=field):
            SegmentSearch(model, bad.decode)


@pytest.mark.parametrize("kind", ["monotonic", "chunkwise", "softmax"])
def test_teacher_forcing_without_context_feedback_steps_like_the_search(kind: str) -> None:
    """Without context feedback training runs the decoder LSTM over the whole target and
    every step's energies at once; logits and weight gradients must equal stepping through
    ``query`` and ``soft`` one token at a time, as the search does."""
    data = Config().to_dict()
    data["model"]["decoder"].update(units=64, embed_dim=32, layers=2, context_feedback=False)
    data["model"]["attention"].update(kind=kind, dim=32, init_r=0.0)
    torch.manual_seed(0)
    decoder = Seq2Seq(Config.from_dict(data).model, 40).eval().decoder
    batch, states, steps = 3, 30, 7
    memory = torch.randn(batch, states, 256).tanh()
    mask = torch.arange(states)[None] < torch.tensor([30, 21, 9])[:, None]
    tokens = torch.randint(3, 40, (batch, steps))
    probe = torch.randn(batch, steps, 40)

    def gradients(logits: torch.Tensor) -> list[torch.Tensor]:
        decoder.zero_grad()
        (logits * probe).sum().backward()
        return [p.grad.clone() for p in decoder.parameters()]

    parallel, _, alignments = decoder.teacher_forced(memory, mask, tokens)
    parallel_grads = gradients(parallel)

    keys = decoder.attention.keys(memory)
    state, alignment = decoder.initial_state(batch), initial_alignment(mask)
    stepped, stepped_alignments = [], []
    for i in range(steps):
        state = DecoderState(state.h, state.c, tokens[:, i], state.context)
        query, hs, cs = decoder.query(state)
        context, alignment, _ = decoder.attention.soft(query, memory, keys, mask, alignment)
        stepped.append(decoder.logits(query, context))
        stepped_alignments.append(alignment)
        state = DecoderState(hs, cs, state.token, context)
    stepped_logits = torch.stack(stepped, 1)
    assert torch.allclose(parallel, stepped_logits, atol=1e-5)
    assert torch.allclose(alignments, torch.stack(stepped_alignments, 1), atol=1e-6)
    for a, b in zip(parallel_grads, gradients(stepped_logits)):
        assert torch.allclose(a, b, atol=1e-4)
