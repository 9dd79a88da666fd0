"""Sessions whose streaming pass Whisper's decoder spells (``decode.streaming_decoder``
"whisper", asr.spelled_pass): partials and one-pass finals from the bundled learnt policy,
the same in any chunking as offline, through `asr transcribe`, a real server session and
/readyz, and refused, with the reason, where a bundle cannot serve them."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asr.bundle import load_model
from asr.config import SessionOptions
from asr.recognizer import Recognizer
from asr.scoring import score
from asr.speller import POLICY_FILE, Speller, bundle_policy
from server.client import file_frames
from server.client import stream as stream_url
from server.live import LiveServer
from server.protocol import Result
from server.settings import Settings
from tests.test_bundled_model import MODEL
from tests.test_streaming import check_no_flicker, chunk_sizes, finals, stream
from tests.test_whisper_finals import held_out
from training.recipes.textnorm import normalize

RATE = 16000
WHISPER = SessionOptions(streaming_decoder="whisper")


@pytest.fixture(scope="module")
def recognizer() -> Recognizer:
    """The bundled model, greedy, one pass, its streaming pass spelled by Whisper's decoder."""
    recognizer = load_model(MODEL)
    recognizer.set_search(1, 0.0, two_pass=False, streaming_decoder="whisper")
    return recognizer


@pytest.fixture(scope="module")
def two_sentences() -> tuple[np.ndarray, list[str]]:
    """Two held-out utterances with a pause between them: two segments."""
    chosen, clips = held_out("test_seen_voices", 2)
    pause = np.zeros(2 * RATE, np.float32)
    return np.concatenate([clips[0], pause, clips[1]]), [r["text"] for r in chosen]


@pytest.fixture(scope="module")
def offline(recognizer: Recognizer, two_sentences: tuple[np.ndarray, list[str]]) -> list:
    return recognizer.transcribe_segments(two_sentences[0], RATE)


def test_the_spelled_pass_reads_each_segment_in_whisper_text(
    offline: list, two_sentences: tuple[np.ndarray, list[str]]
) -> None:
    """Each sentence is one final, in Whisper's cased, punctuated text, which reads the
    references better than the LSTM decoder's finals of the same audio."""
    samples, references = two_sentences
    assert [e.segment for e in offline] == [0, 1]
    assert all(e.text[:1].isupper() and e.text.endswith(".") for e in offline)
    refs, ids = [normalize(r) for r in references], ["first", "second"]
    spelled = score(ids, refs, [normalize(e.text) for e in offline])[0]["wer"]["rate"]
    lstm = load_model(MODEL)
    lstm.set_search(1, 0.0, two_pass=False)
    plain = [e.text for e in lstm.transcribe_segments(samples, RATE)]
    first_pass = score(ids, refs, [normalize(t) for t in plain])[0]["wer"]["rate"]
    assert spelled < first_pass, (offline, plain)
    assert spelled <= 0.15, [e.text for e in offline]


@pytest.mark.parametrize("chunking", ["10ms", "random", "1s"])
def test_streaming_equals_offline(
    recognizer: Recognizer,
    offline: list,
    two_sentences: tuple[np.ndarray, list[str]],
    chunking: str,
) -> None:
    """The same finals, token for token and time for time, in any chunking; partials only
    grow, each token timed where the policy let it out, and the first ones come while the
    sentence is still being spoken."""
    samples = two_sentences[0]
    events = stream(recognizer, samples, RATE, chunk_sizes(chunking, RATE, len(samples)))
    assert finals(events) == finals(offline)
    assert check_no_flicker(events) >= 2
    first_final_end = offline[0].end
    early = [e for e in events if not e.final and e.segment == 0 and e.end < first_final_end]
    assert early and early[0].token_times[0] < first_final_end - 1.0


def test_a_beam_spells_sessions_as_it_does_offline(
    two_sentences: tuple[np.ndarray, list[str]],
) -> None:
    """With decode.speller_beam 3 (`--speller-beam 3`), a session in random chunks gives the
    finals of offline transcription, with partials before each, and a beam below 1 is
    refused by name."""
    beam = load_model(MODEL)
    beam.set_search(1, 0.0, two_pass=False, streaming_decoder="whisper", speller_beam=3)
    samples = two_sentences[0]
    offline = beam.transcribe_segments(samples, RATE)
    events = stream(beam, samples, RATE, chunk_sizes("random", RATE, len(samples)))
    assert finals(events) == finals(offline) and len(offline) == 2
    for segment in (0, 1):
        kinds = [e.final for e in events if e.segment == segment]
        assert kinds[-1] and not any(kinds[:-1]) and len(kinds) >= 2
    with pytest.raises(ValueError, match="--speller-beam must be >= 1"):
        beam.set_search(speller_beam=0)


