"""Audio frontend: file formats against hand-made references, PCM decoding, resampling."""

from __future__ import annotations

import os
import stat
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr.audio import (
    StreamResampler,
    check_sample_rate,
    check_samples,
    decode_pcm,
    load_audio,
    read_audio,
    resample,
)


def _tone(rate: int, seconds: float, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    mono = 0.5 * np.sin(2 * np.pi * 440 * t)
    return np.stack([mono * (c + 1) / channels for c in range(channels)], axis=1)


def _sphere(path: Path, body: bytes, **fields: int | str) -> Path:
    """Write a NIST SPHERE file the way TIMIT's are laid out: 1024-byte text header, then data."""
    lines = ["NIST_1A", "   1024"]
    for name, value in fields.items():
        kind = "-i" if isinstance(value, int) else f"-s{len(value)}"
        lines.append(f"{name} {kind} {value}")
    header = ("\n".join([*lines, "end_head"]) + "\n").encode().ljust(1024, b" ")
    path.write_bytes(header + body)
    return path


@pytest.mark.parametrize(("fmt", "subtype"), [("WAV", "PCM_16"), ("FLAC", "PCM_16")])
def test_wav_and_flac_round_trip_and_mix_to_mono(tmp_path: Path, fmt: str, subtype: str) -> None:
    stereo = _tone(22050, 0.2, channels=2)
    path = tmp_path / f"x.{fmt.lower()}"
    sf.write(path, stereo, 22050, format=fmt, subtype=subtype)
    samples, rate = read_audio(path)
    assert rate == 22050 and samples.dtype == np.float32 and samples.ndim == 1
    np.testing.assert_allclose(samples, stereo.mean(axis=1), atol=1 / 32768)


@pytest.mark.parametrize(("order", "dtype"), [("01", "<i2"), ("10", ">i2")])
def test_sphere_pcm_both_byte_orders(tmp_path: Path, order: str, dtype: str) -> None:
    ints = np.array([0, 1, -1, 32767, -32768, 1234, -4321], dtype=np.int16)
    path = _sphere(
        tmp_path / "SA1.WAV",
        ints.astype(dtype).tobytes(),
        sample_count=len(ints),
        sample_rate=16000,
        channel_count=1,
        sample_n_bytes=2,
        sample_byte_format=order,
        sample_coding="pcm",
    )
    samples, rate = read_audio(path)
    assert rate == 16000
    np.testing.assert_array_equal(samples, ints / np.float32(32768))


def test_sphere_stereo_is_averaged_and_sample_count_bounds_the_data(tmp_path: Path) -> None:
    frames = np.array([[100, 300], [-200, 0], [7, 9]], dtype="<i2")
    path = _sphere(
        tmp_path / "st.sph",
        frames.tobytes() + b"\x00\x00trailing",
        sample_count=2,
        sample_rate=8000,
        channel_count=2,
        sample_n_bytes=2,
        sample_byte_format="01",
    )
    samples, rate = read_audio(path)
    assert rate == 8000
    np.testing.assert_array_equal(samples, np.float32([200, -100]) / 32768)


def test_sphere_ulaw_matches_libsndfile(tmp_path: Path) -> None:
    codes = np.arange(256, dtype=np.uint8)
    raw = tmp_path / "ref.ulaw"
    raw.write_bytes(codes.tobytes())
    reference, _ = sf.read(raw, format="RAW", subtype="ULAW", samplerate=8000, channels=1)
    path = _sphere(
        tmp_path / "u.sph",
        codes.tobytes(),
        sample_count=256,
        sample_rate=8000,
        channel_count=1,
        sample_n_bytes=1,
        sample_coding="ulaw",
    )
    samples, _ = read_audio(path)
    np.testing.assert_allclose(samples, reference, atol=1e-7)


def test_shorten_sphere_without_sph2pipe_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    path = _sphere(
        tmp_path / "wsj.wv1",
        b"\x00" * 64,
        sample_rate=16000,
        sample_coding="pcm,embedded-shorten-v2.00",
    )
    with pytest.raises(ValueError, match=r"wsj\.wv1.*sph2pipe is not on PATH.*build it"):
        read_audio(path)


def test_shorten_sphere_is_decoded_through_sph2pipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = (np.arange(-50, 50) * 300).astype(np.int16)
    sf.write(tmp_path / "decoded.wav", expected, 16000, subtype="PCM_16")
    fake = tmp_path / "sph2pipe"
    fake.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"assert sys.argv[1:4] == ['-f', 'wav', '-p']\n"
        f"sys.stdout.buffer.write(open({str(tmp_path / 'decoded.wav')!r}, 'rb').read())\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    path = _sphere(tmp_path / "a.wv1", b"\x01" * 64, sample_rate=16000, sample_coding="pcm,shorten")
    samples, rate = read_audio(path)
    assert rate == 16000
    np.testing.assert_array_equal(samples, expected / np.float32(32768))


@pytest.mark.parametrize(
    ("fields", "body", "message"),
    [
        ({"sample_rate": 16000, "sample_count": 10}, b"\x00" * 4, "truncated"),
        ({"sample_count": 2}, b"\x00" * 4, "sample_rate"),
        ({"sample_rate": 16000, "sample_n_bytes": 4}, b"\x00" * 8, "unsupported SPHERE"),
        ({"sample_rate": 16000, "sample_byte_format": "0123"}, b"\x00" * 8, "byte_format"),
        ({"sample_rate": 96000}, b"\x00" * 8, "outside the supported"),
    ],
)
def test_bad_sphere_headers(tmp_path: Path, fields: dict, body: bytes, message: str) -> None:
    path = _sphere(tmp_path / "bad.sph", body, **fields)
    with pytest.raises(ValueError, match=message):
        read_audio(path)


def test_bad_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"missing\.wav: no such audio file"):
        read_audio(tmp_path / "missing.wav")
    (tmp_path / "empty.wav").write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.wav: cannot read audio"):
        read_audio(tmp_path / "empty.wav")
    (tmp_path / "junk.flac").write_bytes(b"not audio at all" * 10)
    with pytest.raises(ValueError, match=r"junk\.flac: cannot read audio"):
        read_audio(tmp_path / "junk.flac")
    sf.write(tmp_path / "silent.wav", np.zeros(0), 16000)
    with pytest.raises(ValueError, match=r"silent\.wav: audio file holds no samples"):
        read_audio(tmp_path / "silent.wav")
    (tmp_path / "noend.sph").write_bytes(b"NIST_1A\n   1024\nsample_rate -i 16000\n".ljust(1100))
    with pytest.raises(ValueError, match=r"noend\.sph: .*end_head"):
        read_audio(tmp_path / "noend.sph")


