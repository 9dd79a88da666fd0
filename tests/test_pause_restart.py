"""Restarts after pauses (decode.restart_pause_s): after enough quiet audio the streaming
Whisper encoder forgets what came before and counts positions afresh, the LAS encoder's
state starts afresh and the search begins a new segment there, as every training
utterance begins. The restarts come from the audio alone, so any chunking finds them on
the same states, and streaming still equals offline."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from asr.audio import HopLoudness, resample
from asr.bundle import load_model
from asr.config import Config
from asr.frontend import STATE_SECONDS, Frontend, PauseRestart, load_frontend
from asr.recognizer import Recognizer
from tests.test_streaming import chunk_sizes, finals, stream

RATE = 16000
PAUSE_S = 1.5
RESTART_S = 0.5


@pytest.fixture(scope="module")
def recognizer(whisper_bundle: Path) -> Recognizer:
    plain = load_model(whisper_bundle)
    decode = replace(plain.config.decode, restart_pause_s=RESTART_S)
    return replace(plain, config=replace(plain.config, decode=decode))


def loud(x: np.ndarray) -> np.ndarray:
    """Which 20 ms pieces of ``x`` are louder than the restarts' -45 dBFS."""
    return HopLoudness(int(STATE_SECONDS * RATE)).add(x) >= -45.0


@pytest.fixture(scope="module")
def two_sentences(speech_dir: Path) -> tuple[np.ndarray, tuple[float, float]]:
    """Two spoken sentences with a pause of digital silence between them, at 16 kHz, and
    the quiet stretch between them (s): from the first's last loud 20 ms to the second's
    first (the files have quiet edges of their own)."""
    from asr.audio import read_audio

    first, second = (resample(*read_audio(speech_dir / f"utt{i:02d}.wav"), RATE) for i in (1, 2))
    pause = np.zeros(int(PAUSE_S * RATE), np.float32)
    quiet_from = (np.flatnonzero(loud(first))[-1] + 1) * STATE_SECONDS
    quiet_to = len(first) / RATE + PAUSE_S + np.flatnonzero(loud(second))[0] * STATE_SECONDS
    return np.concatenate([first, pause, second]), (quiet_from, quiet_to)


def frames(frontend: Frontend, audio: np.ndarray, sizes: list[int], restart: bool):
    """(frames, restart states) of one stream fed ``audio`` in pieces of ``sizes``."""
    s = frontend.stream(PauseRestart(RESTART_S, -45.0) if restart else None)
    out, start = [], 0
    for size in sizes:
        out.append(s.accept(audio[start : start + size]))
        start += size
    out.append(s.finish())
    return np.concatenate(out), s.take_restarts()


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a - b) ** 2).sum() / (b**2).sum())


def check_restarts_in_the_pause(
    restarts: list[int], chunk: int, quiet_from: float, quiet_to: float
) -> None:
    """Every restart begins a quiet chunk after RESTART_S of quiet; while the pause lasts,
    every such chunk restarts, so the next sentence starts within two chunks of the last."""
    assert restarts, "a 1.5 s pause restarts the encoder"
    for state in restarts:
        assert state % chunk == 0  # a chunk's first state
        start, end = state * STATE_SECONDS, (state + chunk) * STATE_SECONDS
        assert quiet_from + RESTART_S - 1e-6 <= start and end <= quiet_to + 1e-6, (
            restarts,
            quiet_from,
            quiet_to,
        )
    assert restarts[-1] * STATE_SECONDS > quiet_to - 2 * chunk * STATE_SECONDS


def test_restarts_fall_in_the_pause_on_the_same_states_in_any_chunking(
    recognizer: Recognizer, two_sentences: tuple[np.ndarray, tuple[float, float]]
) -> None:
    audio, (quiet_from, quiet_to) = two_sentences
    assert recognizer.frontend is not None
    whole, restarts = frames(recognizer.frontend, audio, [len(audio)], restart=True)
    check_restarts_in_the_pause(
        restarts, recognizer.config.model.whisper.chunk, quiet_from, quiet_to
    )
    for chunking in ("10ms", "random", "1s"):
        sizes = chunk_sizes(chunking, RATE, len(audio), seed=3)
        got, found = frames(recognizer.frontend, audio, sizes, restart=True)
        assert found == restarts, chunking
        assert np.array_equal(got, whole), chunking


