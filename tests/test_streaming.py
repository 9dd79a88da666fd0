"""The streaming session: same tokens and token times as offline in any chunking, stable
partials, endpoints, bounded state over long streams, and clear errors for bad input (issue 3,
tests 1, 3 and 5).

Offline decoding (``Recognizer.transcribe``) is compared with sessions fed the
same audio in chunks of 1 ms, 10 ms, random sizes, 100 ms, 1 s and all at once,
on all 22 spoken sentences, greedy and with a beam, alone and with joint CTC scoring, for
hard monotonic and chunkwise (MoChA) attention. The models have random weights with the
monotonic offset r = 0, so they select states and emit tokens throughout.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from asr.audio import read_audio, resample
from asr.bundle import load_model
from asr.decoding import SegmentSearch, drain
from asr.events import Event
from asr.lm import TokenLM
from asr.recognizer import Recognizer
from asr.streaming import step_sessions
from tests.conftest import SENTENCES, build_bundle

CHUNKINGS = ["1ms", "10ms", "random", "100ms", "1s", "whole"]


# -- helpers ------------------------------------------------------------------
def variant(recognizer: Recognizer, **decode: object) -> Recognizer:
    """The same model and tokenizer with other decode settings."""
    config = dataclasses.replace(
        recognizer.config, decode=dataclasses.replace(recognizer.config.decode, **decode)
    )
    return Recognizer(config, recognizer.model, recognizer.tokenizer)


def chunk_sizes(chunking: str, rate: int, total: int, seed: int = 0) -> list[int]:
    if chunking == "whole":
        return [total]
    if chunking == "random":
        rng = np.random.default_rng(seed)
        sizes: list[int] = []
        while sum(sizes) < total:
            sizes.append(int(rng.integers(1, rate // 4)))  # 1 sample .. 250 ms
        return sizes
    milliseconds = {"1ms": 1, "10ms": 10, "100ms": 100, "1s": 1000}[chunking]
    size = max(1, rate * milliseconds // 1000)
    return [size] * (-(-total // size))


def stream(recognizer: Recognizer, samples: np.ndarray, rate: int, sizes: list[int]) -> list[Event]:
    session = recognizer.stream(rate)
    events: list[Event] = []
    start = 0
    for size in sizes:
        if start >= len(samples):
            break
        events += session.accept(samples[start : start + size])
        start += size
    assert start >= len(samples)
    events += session.finish()
    return events


def finals(events: list[Event]) -> list[tuple]:
    return [(e.segment, e.tokens, e.text, e.start, e.end, e.token_times) for e in events if e.final]


def check_no_flicker(events: list[Event]) -> int:
    """Each partial extends the previous partial of its segment; each final extends the last one;
    every token has an emission time, in order, within its event's span.

    Returns the number of partials seen.
    """
    last: dict[int, list[str]] = {}
    closed: set[int] = set()
    partials = 0
    for event in events:
        assert event.segment not in closed, f"event for segment {event.segment} after its final"
        times = event.token_times  # one per token, in order, inside the event's span
        assert len(times) == len(event.tokens) and times == sorted(times), event
        assert not times or event.start < times[0] and times[-1] <= event.end, event
        before = last.get(event.segment, [])
        assert event.tokens[: len(before)] == before, (
            f"{event.kind} {event.tokens} does not extend partial {before}"
        )
        if event.final:
            closed.add(event.segment)
        else:
            partials += 1
            assert event.tokens != before, "a partial repeats the previous one"
            last[event.segment] = event.tokens
    return partials


@pytest.fixture(scope="module")
def utterances(speech_dir: Path) -> list[tuple[np.ndarray, int]]:
    return [read_audio(speech_dir / f"utt{i:02d}.wav") for i in range(len(SENTENCES))]


@pytest.fixture(scope="module")
def recognizers(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory, speech_dir: Path):
    greedy = load_model(tiny_bundle)
    mocha = load_model(
        build_bundle(tmp_path_factory.mktemp("mocha") / "mocha", speech_dir, attention="chunkwise")
    )
    with_ctc = load_model(
        build_bundle(
            tmp_path_factory.mktemp("ctc") / "ctc", speech_dir, overrides=["model.ctc_weight=0.5"]
        )
    )
    return {
        "greedy": greedy,
        "beam": variant(greedy, beam_size=4),
        "ctc-head": with_ctc,  # decoded without it
        "joint": variant(with_ctc, ctc_weight=0.5),
        "joint-beam": variant(with_ctc, beam_size=4, ctc_weight=0.5),
        "mocha-greedy": mocha,
        "mocha-beam": variant(mocha, beam_size=4),
    }


@pytest.fixture(scope="module")
def offline(recognizers, utterances):
    """``offline(variant, i)``: finals and text of utterance i decoded offline (cached)."""
    cache: dict[tuple[str, int], tuple[list[tuple], str]] = {}

    def get(name: str, i: int) -> tuple[list[tuple], str]:
        if (name, i) not in cache:
            recognizer = recognizers[name]
            x, rate = utterances[i]
            expected = finals(recognizer.transcribe_segments(x, rate))
            # The comparison means something only if the model really emits tokens.
            assert sum(len(f[1]) for f in expected) > 0, (name, i)
            cache[name, i] = (expected, recognizer.transcribe(x, rate))
        return cache[name, i]

    return get


# -- 1. streaming == offline, token for token -------------------------------------
def check_all_utterances(name, chunking, recognizers, utterances, offline, every=1) -> None:
    recognizer = recognizers[name]
    partials = 0
    for i in range(0, len(utterances), every):
        x, rate = utterances[i]
        expected, text = offline(name, i)
        events = stream(recognizer, x, rate, chunk_sizes(chunking, rate, len(x), seed=i))
        got = finals(events)
        assert got == expected, f"utterance {i} ({SENTENCES[i]!r}), {chunking} chunks"
        assert " ".join(e.text for e in events if e.final and e.text) == text
        partials += check_no_flicker(events)
    assert partials > 0


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("name", ["greedy", "beam", "joint", "joint-beam"])
def test_streaming_equals_offline(name, chunking, recognizers, utterances, offline) -> None:
    check_all_utterances(name, chunking, recognizers, utterances, offline)


def test_joint_ctc_scoring_changes_what_is_said(recognizers, utterances, offline) -> None:
    """The CTC head's scores reach the search: some utterance decodes otherwise."""
    changed = [offline("ctc-head", i) != offline("joint", i) for i in range(len(utterances))]
    assert any(changed)


