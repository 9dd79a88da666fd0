"""Whisper's log-mel front end, written here, streaming and batch alike.

16 kHz audio, a 400-sample periodic Hann window every 160 samples (centred,
the start reflect-padded as ``torch.stft(center=True)`` does), power spectrum,
80 Slaney-scale mel bands with Slaney area normalisation, log10, then Whisper's
scaling ``(max(x, floor) + 4) / 4``.

Whisper's floor is "the utterance's maximum minus 8", which looks at the whole
utterance and cannot stream. The streaming floor is a constant (``floor``, -7 by
default: about where "maximum minus 8" lands for speech at a normal level);
``floor=None`` keeps Whisper's rule for offline comparisons.

Frame k is centred on sample 160 k and needs samples up to 160 k + 199, so a
frame exists 12.5 ms after its centre; ``finish`` pads the end with zeros and
gives the frames Whisper gives (``len(samples) // 160`` in all). The mel
projection is an elementwise product summed along each frame, never a matrix
product whose rounding could depend on how many frames arrive together, so
frames streamed in any chunking equal the batch frames bit for bit.
"""

from __future__ import annotations

import numpy as np

from asr.audio import check_samples

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
N_MELS = 80
POWER_MIN = 1e-10  # mel power's clamp before log10: digital silence's value
_HALF = N_FFT // 2
_BLOCK = 256  # frames per block of the mel projection (bounds its temporary memory)