def test_in_a_noisy_room_the_pause_is_found_above_its_noise_floor(
    recognizer: Recognizer, two_sentences: tuple[np.ndarray, tuple[float, float]]
) -> None:
    """White noise at -35 dBFS under everything: no piece is under -45 dBFS, but the pause
    stays within a few dB of the noise floor while the speech stands far above it."""
    audio, (quiet_from, quiet_to) = two_sentences
    assert recognizer.frontend is not None
    noise = np.random.default_rng(0).standard_normal(len(audio)) * 10 ** (-35 / 20)
    noisy = (audio + noise).astype(np.float32)
    assert loud(noisy).all()  # nothing under the absolute threshold
    _, restarts = frames(recognizer.frontend, noisy, [len(noisy)], restart=True)
    check_restarts_in_the_pause(
        restarts, recognizer.config.model.whisper.chunk, quiet_from, quiet_to
    )


def test_a_quietly_recorded_voice_is_no_pause(
    recognizer: Recognizer, two_sentences: tuple[np.ndarray, tuple[float, float]]
) -> None:
    """The same sentences 50 dB softer: every piece is under -45 dBFS, yet only the pause
    restarts, since the speech stands far above it."""
    audio, (quiet_from, _) = two_sentences
    assert recognizer.frontend is not None
    soft = (audio * 10 ** (-50 / 20)).astype(np.float32)
    assert not loud(soft).any()
    _, restarts = frames(recognizer.frontend, soft, [len(soft)], restart=True)
    # speech here: the pieces within 20 dB of the loudest
    db = HopLoudness(int(STATE_SECONDS * RATE)).add(soft)
    speech = np.flatnonzero(db > db.max() - PauseRestart.FLOOR_RANGE_DB) * STATE_SECONDS
    first_ends = speech[speech < quiet_from + RESTART_S].max() + STATE_SECONDS
    second_starts = speech[speech > quiet_from + RESTART_S].min()
    check_restarts_in_the_pause(
        restarts, recognizer.config.model.whisper.chunk, first_ends, second_starts
    )


def test_a_stream_without_pauses_finds_no_floor_in_its_own_soft_sounds() -> None:
    """Until someone speaks over it, a noise floor is no floor: steady noise alone, and
    steady speech-like sound alone, never restart (no piece is far above the quietest)."""
    rng = np.random.default_rng(1)
    for level_db in (-35.0, -20.0):
        sound = rng.standard_normal(RATE * 4) * 10 ** (level_db / 20)
        detector = PauseRestart(RESTART_S, -45.0)
        detector.add(sound.astype(np.float32))
        assert not any(detector(s, s + 8) for s in range(40, 200, 8)), level_db
    # the same noise with a loud second in it: after it, the noise is a floor and restarts
    noise = rng.standard_normal(RATE * 4) * 10 ** (-35 / 20)
    noise[RATE : 2 * RATE] *= 100  # +40 dB
    detector = PauseRestart(RESTART_S, -45.0)
    detector.add(noise.astype(np.float32))
    found = [s for s in range(40, 200, 8) if detector(s, s + 8)]
    assert found and min(found) * STATE_SECONDS >= 2 + RESTART_S - 1e-6, found


def test_after_a_restart_the_encoder_reads_as_a_fresh_stream(
    recognizer: Recognizer, two_sentences: tuple[np.ndarray, tuple[float, float]]
) -> None:
    """The states from the last restart on are those of a stream that begins there (up to
    the convolutions' first window, which still sees the pause); without the restart the
    first sentence, inside the left context, changes them far more."""
    audio, _ = two_sentences
    frontend = recognizer.frontend
    assert frontend is not None
    restarted, restarts = frames(frontend, audio, [len(audio)], restart=True)
    carried, _ = frames(frontend, audio, [len(audio)], restart=False)
    first = restarts[-1]
    fresh, _ = frames(frontend, audio[int(first * STATE_SECONDS * RATE) :], [len(audio)], False)
    n = min(len(fresh), len(restarted) - first)
    after_restart = relative_error(restarted[first : first + n], fresh[:n])
    without = relative_error(carried[first : first + n], fresh[:n])
    assert after_restart < 0.05 and without > 10 * after_restart, (after_restart, without)


def test_a_session_begins_a_segment_at_each_restart_and_streaming_equals_offline(
    recognizer: Recognizer, two_sentences: tuple[np.ndarray, tuple[float, float]]
) -> None:
    audio, _ = two_sentences
    assert recognizer.frontend is not None
    _, restarts = frames(recognizer.frontend, audio, [len(audio)], restart=True)
    times = [round(state * STATE_SECONDS, 3) for state in restarts]
    offline = finals(recognizer.transcribe_segments(audio, RATE))
    assert offline, "random weights with r = 0 emit tokens, so segments exist to check"
    for _, _, _, start, end, _ in offline:
        assert not any(start < t < end for t in times), (start, end, times)
    # the second sentence's tokens come in a segment that begins at the last restart
    assert any(start == times[-1] for _, _, _, start, _, _ in offline), (offline, times)
    for chunking in ("10ms", "random"):
        sizes = chunk_sizes(chunking, RATE, len(audio), seed=5)
        assert finals(stream(recognizer, audio, RATE, sizes)) == offline, chunking