def test_load_audio_resamples_to_the_feature_rate(tmp_path: Path) -> None:
    sf.write(tmp_path / "a.wav", _tone(8000, 0.5), 8000, subtype="FLOAT")
    samples = load_audio(tmp_path / "a.wav")
    assert samples.dtype == np.float32 and len(samples) == 8000
    np.testing.assert_allclose(samples[2000:6000], _tone(16000, 0.5)[2000:6000, 0], atol=2e-3)
    sf.write(tmp_path / "b.wav", _tone(8000, 0.1), 8000)
    with pytest.raises(ValueError, match=r"b\.wav: .*outside the supported"):
        load_audio(tmp_path / "b.wav", rate=4000)


def test_decode_pcm() -> None:
    ints = np.array([0, 1, -1, 32767, -32768], dtype="<i2")
    np.testing.assert_array_equal(
        decode_pcm(ints.tobytes(), "pcm_s16le"), ints.astype(np.float32) / 32768
    )
    floats = np.array([0.0, 0.5, -1.0, 0.25], dtype="<f4")
    out = decode_pcm(bytearray(floats.tobytes()), "f32le")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, floats)
    assert decode_pcm(b"", "pcm_s16le").shape == (0,)


@pytest.mark.parametrize(
    ("data", "encoding", "message"),
    [
        (b"\x00\x00\x00", "pcm_s16le", "odd number of bytes"),
        (b"\x00" * 6, "f32le", "not a multiple of 4"),
        (np.float32([np.nan]).tobytes(), "f32le", "NaN"),
        (b"\x00\x00", "mp3", "unknown PCM encoding 'mp3'"),
    ],
)
def test_decode_pcm_rejects(data: bytes, encoding: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_pcm(data, encoding)


def test_check_sample_rate() -> None:
    assert check_sample_rate(8000) == 8000
    assert check_sample_rate(np.int64(48000)) == 48000
    for bad, message in [
        (7999, "outside"),
        (48001, "outside"),
        (16000.0, "integer"),
        (True, "integer"),
        ("16000", "integer"),
    ]:
        with pytest.raises(ValueError, match=message):
            check_sample_rate(bad)


def test_check_samples() -> None:
    out = check_samples(np.array([0, 16384, -32768], dtype=np.int16))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [0.0, 0.5, -1.0])
    assert check_samples(np.array([0.25, -0.5])).dtype == np.float32
    for bad, message in [
        ([0.1, 0.2], "numpy array"),
        (np.zeros((2, 3), np.float32), "1-D"),
        (np.zeros(0, np.float32), "empty"),
        (np.zeros(3, np.int32), "int32"),
        (np.array([0.0, np.nan], np.float32), "NaN"),
        (np.array([np.inf]), "infinity"),
    ]:
        with pytest.raises(ValueError, match=message):
            check_samples(bad)


