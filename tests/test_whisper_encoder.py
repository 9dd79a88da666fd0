"""Whisper's front end and encoder against references (faster-whisper's log-mel, CTranslate2's
encoder), and streaming against offline: equal bit for bit, in bounded memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from asr.audio import read_audio
from asr.whisper_encoder import (
    Int8Linear,
    Int8Product,
    Streaming,
    WhisperDims,
    WhisperEncoder,
    load_encoder,
)
from asr.whisper_features import SAMPLE_RATE, StreamingWhisperMel, log_mel

REPO = Path(__file__).resolve().parents[1]
HELDOUT = sorted((REPO / "tests" / "data" / "heldout").glob("*/*.flac"))
STREAMING = Streaming(chunk=8, left_context=48)


def _audio(index: int) -> np.ndarray:
    samples, rate = read_audio(HELDOUT[index])
    assert rate == SAMPLE_RATE
    return samples


def _chunks(n: int, chunking: str, seed: int = 0) -> list[int]:
    if chunking == "random":
        return [int(s) for s in np.random.default_rng(seed).integers(1, 9000, size=n // 100 + 1)]
    size = {"10ms": 160, "1s": 16000}[chunking]
    return [size] * (n // size + 1)


@pytest.fixture(scope="module")
def teacher() -> WhisperEncoder:
    return load_encoder(REPO / "models" / "whisper-base")


@pytest.mark.parametrize("index", [0, 5, 13, 20])
def test_log_mel_matches_faster_whisper(index: int) -> None:
    from faster_whisper.feature_extractor import FeatureExtractor

    samples = _audio(index)
    reference = FeatureExtractor()(samples).T  # Whisper's floor: the utterance's max - 8
    ours = log_mel(samples, floor=None)
    assert ours.shape == (len(samples) // 160, 80)
    np.testing.assert_allclose(ours, reference[: len(ours)], rtol=0, atol=1e-4)


@pytest.mark.parametrize("chunking", ["10ms", "random", "1s"])
def test_streamed_log_mel_equals_batch(chunking: str) -> None:
    samples = _audio(3)
    stream = StreamingWhisperMel()
    parts, start = [], 0
    for size in _chunks(len(samples), chunking):
        if start < len(samples):
            parts.append(stream.accept(samples[start : start + size]))
        start += size
    parts.append(stream.finish())
    np.testing.assert_array_equal(np.concatenate(parts), log_mel(samples))
    with pytest.raises(ValueError, match="finish"):
        stream.finish()


@pytest.mark.parametrize("length", [1, 160, 200])
def test_a_click_of_at_most_200_samples_has_no_frame(length: int) -> None:
    """The first frame's reflected start needs 201 samples; fewer end the stream with none."""
    stream = StreamingWhisperMel()
    assert stream.accept(_audio(1)[:length]).shape == (0, 80)
    assert stream.finish().shape == (0, 80)
    assert log_mel(_audio(1)[:length]).shape == (0, 80)
    assert log_mel(_audio(1)[:201]).shape == (1, 80)


def test_constant_floor_only_differs_below_it() -> None:
    samples = _audio(7)
    fixed, whisper = log_mel(samples), log_mel(samples, floor=None)
    above = (whisper > whisper.min()) & (fixed > fixed.min())  # above both floors
    assert above.mean() > 0.5
    np.testing.assert_array_equal(fixed[above], whisper[above])
    assert fixed.min() == pytest.approx((-7.0 + 4) / 4)


def test_full_attention_matches_ctranslate2(teacher: WhisperEncoder, ct2_whisper_dir: Path) -> None:
    import ctranslate2

    samples = np.zeros(30 * SAMPLE_RATE, dtype=np.float32)
    utterance = _audio(1)
    samples[: len(utterance)] = utterance  # padded to 30 s, as Whisper encodes
    mel = log_mel(samples, floor=None)
    model = ctranslate2.models.Whisper(str(ct2_whisper_dir), device="cpu", compute_type="float32")
    features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel.T[None]))
    reference = np.array(model.encode(features, to_cpu=True))[0]
    with torch.no_grad():
        ours = teacher(torch.from_numpy(mel)[None])[0][0].numpy()
    assert ours.shape == reference.shape == (1500, 512)
    error = np.abs(ours - reference).max()
    # The weights are float16; both sides compute in float32. Measured: 4.2e-4 (1.7e-5 of the
    # largest value): a few float16 ulps at the largest activations.
    assert error < 1e-3 and error / np.abs(reference).max() < 5e-5


