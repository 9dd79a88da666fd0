"""Audio input: files, raw PCM bytes, validation and resampling to the model rate.

Everything downstream works on 1-D float32 mono samples in [-1, 1] at the
feature rate (16 kHz). Resampling is done by one streaming soxr path, so audio
resampled whole and audio resampled chunk by chunk give the same samples, which
is what lets a streaming session reproduce offline decoding.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

MIN_RATE = 8000
MAX_RATE = 48000
PCM_ENCODINGS = ("pcm_s16le", "f32le")

_SPHERE_MAGIC = b"NIST_1A\n"
_SPH2PIPE_HINT = (
    "sph2pipe is not on PATH; it is not packaged for Debian or PyPI, so build it "
    "from the LDC sph2pipe source (Kaldi's tools/Makefile has a 'sph2pipe' target) "
    "and put the binary on PATH, or convert the corpus to WAV/FLAC once with it"
)


def check_sample_rate(rate: object) -> int:
    """Reject rates the frontend is not built for, before they reach soxr or the model."""
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)):
        raise ValueError(f"sample rate must be an integer, got {rate!r}")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ValueError(
            f"sample rate {rate} Hz is outside the supported {MIN_RATE}..{MAX_RATE} Hz"
        )
    return int(rate)


def check_samples(x: object, clip: bool = False) -> np.ndarray:
    """Return ``x`` as 1-D float32 in [-1, 1] scale, or raise on anything a stream should not get.

    int16 is scaled by 1/32768 so raw PCM and float audio land on the same scale. ``clip``
    bounds float samples to [-1, 1], as int16 ones are by construction: for audio from
    outside (a client's f32le, a float WAV), since finite samples far beyond full scale
    overflow the resampler and the filterbank (infinity, NaN).
    """
    if not isinstance(x, np.ndarray):
        raise ValueError(f"samples must be a numpy array, got {type(x).__name__}")
    if x.ndim != 1:
        raise ValueError(f"samples must be 1-D (mono), got shape {x.shape}")
    if x.size == 0:
        raise ValueError("samples are empty")
    if x.dtype == np.int16:
        return x.astype(np.float32) / 32768.0
    if x.dtype not in (np.float32, np.float64):
        raise ValueError(f"samples must be float32, float64 or int16, got {x.dtype}")
    _check_finite(x)
    if clip:
        x = np.clip(x, -1.0, 1.0)  # before float64 -> float32, which could overflow
    return np.ascontiguousarray(x, dtype=np.float32)


def _check_finite(x: np.ndarray) -> None:
    if not np.isfinite(x).all():
        raise ValueError("samples contain NaN or infinity")


def decode_pcm(data: bytes | bytearray | memoryview, encoding: str) -> np.ndarray:
    """Decode raw little-endian audio bytes (as sent by a client) to float32 samples."""
    raw = memoryview(data).cast("B")
    if encoding == "pcm_s16le":
        if len(raw) % 2:
            raise ValueError(f"pcm_s16le data has an odd number of bytes ({len(raw)})")
        return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    if encoding == "f32le":
        if len(raw) % 4:
            raise ValueError(f"f32le data length {len(raw)} is not a multiple of 4 bytes")
        samples = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        _check_finite(samples)
        return samples
    raise ValueError(f"unknown PCM encoding {encoding!r}; supported: {', '.join(PCM_ENCODINGS)}")


class StreamResampler:
    """Resample a stream chunk by chunk; outputs concatenated equal a one-shot :func:`resample`."""

    def __init__(self, src: int, dst: int) -> None:
        self.src = check_sample_rate(src)
        self.dst = check_sample_rate(dst)
        self._soxr = (
            None
            if self.src == self.dst
            else soxr.ResampleStream(self.src, self.dst, 1, "float32", "HQ")
        )
        self._flushed = False

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Resample one chunk; soxr holds back a few samples of filter delay until :meth:`flush`."""
        return self._run(check_samples(chunk), last=False)

    def flush(self) -> np.ndarray:
        """Return the held-back tail; the stream is finished afterwards."""
        return self._run(np.zeros(0, dtype=np.float32), last=True)

    def _run(self, x: np.ndarray, last: bool) -> np.ndarray:
        if self._flushed:
            raise ValueError("resampler was already flushed; create a new one for a new stream")
        self._flushed = last
        if self._soxr is None:
            return x
        return self._soxr.resample_chunk(x, last=last)


class HopLoudness:
    """Loudness (dBFS) of each complete ``hop`` samples of a stream, in order: what the
    trailing-silence endpoint and the encoder's restart after a pause read."""

    def __init__(self, hop: int) -> None:
        self.hop = hop
        self._tail = np.zeros(0, dtype=np.float32)

    def add(self, samples: np.ndarray) -> np.ndarray:
        """The loudness of the hops these samples complete (the rest waits for more)."""
        x = np.concatenate([self._tail, samples])
        hops = len(x) // self.hop
        power = np.mean(x[: hops * self.hop].reshape(hops, self.hop) ** 2, axis=1)
        self._tail = x[hops * self.hop :]
        return 10 * np.log10(power + 1e-12)


def resample(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Resample a whole signal through the streaming path, so offline equals streaming exactly."""
    resampler = StreamResampler(src, dst)
    return np.concatenate([resampler.process(x), resampler.flush()])


def read_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """Read WAV, FLAC or NIST SPHERE (TIMIT, WSJ) as float32 mono at the file's own rate."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such audio file")
    try:
        with path.open("rb") as f:
            magic = f.read(len(_SPHERE_MAGIC))
        if magic == _SPHERE_MAGIC:
            samples, rate = _read_sphere(path)
        else:
            samples, rate = _read_soundfile(path)
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as err:
        raise ValueError(f"{path}: cannot read audio: {err}") from None
    if samples.size == 0:
        raise ValueError(f"{path}: audio file holds no samples")
    return samples, rate


def load_audio(path: str | Path, rate: int = 16000) -> np.ndarray:
    """Read a file and resample it to ``rate`` (the feature rate by default)."""
    samples, file_rate = read_audio(path)
    try:
        return resample(samples, file_rate, rate)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


_READ_BLOCK = 1 << 18  # frames of a file decoded at a time (5.5 s at 48 kHz)


def _to_mono(frames: np.ndarray) -> np.ndarray:
    """Average [n, channels] to float32 mono."""
    return np.ascontiguousarray(frames.mean(axis=1, dtype=np.float64), dtype=np.float32)


def _read_soundfile(source: Path | io.BytesIO) -> tuple[np.ndarray, int]:
    """Mono float32, read a block at a time: an hour of many-channel audio never sits in
    memory whole, only its mono samples do."""
    with sf.SoundFile(source) as f:
        mono, done = np.empty(max(f.frames, 0), np.float32), 0
        while len(block := f.read(_READ_BLOCK, dtype="float32", always_2d=True)):
            mono[done : done + len(block)] = _to_mono(block)
            done += len(block)
        return mono[:done], int(f.samplerate)


def _read_sphere(path: Path) -> tuple[np.ndarray, int]:
    """Parse a NIST SPHERE file: a text header of ``name -type value`` lines, then samples."""
    raw = path.read_bytes()
    lines = raw[:1024].split(b"\n")
    try:
        header_size = int(lines[1])
    except (IndexError, ValueError):
        raise ValueError("SPHERE header size line is missing or not a number") from None
    if header_size < 16 or header_size > len(raw):
        raise ValueError(f"SPHERE header size {header_size} does not fit the file")
    fields = _sphere_fields(raw[:header_size])
    coding = str(fields.get("sample_coding", "pcm"))
    if "shorten" in coding:
        return _read_shorten(path)
    rate = check_sample_rate(_sphere_int(fields, "sample_rate", None))
    channels = _sphere_int(fields, "channel_count", 1)
    width = _sphere_int(fields, "sample_n_bytes", 1 if coding == "ulaw" else 2)
    body = raw[header_size:]
    count = _sphere_int(fields, "sample_count", len(body) // (width * channels))
    needed = count * width * channels
    if len(body) < needed:
        raise ValueError(f"SPHERE data is truncated: {len(body)} bytes, header promises {needed}")
    body = body[:needed]
    if coding == "ulaw" and width == 1:
        samples = _ULAW_TABLE[np.frombuffer(body, dtype=np.uint8)]
    elif coding == "pcm" and width == 2:
        order = fields.get("sample_byte_format", "01")
        if order not in ("01", "10"):
            raise ValueError(f"SPHERE sample_byte_format {order!r} is not 01 or 10")
        dtype = "<i2" if order == "01" else ">i2"
        samples = np.frombuffer(body, dtype=dtype).astype(np.float32) / 32768.0
    else:
        raise ValueError(f"unsupported SPHERE sample_coding {coding!r} with {width}-byte samples")
    return _to_mono(samples.reshape(-1, channels)), rate


def _sphere_fields(header: bytes) -> dict[str, int | float | str]:
    fields: dict[str, int | float | str] = {}
    for line in header.decode("ascii", errors="replace").split("\n")[2:]:
        parts = line.strip().split(None, 2)
        if parts and parts[0] == "end_head":
            return fields
        if len(parts) != 3 or not parts[1].startswith("-"):
            continue
        name, kind, value = parts
        try:
            fields[name] = int(value) if kind == "-i" else float(value) if kind == "-r" else value
        except ValueError:
            raise ValueError(f"SPHERE field {name} has a bad value {value!r}") from None
    raise ValueError("SPHERE header has no end_head line")


def _sphere_int(fields: dict[str, int | float | str], name: str, default: int | None) -> int:
    value = fields.get(name, default)
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"SPHERE field {name} must be a positive integer, got {value!r}")
    return value


def _read_shorten(path: Path) -> tuple[np.ndarray, int]:
    """Shorten-compressed SPHERE (WSJ, some TIMIT copies) is decoded by the reference tool."""
    tool = shutil.which("sph2pipe")
    if tool is None:
        raise ValueError(f"shorten-compressed SPHERE: {_SPH2PIPE_HINT}")
    result = subprocess.run(
        [tool, "-f", "wav", "-p", str(path)], capture_output=True, check=False, timeout=600
    )
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip()
        raise ValueError(f"sph2pipe failed with exit code {result.returncode}: {message}")
    return _read_soundfile(io.BytesIO(result.stdout))


def _ulaw_table() -> np.ndarray:
    """G.711 mu-law byte -> float32 sample, scaled like 16-bit PCM."""
    code = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent = (code >> 4) & 0x07
    magnitude = ((((code & 0x0F) << 3) + 0x84) << exponent) - 0x84
    return (np.where(code & 0x80, -magnitude, magnitude) / 32768.0).astype(np.float32)


_ULAW_TABLE = _ulaw_table()
