"""The recognizer on the Whisper front end (model.frontend=whisper): the LAS encoder and the
hard monotonic decoder read the streaming Whisper encoder's states; streaming equals offline
token for token in any network chunking, bundles carry the encoder, memory stays bounded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psutil
import pytest

from asr.bundle import load_model
from asr.frontend import BUNDLE_ENCODER_FILE
from asr.recognizer import Recognizer
from tests.conftest import REPO, build_bundle
from tests.test_streaming import chunk_sizes, finals, long_stream, stream

OVERRIDES = [
    "model.frontend=whisper",
    f"model.whisper.encoder={REPO / 'models' / 'whisper-base'}",  # the masked teacher
    "model.whisper.chunk=8",
    "model.whisper.left_context=100",
    "model.encoder.reductions=[2,1]",  # 40 ms states over Whisper's 20 ms
]


@pytest.fixture(scope="module")
def whisper_bundle(tmp_path_factory: pytest.TempPathFactory, speech_dir: Path) -> Path:
    return build_bundle(tmp_path_factory.mktemp("whisper") / "w", speech_dir, overrides=OVERRIDES)


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


@pytest.mark.slow
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