def test_joint_ctc_weight_is_checked(recognizers, tiny_bundle: Path) -> None:
    recognizer = recognizers["ctc-head"]
    with pytest.raises(ValueError, match=r"--ctc-weight must be in \[0, 1\)"):
        recognizer.set_search(ctc_weight=1.0)
    with pytest.raises(ValueError, match=r"decode.ctc_weight must be at least 0 and below 1"):
        SegmentSearch(
            recognizer.model, dataclasses.replace(recognizer.config.decode, ctc_weight=-0.1)
        )
    recognizer = load_model(tiny_bundle)  # trained without the CTC head
    assert recognizer.model.ctc is None
    with pytest.raises(ValueError, match="CTC head"):
        recognizer.set_search(ctc_weight=0.3)
    with pytest.raises(ValueError, match="CTC head"):
        SegmentSearch(
            recognizer.model, dataclasses.replace(recognizer.config.decode, ctc_weight=0.3)
        )


@pytest.fixture(scope="module")
def fused(recognizers) -> Recognizer:
    """Beam 4 with a language model over the test sentences, partials from a greedy search."""
    greedy = recognizers["greedy"]
    sentences = [greedy.tokenizer.encode(sentence) for sentence in SENTENCES]
    lm = TokenLM.train(sentences, greedy.tokenizer.vocab_size, order=3)
    decode = dataclasses.replace(
        greedy.config.decode, beam_size=4, lm_weight=2.0, greedy_partials=True
    )
    config = dataclasses.replace(greedy.config, decode=decode)
    return Recognizer(config, greedy.model, greedy.tokenizer, lm=lm)