_F_SP = 200.0 / 3  # Hz per mel below 1 kHz
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = np.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    return np.where(
        hz >= _MIN_LOG_HZ,
        _MIN_LOG_MEL + np.log(np.maximum(hz, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOGSTEP,
        hz / _F_SP,
    )


def mel_to_hz(mel: np.ndarray) -> np.ndarray:
    """The inverse of :func:`hz_to_mel`."""
    return np.where(
        mel >= _MIN_LOG_MEL, _MIN_LOG_HZ * np.exp(_LOGSTEP * (mel - _MIN_LOG_MEL)), mel * _F_SP
    )


def mel_edges(n_mels: int = N_MELS, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """The n_mels + 2 band edges in Hz, equally spaced in mel from 0 to half the rate; band k
    rises from edge k, peaks at edge k + 1 (its centre) and falls to edge k + 2."""
    return mel_to_hz(np.linspace(0.0, hz_to_mel(np.array(sample_rate / 2.0)), n_mels + 2))


def mel_filters(
    n_mels: int = N_MELS, n_fft: int = N_FFT, sample_rate: int = SAMPLE_RATE
) -> np.ndarray:
    """Slaney-scale triangular filters with Slaney normalisation, [n_mels, n_fft // 2 + 1]."""
    fft_hz = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    edges = mel_edges(n_mels, sample_rate)
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_hz[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]


_WINDOW = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann
_FILTERS = mel_filters()
# Each triangle covers a few adjacent bins (1 to 14; 391 in all): its mel power is the sum
# of those bins' weighted power, added in order. A matrix product would be cheaper still,
# but its rounding may follow the number of frames, and a stream's frames must not.
_BINS = [np.flatnonzero(row) for row in _FILTERS]
_BIN_INDEX = np.concatenate(_BINS)
_BIN_WEIGHT = np.concatenate([row[bins] for row, bins in zip(_FILTERS, _BINS)])
_FIRST_BIN = np.cumsum([0] + [len(bins) for bins in _BINS[:-1]])


def _log_mel_power(windows: np.ndarray) -> np.ndarray:
    """[T, 400] float64 windows -> [T, 80] float64 log10 mel power (clamped at POWER_MIN)."""
    power = np.abs(np.fft.rfft(windows * _WINDOW, axis=1)) ** 2
    mel = np.empty((len(windows), N_MELS))
    for i in range(0, len(windows), _BLOCK):
        weighted = power[i : i + _BLOCK, _BIN_INDEX] * _BIN_WEIGHT
        mel[i : i + _BLOCK] = np.add.reduceat(weighted, _FIRST_BIN, axis=1)
    return np.log10(np.maximum(mel, POWER_MIN))


def scale(log_mel: np.ndarray, floor: float | None) -> np.ndarray:
    """Whisper's scaling of log10 mel power, with a constant floor or (None) max - 8."""
    if floor is None:
        floor = float(log_mel.max()) - 8.0 if log_mel.size else 0.0
    return ((np.maximum(log_mel, floor) + 4.0) / 4.0).astype(np.float32)


def silence_value(floor: float) -> float:
    """The scaled log-mel value of digital silence under a constant ``floor`` (above -10)."""
    return float(scale(np.full((1, 1), np.log10(POWER_MIN)), floor)[0, 0])


class StreamingWhisperMel:
    """Incremental log-mel: :meth:`accept` returns the frames that new samples complete.

    ``floor=None`` returns unscaled float64 log10 mel power (for :func:`log_mel`'s
    utterance-maximum floor, which has to see every frame first).
    """

    def __init__(self, floor: float | None = -7.0) -> None:
        if floor is not None and not np.isfinite(floor):
            raise ValueError(f"the log-mel floor must be finite, got {floor}")
        self.floor = floor
        self._head = np.zeros(0)  # the first N_FFT // 2 + 1 samples (the reflect pad's source)
        self._buffer = np.zeros(0)  # samples from index self._buffer_start on
        self._buffer_start = 0
        self._samples = 0
        self._next = 0  # index of the next frame
        self._finished = False

    @property
    def num_frames(self) -> int:
        """Frames returned so far."""
        return self._next

    def accept(self, samples: np.ndarray) -> np.ndarray:
        """Add 16 kHz samples (float in [-1, 1] or int16); return [n, 80] float32 frames."""
        if self._finished:
            raise ValueError("accept() after finish()")
        x = check_samples(samples).astype(np.float64)
        if len(self._head) <= _HALF:
            self._head = np.concatenate([self._head, x[: _HALF + 1 - len(self._head)]])
        self._buffer = np.concatenate([self._buffer, x])
        self._samples += len(x)
        # frame k needs samples up to 160 k + 199, and frame 0 needs sample 200 for its reflection
        return self._frames((self._samples - _HALF) // HOP + 1 if self._samples > _HALF else 0)

    def finish(self) -> np.ndarray:
        """The last frames, the end padded with zeros (``len(samples) // 160`` frames in all).

        A stream of at most 200 samples (12.5 ms) has none: the first frame's reflected
        start needs 201, as torch.stft's does. Such a stream is a click of a microphone
        button, not speech, and ends with nothing said rather than an error.
        """
        if self._finished:
            raise ValueError("finish() called twice")
        self._finished = True
        if self._samples <= _HALF:
            return self._frames(0)
        return self._frames(self._samples // HOP, pad=True)

    def _frames(self, end: int, pad: bool = False) -> np.ndarray:
        if end <= self._next:
            return np.zeros((0, N_MELS), dtype=np.float32 if self.floor is not None else np.float64)
        first = self._next * HOP - _HALF  # sample index of the first window's first sample
        last = (end - 1) * HOP + _HALF  # one past the last window's last sample
        parts = []
        if first < 0:
            parts.append(self._head[1 : 1 - first][::-1])  # torch.stft's reflect pad
        parts.append(self._buffer[max(first, 0) - self._buffer_start :])
        signal = np.concatenate(parts)
        if pad:
            signal = np.pad(signal, (0, max(0, last - first - len(signal))))
        windows = np.lib.stride_tricks.sliding_window_view(signal[: last - first], N_FFT)[::HOP]
        frames = _log_mel_power(windows)
        self._next = end
        keep_from = max(0, end * HOP - _HALF)
        self._buffer = self._buffer[keep_from - self._buffer_start :]
        self._buffer_start = keep_from
        return frames if self.floor is None else scale(frames, self.floor)


def log_mel(samples: np.ndarray, floor: float | None = -7.0) -> np.ndarray:
    """[len(samples) // 160, 80] float32 frames of a whole utterance at 16 kHz.

    A fresh stream fed once and finished, so batch equals stream; ``floor=None``
    applies Whisper's own floor, the utterance's maximum minus 8.
    """
    stream = StreamingWhisperMel(floor)
    frames = np.concatenate([stream.accept(samples), stream.finish()])
    return scale(frames, None) if floor is None else frames