def _stream_states(encoder: WhisperEncoder, samples: np.ndarray, sizes: list[int]) -> torch.Tensor:
    mel, stream = StreamingWhisperMel(), encoder.stream(STREAMING)
    out, start = [], 0
    for size in sizes:
        if start < len(samples):
            out.append(stream.accept(torch.from_numpy(mel.accept(samples[start : start + size]))))
        start += size
    out.append(stream.accept(torch.from_numpy(mel.finish())))
    out.append(stream.finish())
    return torch.cat(out)


@pytest.mark.parametrize("chunking", ["10ms", "random", "1s"])
def test_streaming_encoder_equals_offline(teacher: WhisperEncoder, chunking: str) -> None:
    samples = _audio(2)
    offline = _stream_states(teacher, samples, [len(samples)])
    streamed = _stream_states(teacher, samples, _chunks(len(samples), chunking, seed=4))
    assert offline.shape == ((len(samples) // 160 + 1) // 2, 512)
    assert torch.equal(streamed, offline)
    # the batched form used for training: the same mask, other kernels (rounding only)
    with torch.no_grad():
        batched, lengths = teacher(torch.from_numpy(log_mel(samples))[None], streaming=STREAMING)
    assert int(lengths[0]) == len(offline)
    assert (batched[0] - offline).abs().max() < 2e-3


def test_padded_batch_matches_each_utterance(teacher: WhisperEncoder) -> None:
    mels = [torch.from_numpy(log_mel(_audio(i))) for i in (0, 4)]
    lengths = torch.tensor([len(m) for m in mels])
    padded = torch.nn.utils.rnn.pad_sequence(mels, batch_first=True)
    with torch.no_grad():
        batch, out_lengths = teacher(padded, lengths, streaming=STREAMING)
        for row, mel in enumerate(mels):
            alone, _ = teacher(mel[None], streaming=STREAMING)
            n = int(out_lengths[row])
            assert n == alone.shape[1]
            assert (batch[row, :n] - alone[0]).abs().max() < 2e-3


def test_whole_utterance_states_are_the_streams(teacher: WhisperEncoder) -> None:
    """encode_whole, which training caches and the front-end benchmark read: within the
    position table one masked pass (rounding only), past it the stream itself (exact)."""
    samples = _audio(2)
    short = teacher.encode_whole(torch.from_numpy(log_mel(samples)), STREAMING)
    assert (short - _stream_states(teacher, samples, [len(samples)])).abs().max() < 2e-3
    torch.manual_seed(0)
    tiny = WhisperEncoder(WhisperDims(n_mels=80, d_model=16, n_heads=2, n_layers=2, n_ctx=40))
    tiny.eval().positions.normal_()
    mel = torch.from_numpy(np.random.default_rng(0).standard_normal((250, 80), np.float32))
    streaming = Streaming(chunk=4, left_context=20)
    stream = tiny.stream(streaming)
    with torch.no_grad():
        expected = torch.cat([stream.accept(mel), stream.finish()])
        windows = torch.cat([tiny(w[None])[0][0] for w in torch.split(mel, 80)])
    assert torch.equal(tiny.encode_whole(mel, streaming), expected)  # 125 states > n_ctx
    assert torch.equal(tiny.encode_whole(mel, None), windows)  # full attention: 30 s windows


@pytest.mark.parametrize("chunking", ["one piece", "random"])
def test_a_primed_stream_is_its_silence_then_its_audio(chunking: str) -> None:
    """A stream primed with two chunks of silence gives the states of a stream fed those
    silent frames first, without them, in any chunking; so does encode_whole (one masked
    pass, rounding only); and the prime changes what the first chunks read."""
    torch.manual_seed(0)
    tiny = WhisperEncoder(WhisperDims(n_mels=80, d_model=16, n_heads=2, n_layers=2, n_ctx=100))
    tiny.eval().positions.normal_()
    mel = torch.from_numpy(np.random.default_rng(1).standard_normal((61, 80), np.float32))
    primed = Streaming(chunk=4, left_context=20, prime=8, silence=-0.75)
    plain = Streaming(chunk=4, left_context=20)
    sizes = [61] if chunking == "one piece" else [int(n) for n in (1, 7, 2, 13, 30, 8)]
    stream, out, start = tiny.stream(primed), [], 0
    for size in sizes:
        out.append(stream.accept(mel[start : start + size]))
        start += size
    got = torch.cat([*out, stream.finish()])
    silence = torch.full((16, 80), -0.75)
    reference = tiny.stream(plain)
    expected = torch.cat([reference.accept(torch.cat([silence, mel])), reference.finish()])[8:]
    assert got.shape == (31, 16) and torch.equal(got, expected)
    assert (tiny.encode_whole(mel, primed) - expected).abs().max() < 1e-5
    with torch.no_grad():  # training's batched form, a shorter utterance padded beside it
        padded = torch.stack([mel, torch.cat([mel[:40], torch.zeros(21, 80)])])
        batch, lengths = tiny(padded, torch.tensor([61, 40]), streaming=primed)
    assert lengths.tolist() == [31, 20] and (batch[0] - expected).abs().max() < 1e-5
    assert (batch[1, :20] - tiny.encode_whole(mel[:40], primed)).abs().max() < 1e-5
    unprimed = tiny.encode_whole(mel, plain)
    assert (unprimed[:4] - expected[:4]).abs().max() > 0.1


def test_stream_memory_is_bounded_past_the_position_table() -> None:
    """A tiny random encoder through 100 s (3.3 position tables): what a stream holds stops
    growing, and states keep coming past 30 s."""
    torch.manual_seed(0)
    dims = WhisperDims(n_mels=80, d_model=16, n_heads=2, n_layers=2, n_ctx=1500)
    encoder = WhisperEncoder(dims).eval()
    encoder.positions.normal_()
    stream = encoder.stream(Streaming(chunk=8, left_context=200))
    rng = np.random.default_rng(0)
    held = []
    states = 0
    for _ in range(100):
        states += len(stream.accept(torch.from_numpy(rng.standard_normal((100, 80), np.float32))))
        filled = int((stream._slot_state >= 0).sum())
        held.append((len(stream._mel), tuple(stream._keys.shape), filled))
    assert states == stream.states >= 5000 - 8
    assert all(mel <= 2 * 8 + 3 and keys == (2, 1, 2, 208, 8) for mel, keys, _ in held)
    assert all(filled == 208 for _, _, filled in held[10:])
    assert torch.isfinite(stream.finish()).all()


def test_streaming_settings_are_checked(teacher: WhisperEncoder) -> None:
    with pytest.raises(ValueError, match="at most 1500"):
        teacher.stream(Streaming(chunk=100, left_context=1450))
    with pytest.raises(ValueError, match="chunk >= 1"):
        teacher.stream(Streaming(chunk=0))
    with pytest.raises(ValueError, match="whole number of chunks"):
        teacher.stream(Streaming(chunk=16, prime=8))
    with pytest.raises(ValueError, match="full attention covers at most 1500"):
        teacher(torch.zeros(1, 3002, 80))


def test_both_int8_kernels_give_the_exact_integer_sums() -> None:
    """Int8Product picks oneDNN's packed kernel or _int_mm by speed on this CPU; either must
    return the exact integer product, so the choice never changes a state."""
    generator = torch.Generator().manual_seed(0)
    for inner in (240, 512, 1536, 2048):  # the convolutions' windows and the layers' widths
        rows = torch.randint(-127, 128, (96, inner), dtype=torch.int8, generator=generator)
        x = torch.randint(-127, 128, (9, inner), dtype=torch.int8, generator=generator)
        exact = (x.long() @ rows.long().t()).float()
        for packed in (True, False):
            assert torch.equal(Int8Product(rows, packed)(x), exact), (inner, packed)


def test_int8_linear_rows_keep_their_own_scale_whatever_their_company() -> None:
    """Rows int8: each row's output is the same alone as in any batch, bit for bit, and a
    quiet row keeps its precision next to a loud one (its own scale)."""
    torch.manual_seed(0)
    linear = nn.Linear(64, 48, bias=False)
    int8 = Int8Linear.of(linear)
    x = torch.randn(9, 64) * torch.logspace(-4, 2, 9).unsqueeze(1)  # 1e-4 to 100 loud
    with torch.no_grad():
        together, exact = int8(x), linear(x)
        for i in range(len(x)):
            assert torch.equal(int8(x[i : i + 1]), together[i : i + 1])
        assert torch.equal(int8(x.view(3, 3, 64)), together.view(3, 3, 48))
        error = (together - exact).norm(dim=1) / exact.norm(dim=1)
    assert float(error.max()) < 0.015  # measured: 0.006-0.008 on every row, 1e-4 to 100 loud