@pytest.mark.parametrize("chunking", ["1ms", "random", "whole"])
def test_greedy_partials_come_as_greedy_and_finals_from_the_beam_and_lm(
    chunking, fused, recognizers, utterances, offline
) -> None:
    greedy = recognizers["greedy"]
    changed = 0
    for i in range(0, len(utterances), 3):
        x, rate = utterances[i]
        sizes = chunk_sizes(chunking, rate, len(x), seed=i)
        events = stream(fused, x, rate, sizes)
        alone = stream(greedy, x, rate, sizes)
        # the partials are the greedy search's, token for token and time for time
        assert [e for e in events if not e.final] == [e for e in alone if not e.final]
        # each final: the beam and the LM searching from the greedy segment's first state to
        # its end, as over complete memory
        feats = torch.from_numpy(
            greedy.frontend.compute(resample(x, rate, greedy.frontend.sample_rate))
        )
        with torch.no_grad():
            memory, _ = greedy.model.encode(feats[None], torch.tensor([len(feats)]))
        search = SegmentSearch(greedy.model, greedy.config.decode)
        search.append(memory[0])
        expected = []
        for segment in drain(search):
            again = SegmentSearch(greedy.model, fused.config.decode, fused.lm)
            for state in memory[0, : segment.end]:  # one by one, as a stream gives them
                again.append(state[None])
            again.restart_at(segment.start)
            tokens = [t for part in drain(again) for t in part.tokens]
            if tokens:
                expected.append(fused.tokenizer.pieces(tokens))
        assert [e.tokens for e in events if e.final] == expected, f"utterance {i}"
        assert finals(events) == finals(fused.transcribe_segments(x, rate))  # == offline
        changed += [e.tokens for e in events if e.final] != [f[1] for f in offline("greedy", i)[0]]
    assert changed > 0  # the beam and the LM say something else somewhere


@pytest.mark.parametrize(
    "chunking",
    ["random", *(pytest.param(c, marks=pytest.mark.slow) for c in CHUNKINGS if c != "random")],
)
@pytest.mark.parametrize("name", ["mocha-greedy", "mocha-beam"])
def test_streaming_equals_offline_chunkwise(
    name, chunking, recognizers, utterances, offline
) -> None:
    # The random MoChA model emits many tokens per state, so the default run takes every
    # other sentence in random chunks; the slow run takes all 22 in every chunking.
    every = 2 if chunking == "random" else 1
    check_all_utterances(name, chunking, recognizers, utterances, offline, every)


@pytest.mark.parametrize(
    "count", [6, pytest.param(len(SENTENCES), marks=pytest.mark.slow, id="all")]
)
@pytest.mark.parametrize("rate", [8000, 48000])
def test_streaming_equals_offline_at_other_input_rates(
    rate, count, recognizers, utterances
) -> None:
    for name in ("greedy", "beam"):
        recognizer = recognizers[name]
        for i, (x, src) in enumerate(utterances[:count]):
            y = resample(x, src, rate)
            expected = finals(recognizer.transcribe_segments(y, rate))
            assert sum(len(f[1]) for f in expected) > 0
            for chunking in ("10ms", "random"):
                got = finals(stream(recognizer, y, rate, chunk_sizes(chunking, rate, len(y), i)))
                assert got == expected, f"utterance {i} at {rate} Hz, {name}, {chunking} chunks"


def two_utterances(utterances, first: int) -> tuple[np.ndarray, int]:
    (a, rate), (b, rate_b) = utterances[first], utterances[first + 1]
    assert rate == rate_b
    return np.concatenate([a, np.zeros(rate, dtype=np.float32), b]), rate


@pytest.mark.parametrize("name", ["greedy", "beam"])
def test_trailing_silence_endpoint_gives_two_segments_in_any_chunking(
    name, recognizers, utterances
) -> None:
    # End-of-sentence endpoints off: random weights would place them anywhere.
    recognizer = variant(
        recognizers[name], endpoint_silence_s=0.8, endpoint_on_eos=False, max_tokens=200
    )
    for first in (0, 6, 16):
        x, rate = two_utterances(utterances, first)
        expected = finals(recognizer.transcribe_segments(x, rate))
        assert [f[0] for f in expected] == [0, 1], expected
        first_seconds = len(utterances[first][0]) / rate
        # the first segment ends inside the pause, the second starts after the endpoint
        assert expected[0][4] <= expected[1][3] <= first_seconds + 1.0
        for chunking in CHUNKINGS:
            events = stream(recognizer, x, rate, chunk_sizes(chunking, rate, len(x), first))
            assert finals(events) == expected, f"utterances {first}+{first + 1}, {chunking}"
            check_no_flicker(events)