def test_a_stall_spells_sessions_as_it_does_offline(
    two_sentences: tuple[np.ndarray, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With decode.speller_stall_s (`--speller-stall`), a session in random chunks gives the
    finals of offline transcription, its segments read again where the speller stalled
    (0.32 s: several times in these two sentences) included; a negative stall is refused by
    name."""
    rereads: list[int] = []
    reread = Speller._reread
    monkeypatch.setattr(
        Speller, "_reread", lambda self, *a: rereads.append(a[1]) or reread(self, *a)
    )
    stalled = load_model(MODEL)
    stalled.set_search(1, 0.0, two_pass=False, streaming_decoder="whisper", speller_stall=0.32)
    samples = two_sentences[0]
    offline = stalled.transcribe_segments(samples, RATE)
    offline_rereads = list(rereads)
    assert offline_rereads, "the stall never read a segment again"
    events = stream(stalled, samples, RATE, chunk_sizes("random", RATE, len(samples)))
    assert finals(events) == finals(offline) and len(offline) == 2
    assert rereads[len(offline_rereads) :] == offline_rereads  # at the same boundaries
    with pytest.raises(ValueError, match="--speller-stall must be at least 0 s"):
        stalled.set_search(speller_stall=-1)


def test_two_pass_finals_stay_whisper_finals_over_the_spelled_pass(
    recognizer: Recognizer, two_sentences: tuple[np.ndarray, list[str]]
) -> None:
    """With two-pass finals on top, the finals are the full-attention teacher's and
    Whisper's decoder's, as they are over the LSTM's streaming pass; the partials are still
    the spelled pass's."""
    samples = two_sentences[0]
    both = SessionOptions(two_pass=True, streaming_decoder="whisper")
    over_lstm = SessionOptions(two_pass=True, streaming_decoder="lstm")
    expected = [e.text for e in recognizer.transcribe_segments(samples, RATE, options=over_lstm)]
    session = recognizer.stream(RATE, both)
    events = [*session.accept(samples), *session.finish()]
    assert [e.text for e in events if e.final] == expected
    partials = [e for e in events if not e.final]
    assert partials and partials[0].text[:1].isupper()


def test_a_bundle_refuses_the_whisper_streaming_decoder_it_cannot_serve(
    tmp_path: Path, tiny_bundle: Path
) -> None:
    """A model without Whisper's decoder, and a policy learnt on another student, are
    refused when asked for, each naming why; the LSTM decoder stays available."""
    tiny = load_model(tiny_bundle)
    assert "Whisper front end" in tiny.option_problems()["streaming_decoder"]
    with pytest.raises(ValueError, match="Whisper front end"):
        tiny.set_search(streaming_decoder="whisper")
    tiny.stream(RATE, SessionOptions(streaming_decoder="lstm")).finish()
    with pytest.raises(ValueError, match="must be one of lstm, whisper"):
        SessionOptions(streaming_decoder="beam")  # type: ignore[arg-type]
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(MODEL / POLICY_FILE, other / POLICY_FILE)
    (other / "whisper_encoder.safetensors").write_bytes(b"another student")
    with pytest.raises(ValueError, match="learnt on another streaming student"):
        bundle_policy(other)
    with pytest.raises(FileNotFoundError, match=f"has no {POLICY_FILE}"):
        bundle_policy(tmp_path)


def test_asr_transcribe_spells_with_whisper_streaming(
    offline: list, two_sentences: tuple[np.ndarray, list[str]], tmp_path: Path
) -> None:
    """`asr transcribe --streaming-decoder whisper --no-two-pass` prints the spelled pass's
    finals, as the session gives them."""
    import soundfile as sf

    wav = tmp_path / "two.wav"
    sf.write(wav, two_sentences[0], RATE, subtype="FLOAT")
    command = [sys.executable, "-m", "asr.cli", "transcribe", "--model", str(MODEL), str(wav)]
    flags = ["--streaming-decoder", "whisper", "--no-two-pass", "--beam", "1", "--lm-weight", "0"]
    done = subprocess.run([*command, *flags], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    name, text = done.stdout.rstrip("\n").split("\t")  # FILE<TAB>text
    assert name == str(wav) and text.split() == " ".join(e.text for e in offline).split()


def test_a_server_session_gets_the_spelled_pass(
    recognizer: Recognizer, offline: list, two_sentences: tuple[np.ndarray, list[str]]
) -> None:
    """Over /v1/stream (uvicorn on loopback, one model process), a session asking for the
    Whisper streaming decoder gets the spelled pass's partials and finals, as offline gives
    them, beside one that asks for the LSTM's; /readyz says both are available."""
    samples = two_sentences[0]
    lstm = SessionOptions(two_pass=False, streaming_decoder="lstm")
    plain = [
        Result.from_event(e) for e in recognizer.transcribe_segments(samples, RATE, options=lstm)
    ]
    with LiveServer(Settings(model=MODEL, workers=1, beam=1, lm_weight=0.0)) as live:

        async def sessions() -> list:
            url = live.url("/v1/stream", "ws")
            frames = [file_frames(samples, RATE, paced=False) for _ in range(2)]
            return await asyncio.gather(
                stream_url(url, frames[0], RATE, options=SessionOptions(False, "whisper")),
                stream_url(url, frames[1], RATE, options=lstm),
            )

        spelled, other = asyncio.run(sessions())
        status, ready = live.get_json("/readyz")
    assert spelled.segments == [Result.from_event(e) for e in offline]
    assert other.segments == plain
    assert status == 200
    assert ready["streaming_decoder"] == {"available": ["lstm", "whisper"], "default": "lstm"}
    assert json.loads(json.dumps(ready))["two_pass"]["available"] is True
