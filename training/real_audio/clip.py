"""One recording found in a package, and the decoders its bytes need.

A clip is decoded only when its WAV is not written yet (``load`` is called lazily), so a
rerun of the recipe skips finished clips without decoding them again.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import soundfile

Audio = tuple[np.ndarray, int]  # float32 mono samples and their rate


@dataclass
class Clip:
    """``id`` is unique within its source and safe as a file name; ``language`` overrides the
    source's; an empty ``text`` means the package has none that is clearly the words spoken."""

    id: str
    load: Callable[[], Audio]
    text: str = ""
    speaker: str | None = None
    language: str | None = None


def pcm_u8(data: bytes) -> np.ndarray:
    """Unsigned 8-bit samples (128 is silence) as float32 in [-1, 1)."""
    return (np.frombuffer(data, np.uint8).astype(np.float32) - 128.0) / 128.0


def soundfile_bytes(data: bytes) -> Audio:
    """WAV, Ogg Vorbis, FLAC or MP3 held in memory, averaged to mono (libsndfile decodes MP3
    from version 1.1 on)."""
    samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return samples.mean(axis=1), int(rate)


def soundfile_path(path: str) -> Audio:
    """The same for a file on disk, and headerless GSM 06.10 (``.gsm``, 8 kHz) too."""
    if path.endswith(".gsm"):
        samples, rate = soundfile.read(
            path, format="RAW", subtype="GSM610", samplerate=8000, channels=1, dtype="float32"
        )
        return samples, int(rate)
    with open(path, "rb") as f:
        return soundfile_bytes(f.read())


def g722_path(path: str) -> Audio:
    """Headerless G.722 at 64 kbit/s (16 kHz audio), decoded by FFmpeg's decoder through PyAV:
    libsndfile has no G.722."""
    import av  # only the Asterisk sources need it

    with av.open(path, format="g722") as container:
        stream = container.streams.audio[0]
        frames = [f.to_ndarray().reshape(-1) for f in container.decode(stream)]
        rate = int(stream.codec_context.sample_rate)
    if not frames:
        raise ValueError(f"{path}: no G.722 frames")
    return np.concatenate(frames).astype(np.float32) / 32768.0, rate