def test_a_primed_stream_restarts_on_the_audios_own_states(
    whisper_bundle: Path, two_sentences: tuple[np.ndarray, tuple[float, float]]
) -> None:
    """With a chunk of silence before the audio (model.whisper.prime), the restarts are
    found on the same states of the audio as without it, the prime's own states never reach
    the caller, and streaming still equals offline."""
    audio, _ = two_sentences
    plain = load_model(whisper_bundle)
    chunk = plain.config.model.whisper.chunk
    config = Config.load(whisper_bundle / "config.json", [f"model.whisper.prime={chunk}"])
    primed = load_frontend(config.model, whisper_bundle)
    assert plain.frontend is not None
    unprimed, expected = frames(plain.frontend, audio, [len(audio)], restart=True)
    whole, restarts = frames(primed, audio, [len(audio)], restart=True)
    assert restarts == expected and whole.shape == unprimed.shape
    assert not np.allclose(whole[:chunk], unprimed[:chunk], atol=1e-3)  # the prime is read
    carried, _ = frames(primed, audio, [len(audio)], restart=False)
    assert np.abs(carried - primed.compute(audio)).max() < 2e-3  # a float bundle: one pass
    sizes = chunk_sizes("random", RATE, len(audio), seed=9)
    got, found = frames(primed, audio, sizes, restart=True)
    assert found == restarts and np.array_equal(got, whole)


def test_a_primed_students_states_are_cached_apart(whisper_bundle: Path) -> None:
    """Frames and the speller's examples and grids are cached under what the states depend
    on: a prime is part of it; without one, the names are those of before primes existed."""
    from asr.speller import states_of

    chunk = load_model(whisper_bundle).config.model.whisper.chunk
    plain, primed = (
        load_frontend(Config.load(whisper_bundle / "config.json", extra).model, whisper_bundle)
        for extra in ([], [f"model.whisper.prime={chunk}"])
    )
    assert "prime" not in plain.cache_key()
    assert primed.cache_key() == {**plain.cache_key(), "prime": chunk}
    assert states_of("ab12", 0) == "ab12" and states_of("ab12", chunk) == f"ab12+prime{chunk}"


def test_restarts_need_chunks_of_whole_encoder_states(whisper_bundle: Path) -> None:
    config = Config.load(
        whisper_bundle / "config.json",
        ["model.whisper.chunk=5", f"decode.restart_pause_s={RESTART_S}"],
    )
    plain = load_model(whisper_bundle)
    odd = Recognizer(
        config,
        plain.model,
        plain.tokenizer,
        frontend=load_frontend(config.model, whisper_bundle),
    )
    with pytest.raises(ValueError, match="multiple of the encoder's reduction"):
        odd.stream(RATE)
    with pytest.raises(ValueError, match="longer than 0 s"):
        PauseRestart(0.0, -45.0)


def test_the_las_encoder_starts_afresh_at_each_restart(
    recognizer: Recognizer, two_sentences: tuple[np.ndarray, tuple[float, float]]
) -> None:
    """The states a session searches are the LAS encoder's over the Whisper frames between
    restarts, each stretch from a fresh state, whatever the chunking."""
    import torch

    audio, _ = two_sentences
    assert recognizer.frontend is not None
    whisper, restarts = frames(recognizer.frontend, audio, [len(audio)], restart=True)
    encoder = recognizer.model.encoder
    bounds = [0, *restarts, len(whisper)]
    with torch.inference_mode():
        expected = torch.cat(
            [
                encoder(encoder.normalize(torch.from_numpy(whisper[a:b])[None]))[0][0]
                for a, b in zip(bounds, bounds[1:])
            ]
        )
        carried = encoder(encoder.normalize(torch.from_numpy(whisper)[None]))[0][0]
    for chunking in ("whole", "random"):
        got = searched_states(recognizer, audio, chunk_sizes(chunking, RATE, len(audio), seed=7))
        assert got.shape == expected.shape
        assert torch.allclose(got, expected, atol=1e-5), chunking
        assert not torch.allclose(got, carried, atol=1e-2)  # the reset matters here


def searched_states(recognizer: Recognizer, audio: np.ndarray, sizes: list[int]):
    """Every LAS encoder state a session fed ``audio`` in pieces of ``sizes`` hands its search."""
    import torch

    session = recognizer.stream(RATE)
    searched: list[torch.Tensor] = []
    decode = session._decode

    def record(states: torch.Tensor | None, heard: np.ndarray) -> list:
        if states is not None:
            searched.append(states[0])
        return decode(states, heard)

    session._decode = record  # type: ignore[method-assign]
    start = 0
    for size in sizes:
        session.accept(audio[start : start + size])
        start += size
    session.finish()
    return torch.cat(searched)