@pytest.mark.parametrize("src", [8000, 22050, 44100, 48000])
def test_chunked_resampling_equals_whole(src: int) -> None:
    rng = np.random.default_rng(src)
    x = (0.3 * rng.standard_normal(src)).astype(np.float32)
    whole = resample(x, src, 16000)
    assert whole.dtype == np.float32 and abs(len(whole) - 16000) <= 1
    for sizes in ([1] * 200 + [src], [src // 100], rng.integers(1, 4000, size=64)):
        stream = StreamResampler(src, 16000)
        outs, start, i = [], 0, 0
        while start < len(x):
            n = int(sizes[min(i, len(sizes) - 1)])
            outs.append(stream.process(x[start : start + n]))
            start, i = start + n, i + 1
        outs.append(stream.flush())
        chunked = np.concatenate(outs)
        assert chunked.shape == whole.shape
        assert np.abs(chunked - whole).max() <= 1e-4


def test_resample_keeps_a_tone_and_is_identity_at_equal_rates() -> None:
    tone = _tone(44100, 0.5)[:, 0].astype(np.float32)
    out = resample(tone, 44100, 16000)
    np.testing.assert_allclose(out[1000:7000], _tone(16000, 0.5)[1000:7000, 0], atol=2e-3)
    np.testing.assert_array_equal(resample(tone, 16000, 16000), tone)


def test_stream_resampler_rejects_bad_use() -> None:
    with pytest.raises(ValueError, match="outside"):
        StreamResampler(96000, 16000)
    stream = StreamResampler(16000, 16000)
    with pytest.raises(ValueError, match="NaN"):
        stream.process(np.array([np.nan], np.float32))
    assert stream.process(np.ones(4, np.float32)).shape == (4,)
    assert stream.flush().shape == (0,)
    with pytest.raises(ValueError, match="already flushed"):
        stream.process(np.ones(4, np.float32))


def test_a_long_many_channel_file_costs_little_more_than_its_mono_samples(tmp_path: Path) -> None:
    rate, seconds = 48000, 60
    block = (_tone(rate, 1.0, channels=6) * 0.5).astype(np.float32)
    path = tmp_path / "six.wav"
    with sf.SoundFile(path, "w", rate, 6, subtype="PCM_16") as f:
        for _ in range(seconds):
            f.write(block)
    tracemalloc.start()
    samples, _ = read_audio(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(samples) == rate * seconds
    np.testing.assert_allclose(samples[:rate], block.mean(axis=1), atol=1 / 32768)
    # the mono result is 11.5 MB and one block of six channels about 8 MB more; the whole
    # file read as float32 at once, then averaged in float64, would peak near 9 times that
    assert peak < 2.5 * samples.nbytes, peak / samples.nbytes
