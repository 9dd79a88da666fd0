"""The recognizer on the Whisper front end (model.frontend=whisper): the LAS encoder and the
hard monotonic decoder read the streaming Whisper encoder's states; streaming equals offline
token for token in any network chunking, bundles carry the encoder, memory stays bounded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psutil
import pytest

from asr.bundle import load_model
from asr.config import SessionOptions
from asr.frontend import BUNDLE_ENCODER_FILE
from asr.recognizer import Recognizer
from asr.streaming import step_sessions
from tests.conftest import with_two_pass
from tests.test_streaming import chunk_sizes, finals, long_stream, stream


@pytest.fixture(scope="module")
def recognizer(whisper_bundle: Path) -> Recognizer:
    return load_model(whisper_bundle)


@pytest.fixture(scope="module")
def utterances(speech_dir: Path) -> list[tuple[np.ndarray, int]]:
    from asr.audio import read_audio

    return [read_audio(speech_dir / f"utt{i:02d}.wav") for i in range(8)]


def test_bundle_carries_its_encoder(whisper_bundle: Path, recognizer: Recognizer) -> None:
    assert (whisper_bundle / BUNDLE_ENCODER_FILE).stat().st_size > 40e6
    assert recognizer.frontend is not None
    assert recognizer.frontend.encoder_file == whisper_bundle / BUNDLE_ENCODER_FILE
    assert recognizer.model.encoder.input_dim == 512
    assert recognizer.stream(16000).state_seconds == pytest.approx(0.04)


def test_a_bundles_encoder_file_serves_as_model_whisper_encoder(
    whisper_bundle: Path, utterances: list
) -> None:
    """model.whisper.encoder may name a safetensors file, such as a bundle's own encoder
    (how training goes on from a bundle), as well as a directory."""
    from asr.audio import resample
    from asr.config import Config
    from asr.frontend import load_frontend

    encoder = whisper_bundle / BUNDLE_ENCODER_FILE
    config = Config.load(whisper_bundle / "config.json", [f"model.whisper.encoder={encoder}"])
    x = resample(*utterances[0], 16000)
    frames = [load_frontend(config.model, bundle).compute(x) for bundle in (None, whisper_bundle)]
    assert np.array_equal(frames[0], frames[1]) and len(frames[0])


@pytest.mark.parametrize("chunking", ["10ms", "random", "1s"])
def test_streaming_equals_offline_token_for_token(
    recognizer: Recognizer, utterances: list[tuple[np.ndarray, int]], chunking: str
) -> None:
    emitted = 0
    for i, (samples, rate) in enumerate(utterances[:4]):
        offline = finals(recognizer.transcribe_segments(samples, rate))
        emitted += sum(len(f[1]) for f in offline)
        streamed = finals(
            stream(recognizer, samples, rate, chunk_sizes(chunking, rate, len(samples), i))
        )
        assert streamed == offline, f"utterance {i}, {chunking} chunks"
    assert emitted > 0  # random weights with r = 0 emit tokens, so the comparison means something


def test_end_pad_streams_silence_through_the_encoders_at_finish(
    recognizer: Recognizer, utterances: list[tuple[np.ndarray, int]]
) -> None:
    """decode.end_pad_s: finish() first feeds that much digital silence, so a clip cut right
    after its last word reads as one that went on in silence (the decoder scans states it
    would not have seen); the caller's audio time stays what the caller sent, and the config
    refuses a negative pad."""
    from dataclasses import replace

    from asr.audio import resample
    from asr.config import DecodeConfig

    x = resample(*utterances[1], 16000)
    config = recognizer.config
    decode = replace(config.decode, end_pad_s=0.3)
    padded = replace(recognizer, config=replace(config, decode=decode))

    def run(r: Recognizer, audio: np.ndarray) -> tuple[list, int, float]:
        session = r.stream(16000)
        events = session.accept(audio) + session.finish()
        return finals(events), session.energy_evaluations, session.audio_seconds

    pad = np.zeros(4800, np.float32)
    got, plain, silent = (
        run(padded, x),
        run(recognizer, x),
        run(recognizer, np.concatenate([x, pad])),
    )
    assert got[:2] == silent[:2]
    assert got[1] > plain[1]
    assert got[2] == plain[2] == pytest.approx(len(x) / 16000)
    with pytest.raises(ValueError, match="end_pad_s must be at least 0"):
        DecodeConfig(end_pad_s=-0.1)
    with pytest.raises(ValueError, match="--end-pad must be 0 to 10 seconds"):
        padded.set_search(end_pad=-0.1)
    assert padded.config.decode.end_pad_s == 0.3


@pytest.mark.slow
@pytest.mark.timeout(2 * 3600)  # an hour of audio: minutes, more on a busy machine
def test_sixty_minute_stream_stays_under_a_fixed_memory_bound(
    recognizer: Recognizer, utterances: list[tuple[np.ndarray, int]]
) -> None:
    session = recognizer.stream(16000)
    process = psutil.Process()
    after_first_minute = 0
    for i, chunk in enumerate(long_stream(utterances, 60 * 60)):
        session.accept(chunk)
        if i == 600:
            after_first_minute = process.memory_info().rss
    session.finish()
    grown = process.memory_info().rss - after_first_minute
    assert grown < 30e6, f"resident memory grew by {grown / 1e6:.1f} MB after the first minute"


def test_sessions_stepped_together_match_each_alone(
    recognizer: Recognizer, utterances: list[tuple[np.ndarray, int]]
) -> None:
    """The server's batching: three sessions' chunks go through the Whisper encoder as one
    batch (``encode_streams``); each transcript is the one the session gets alone."""
    chosen = utterances[4:7]
    alone = [finals(recognizer.transcribe_segments(x, rate)) for x, rate in chosen]
    sessions = [recognizer.stream(rate) for _, rate in chosen]
    events: list[list] = [[] for _ in chosen]
    step = 1600
    for start in range(0, max(len(x) for x, _ in chosen), step):
        members = [k for k, (x, _) in enumerate(chosen) if start < len(x)]
        outcomes = step_sessions(
            [sessions[k] for k in members], [chosen[k][0][start : start + step] for k in members]
        )
        for k, outcome in zip(members, outcomes):
            assert not isinstance(outcome, Exception)
            events[k] += outcome
    for k, outcome in enumerate(step_sessions(sessions, [None] * len(sessions))):
        assert not isinstance(outcome, Exception)
        events[k] += outcome
    assert [finals(e) for e in events] == alone
    assert sum(len(f[1]) for a in alone for f in a) > 0


@pytest.mark.parametrize("quantization", ["rows", "dynamic"])
def test_int8_encoder_stays_near_float(
    whisper_bundle: Path, utterances: list, quantization: str
) -> None:
    import torch

    from asr.bundle import load_model as load
    from asr.config import Config
    from asr.frontend import load_frontend

    overrides = ["model.whisper.int8=true", f"model.whisper.quantization={quantization}"]
    config = Config.load(whisper_bundle / "config.json", overrides)
    int8 = load_frontend(config.model, whisper_bundle)
    float32 = load(whisper_bundle).frontend
    assert float32 is not None
    from asr.audio import resample

    samples = resample(*utterances[0], 16000)
    streams = float32.stream(), int8.stream()  # int8 serves streams: chunk by chunk
    a, b = (torch.from_numpy(np.concatenate([s.accept(samples), s.finish()])) for s in streams)
    relative = float(((a - b) ** 2).sum() / (a**2).sum())
    cosine = float(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean())
    # measured on this utterance: relative squared error 0.068 and cosine 0.963 (dynamic);
    # 0.018 and 0.988 with rows, which scale each state apart (the convolutions in int8 too)
    if quantization == "rows":
        assert relative < 0.04 and cosine > 0.975
    else:
        assert relative < 0.12 and cosine > 0.94
    # training's cache of an int8 model holds exactly what its streams serve
    assert torch.equal(torch.from_numpy(int8.compute(samples)), b)


@pytest.mark.parametrize("int8", ["true", "false"])
@pytest.mark.parametrize("quantization", ["rows", "dynamic"])
def test_streams_batched_together_give_each_its_frames_alone(
    whisper_bundle: Path, utterances: list, int8: str, quantization: str
) -> None:
    """Dynamic int8 scales activations per call: a server batching a loud session with a
    quiet one must not let the loud one set the quiet one's precision (nor any session
    another's). In float, a matrix product's rounding can depend on its row count (AVX-512,
    AMX), which changed transcripts. Rows int8 batches its products and stays exact. Each
    stream gets its frames alone bit for bit in every case."""
    import torch

    from asr.audio import resample
    from asr.config import Config
    from asr.frontend import frames_of_many, load_frontend

    overrides = [f"model.whisper.int8={int8}", f"model.whisper.quantization={quantization}"]
    config = Config.load(whisper_bundle / "config.json", overrides)
    frontend = load_frontend(config.model, whisper_bundle)
    audio = [resample(*utterances[i], 16000) * gain for i, gain in ((0, 8.0), (1, 0.05), (2, 1.0))]
    alone = []
    for x in audio:
        stream = frontend.stream()
        alone.append(np.concatenate([stream.accept(x), stream.finish()]))
    streams = [frontend.stream() for _ in audio]
    parts: list[list[np.ndarray]] = [[] for _ in audio]
    step = 1600
    for start in range(0, max(len(x) for x in audio), step):
        live = [k for k, x in enumerate(audio) if start < len(x)]  # each ends with its last chunk
        out = frames_of_many(
            [streams[k] for k in live],
            [audio[k][start : start + step] for k in live],
            [start + step >= len(audio[k]) for k in live],
        )
        for k, frames in zip(live, out):
            parts[k].append(frames)
    for k, expected in enumerate(alone):
        assert torch.equal(torch.from_numpy(np.concatenate(parts[k])), torch.from_numpy(expected))


@pytest.mark.parametrize("lm_weight", [0.0, 2.0])
def test_two_pass_finals_come_from_the_teacher_over_each_segment(
    whisper_bundle: Path, tmp_path: Path, utterances: list[tuple[np.ndarray, int]], lm_weight
) -> None:
    """... with the language model too, when decode.lm_weight asks for it."""
    import torch

    from asr.audio import resample
    from asr.config import Config
    from asr.decoding import search_states
    from asr.lm import TokenLM
    from asr.whisper_features import log_mel
    from tests.conftest import SENTENCES

    one_segment = [
        "decode.endpoint_on_eos=false",
        "decode.max_segment_s=30",
        "decode.max_tokens=500",
    ]
    directory = with_two_pass(whisper_bundle, tmp_path / "two-pass", one_segment)
    assert (directory / "whisper_teacher.safetensors").is_file()
    config = Config.load(directory / "config.json")
    recognizer = load_model(directory)
    assert recognizer.frontend is not None
    lm = None
    if lm_weight:
        sentences = [recognizer.tokenizer.encode(sentence) for sentence in SENTENCES]
        lm = recognizer.lm = TokenLM.train(sentences, recognizer.tokenizer.vocab_size, order=3)
        recognizer.set_search(lm_weight=lm_weight)
        config.decode.lm_weight = lm_weight
    differs = 0
    for i, (samples, rate) in enumerate(utterances[:4]):
        x = resample(samples, rate, 16000)
        offline = finals(recognizer.transcribe_segments(x, 16000))
        streamed = finals(stream(recognizer, x, 16000, chunk_sizes("random", 16000, len(x), i)))
        assert streamed == offline, f"utterance {i}"
        # the one segment's final is the teacher's states through the same LAS layers and decoder
        mel = torch.from_numpy(log_mel(x, config.model.whisper.floor))
        states = ((len(mel) + 1) // 2) // 2  # Whisper states, then the 2x LAS pyramid
        with torch.no_grad():
            taught, _ = recognizer.frontend.full_attention()(mel[: 4 * states][None])
            memory, _ = recognizer.model.encode(taught, torch.tensor([taught.shape[1]]))
            found = search_states(recognizer.model, memory[0], config.decode, lm)
        expected = [t for part in found for t in part.tokens]
        assert [e[1] for e in offline] == (
            [recognizer.tokenizer.pieces(expected)] if expected else []
        )
        recognizer.set_search(two_pass=False)
        differs += finals(recognizer.transcribe_segments(x, 16000)) != offline
        recognizer.set_search(two_pass=True)
    assert differs > 0  # the streaming pass alone says something else somewhere
    plain = load_model(whisper_bundle)  # saved without two-pass finals: no teacher inside
    with pytest.raises(ValueError, match="full-attention Whisper encoder"):
        plain.set_search(two_pass=True)


def test_two_pass_is_chosen_per_session(
    two_pass_bundle: Path,
    whisper_bundle: Path,
    tiny_bundle: Path,
    utterances: list[tuple[np.ndarray, int]],
) -> None:
    """Sessions of one recognizer each choose two-pass finals or not, stepped in one batch as
    the server runs them, and get what the recognizer set that way gives; the shared config
    is left alone. A model that cannot give them says why before any session exists."""
    recognizer = load_model(two_pass_bundle)
    assert recognizer.two_pass_problem() is None
    samples, rate = utterances[0]
    expected = {}
    for two_pass in (True, False):
        recognizer.set_search(two_pass=two_pass)
        expected[two_pass] = finals(recognizer.transcribe_segments(samples, rate))
    assert expected[True] != expected[False]
    recognizer.set_search(two_pass=True)
    choices = [True, False, None]  # None: the bundle's two-pass finals
    sessions = [recognizer.stream(rate, SessionOptions(two_pass=choice)) for choice in choices]
    assert recognizer.config.decode.two_pass is True
    events: list[list] = [[] for _ in sessions]
    for start in range(0, len(samples), 3200):
        for k, outcome in enumerate(step_sessions(sessions, [samples[start : start + 3200]] * 3)):
            assert not isinstance(outcome, Exception)
            events[k] += outcome
    for k, outcome in enumerate(step_sessions(sessions, [None] * 3)):
        assert not isinstance(outcome, Exception)
        events[k] += outcome
    assert [finals(e) for e in events] == [expected[True], expected[False], expected[True]]
    recognizer.config.decode.max_segment_s = 60  # past Whisper's 30 s of positions
    assert "max_segment_s <= 30" in (recognizer.two_pass_problem() or "")
    assert "full-attention Whisper encoder" in (load_model(whisper_bundle).two_pass_problem() or "")
    assert "fbank front end" in (load_model(tiny_bundle).two_pass_problem() or "")


def test_a_bundle_can_carry_the_teacher_with_one_pass_finals_by_default(
    whisper_bundle: Path, tmp_path: Path, utterances: list[tuple[np.ndarray, int]]
) -> None:
    """model.whisper.carry_teacher: the published model serves one-pass finals by default and
    gives two-pass finals on request, from the teacher it carries."""
    from asr.frontend import BUNDLE_TEACHER_FILE

    carried = with_two_pass(
        whisper_bundle,
        tmp_path / "carry",
        ["decode.two_pass=false", "model.whisper.carry_teacher=true"],
    )
    assert (carried / BUNDLE_TEACHER_FILE).stat().st_size > 40e6
    recognizer = load_model(carried)
    assert recognizer.config.decode.two_pass is False and recognizer.two_pass_problem() is None
    samples, rate = utterances[0]
    plain = finals(load_model(whisper_bundle).transcribe_segments(samples, rate))
    assert finals(recognizer.transcribe_segments(samples, rate)) == plain
    recognizer.set_search(two_pass=True)
    assert finals(recognizer.transcribe_segments(samples, rate)) != plain