# -- 3. bounded state over long streams -----------------------------------------------
def long_stream(utterances, seconds: float, rate: int = 16000) -> Iterator[np.ndarray]:
    """Utterances one after another with 1 s pauses, as 100 ms chunks, for ``seconds``."""
    pieces = [resample(x, src, rate) for x, src in utterances[:8]]
    pause = np.zeros(rate, dtype=np.float32)
    audio = np.concatenate([p for piece in pieces for p in (piece, pause)])
    chunk = rate // 10
    for i in range(int(seconds * 10)):
        start = (i * chunk) % (len(audio) - chunk)
        yield audio[start : start + chunk]


def state_bound(recognizer: Recognizer, session) -> int:
    """States a session may hold: one forced segment's worth plus the attention's lookback."""
    decode = recognizer.config.decode
    lookback = getattr(recognizer.model.decoder.attention, "lookback", 0)
    return int(np.ceil(decode.max_segment_s / session.state_seconds)) + lookback + 1


@pytest.mark.parametrize("name", ["greedy", pytest.param("mocha-greedy", marks=pytest.mark.slow)])
def test_five_minute_stream_keeps_encoder_states_bounded(name, recognizers, utterances) -> None:
    recognizer = variant(recognizers[name], endpoint_silence_s=0.5, max_segment_s=8.0)
    session = recognizer.stream(16000)
    bound = state_bound(recognizer, session)
    most = finals_seen = 0
    for chunk in long_stream(utterances, 5 * 60):
        finals_seen += sum(e.final for e in session.accept(chunk))
        most = max(most, session.retained_states)
        assert session.retained_states <= bound
    session.finish()
    seen = session._search.states_seen
    assert seen >= 5 * 60 / session.state_seconds - 2  # every state went through the search
    assert most < seen / 20 and finals_seen > 20


def rss() -> int:
    psutil = pytest.importorskip("psutil")
    return psutil.Process(os.getpid()).memory_info().rss


@pytest.mark.slow
def test_sixty_minute_stream_has_bounded_state_and_memory(recognizers, utterances) -> None:
    recognizer = variant(recognizers["greedy"], endpoint_silence_s=0.5)
    session = recognizer.stream(16000)
    bound = state_bound(recognizer, session)
    after_first_minute = None
    peak = 0
    for i, chunk in enumerate(long_stream(utterances, 60 * 60)):
        session.accept(chunk)
        assert session.retained_states <= bound
        if i == 600:
            gc.collect()
            after_first_minute = rss()
        elif i > 600 and i % 600 == 0:
            peak = max(peak, rss())
    session.finish()
    gc.collect()
    peak = max(peak, rss())
    assert after_first_minute is not None
    growth = (peak - after_first_minute) / 2**20
    assert growth <= 5.0, f"resident memory grew {growth:.1f} MB after the first minute"


# -- 5. bad input: a clear ValueError, and the session goes on ---------------------------
BAD_CHUNKS = {
    "nan": (np.array([0.1, np.nan, 0.0], dtype=np.float32), "NaN or infinity"),
    "inf": (np.array([0.0, np.inf], dtype=np.float64), "NaN or infinity"),
    "-inf": (np.full(160, -np.inf, dtype=np.float32), "NaN or infinity"),
    "empty": (np.zeros(0, dtype=np.float32), "empty"),
    "int32": (np.zeros(160, dtype=np.int32), "int32"),
    "object": (np.array([0.0, "a"], dtype=object), "object"),
    "2-D": (np.zeros((160, 2), dtype=np.float32), "1-D"),
    "list": ([0.0, 0.1], "numpy array"),
}


@pytest.mark.parametrize("bad", list(BAD_CHUNKS))
def test_bad_chunk_raises_and_the_session_still_transcribes(
    bad, recognizers, utterances, offline
) -> None:
    recognizer = recognizers["greedy"]
    chunk, message = BAD_CHUNKS[bad]
    for i in (0, 5):
        x, rate = utterances[i]
        session = recognizer.stream(rate)
        half = len(x) // 2
        events = session.accept(x[:half])
        with pytest.raises(ValueError, match=message):
            session.accept(chunk)
        events += session.accept(x[half:]) + session.finish()
        expected, text = offline("greedy", i)
        assert finals(events) == expected
        assert " ".join(e.text for e in events if e.final and e.text) == text


@pytest.mark.parametrize("rate", [4000, 96000, 0, -16000, 16000.0, "16000"])
def test_unsupported_sample_rate_is_refused(rate, recognizers) -> None:
    with pytest.raises(ValueError, match="sample rate"):
        recognizers["greedy"].stream(rate)


def test_accept_after_finish_and_finish_twice_raise(recognizers, utterances, offline) -> None:
    recognizer = recognizers["greedy"]
    x, rate = utterances[3]
    session = recognizer.stream(rate)
    events = session.accept(x) + session.finish()
    assert session.finished
    with pytest.raises(ValueError, match="after finish"):
        session.accept(x[:1000])
    with pytest.raises(ValueError, match="finish\\(\\) called twice"):
        session.finish()
    # what the session said before stays right, and a new session works as ever
    expected, text = offline("greedy", 3)
    assert finals(events) == expected
    assert recognizer.transcribe(x, rate) == text


def test_int16_input_gives_the_same_tokens_as_float(recognizers, utterances) -> None:
    recognizer = recognizers["greedy"]
    x, rate = utterances[1]
    pcm = np.round(x * 32767).astype(np.int16)
    expected = finals(recognizer.transcribe_segments(pcm.astype(np.float32) / 32768, rate))
    got = finals(stream(recognizer, pcm, rate, chunk_sizes("10ms", rate, len(pcm))))
    assert got == expected


@pytest.mark.parametrize("bundle", ["tiny_bundle", "whisper_bundle"])
def test_a_front_end_failure_in_a_batch_ends_only_its_own_session(
    request, bundle, utterances
) -> None:
    """One session's feature extractor fails inside a batched step (as kaldi's fbank did on
    samples far beyond full scale: "mel energy is nan"): that session gets the failure as bad
    audio (a ValueError: invalid_audio to a client), the session stepped with it goes on as
    alone, and a model process would live on."""
    recognizer = load_model(request.getfixturevalue(bundle))
    (x, rate), (y, _) = utterances[0], utterances[1]
    good, bad = recognizer.stream(rate), recognizer.stream(rate)
    frames = bad._frames
    extractor = frames.mel if hasattr(frames, "mel") else frames._fbank  # type: ignore[attr-defined]

    def fail(samples: np.ndarray) -> np.ndarray:
        raise RuntimeError("mel energy is nan")

    extractor.accept = fail
    half = len(x) // 2
    outcomes = step_sessions([good, bad], [x[:half], y])
    assert isinstance(outcomes[1], ValueError) and "mel energy is nan" in str(outcomes[1])
    events = outcomes[0] + good.accept(x[half:]) + good.finish()
    assert finals(events) == finals(recognizer.transcribe_segments(x, rate))


def test_sessions_stepped_together_give_what_each_gives_alone(
    recognizers, utterances, offline
) -> None:
    """``step_sessions``: 22 sessions in random chunkings share each encoder call (a server's
    batch), one of them gets a bad chunk midway, and every transcript is the offline one."""
    recognizer = recognizers["greedy"]
    sessions = [recognizer.stream(rate) for _, rate in utterances]
    plans = [chunk_sizes("random", rate, len(x), seed=i) for i, (x, rate) in enumerate(utterances)]
    starts = [0] * len(sessions)
    events: list[list[Event]] = [[] for _ in sessions]
    bad_sent = False
    while any(not s.finished for s in sessions):
        active = [k for k, s in enumerate(sessions) if not s.finished]
        inputs: list[np.ndarray | None] = []
        for k in active:
            x, _ = utterances[k]
            if starts[k] >= len(x):
                inputs.append(None)
                continue
            if k == 4 and starts[k] > len(x) // 2 and not bad_sent:
                inputs.append(np.array([np.nan], dtype=np.float32))
                bad_sent = True
                continue
            size = plans[k].pop(0)
            inputs.append(x[starts[k] : starts[k] + size])
            starts[k] += size
        outcomes = step_sessions([sessions[k] for k in active], inputs)
        for k, outcome in zip(active, outcomes):
            if isinstance(outcome, Exception):
                assert k == 4 and isinstance(outcome, ValueError)
            else:
                events[k] += outcome
    assert bad_sent
    for i in range(len(sessions)):
        expected, text = offline("greedy", i)
        assert finals(events[i]) == expected, f"utterance {i}"
        assert " ".join(e.text for e in events[i] if e.final and e.text) == text
