"""The front end: 16 kHz audio -> the frames the LAS encoder reads; streaming equals batch.

Two kinds (``model.frontend``):

- ``fbank``: 80-dim log-mel filterbank every 10 ms (models trained from scratch);
- ``whisper``: Whisper's log-mel through the pretrained Whisper-base encoder under
  the chunk-causal mask (``model.whisper``), 512-dim states every 20 ms. A bundle
  carries its encoder's weights (``whisper_encoder.safetensors``); training reads
  them from ``model.whisper.encoder`` (a distilled student, or the teacher itself).

Either way the LAS encoder sees the frames a stream produces, so training (which
caches them per utterance) and serving read the same numbers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import torch

from asr.audio import HopLoudness
from asr.config import ModelConfig
from asr.features import StreamingFbank
from asr.whisper_encoder import (
    WEIGHTS_FILE,
    WhisperDims,
    WhisperEncoder,
    encode_streams,
    load_encoder,
    per_item,
    quantized,
)
from asr.whisper_features import N_MELS, SAMPLE_RATE, StreamingWhisperMel, log_mel

BUNDLE_ENCODER_FILE = "whisper_encoder.safetensors"
BUNDLE_TEACHER_FILE = "whisper_teacher.safetensors"  # two-pass bundles only
STATE_SECONDS = 0.02  # one Whisper encoder state


class FrontendStream(Protocol):
    def accept(self, samples: np.ndarray) -> np.ndarray: ...

    def take_restarts(self) -> list[int]: ...

    def finish(self) -> np.ndarray: ...


def frontend_dim(cfg: ModelConfig) -> int:
    """Width of the frames the LAS encoder reads."""
    return cfg.features.num_mel_bins if cfg.frontend == "fbank" else WhisperDims().d_model


def frame_seconds(cfg: ModelConfig) -> float:
    return cfg.features.frame_shift_ms / 1000 if cfg.frontend == "fbank" else STATE_SECONDS


@dataclass
class Frontend:
    """One front end of a model; each stream it makes carries its own state."""

    cfg: ModelConfig
    encoder: WhisperEncoder | None = None  # the whisper kind's encoder (shared by streams)
    encoder_file: Path | None = None
    teacher: WhisperEncoder | None = None  # full attention, for two-pass finals
    teacher_file: Path | None = None
    causal: bool = True  # False: the teacher's view, whole utterances only (teacher_view)

    @property
    def dim(self) -> int:
        return frontend_dim(self.cfg)

    @property
    def frame_seconds(self) -> float:
        return frame_seconds(self.cfg)

    @property
    def sample_rate(self) -> int:
        return self.cfg.features.sample_rate if self.cfg.frontend == "fbank" else SAMPLE_RATE

    def stream(self, restart: PauseRestart | None = None) -> FrontendStream:
        """A new stream; ``restart``: the Whisper encoder's context starts afresh after each
        pause it finds (the fbank kind has no such context and ignores it)."""
        if not self.causal:
            raise ValueError("the full-attention teacher reads whole segments; it cannot stream")
        if self.encoder is None:
            return _FbankStream(self.cfg)
        return _WhisperStream(self.cfg, self.encoder, restart)

    def compute(self, samples: np.ndarray) -> np.ndarray:
        """[T, dim] frames of a whole utterance: what a fresh stream fed once gives. An int8
        encoder streams (one pass over a whole utterance quantises it far worse than chunks
        do, and streaming is cheap in int8); a float one takes a whole pass, equal to rounding."""
        if self.encoder is None or self.cfg.whisper.int8:
            stream = self.stream()
            return np.concatenate([stream.accept(samples), stream.finish()])
        mel = torch.from_numpy(log_mel(samples, self.cfg.whisper.floor))
        mask = self.cfg.whisper.streaming() if self.causal else None
        return self.encoder.encode_whole(mel, mask).numpy()

    def teacher_view(self) -> Frontend:
        """The full-attention teacher as a front end of whole utterances: the states a
        two-pass final reads for a segment that is the whole utterance (training mixes them
        in, ``train.teacher_share``, and caches them under their own key)."""
        cfg = dataclasses.replace(
            self.cfg, whisper=dataclasses.replace(self.cfg.whisper, int8=False)
        )
        return Frontend(cfg, self.full_attention(), self.teacher_file, causal=False)

    def full_attention(self) -> WhisperEncoder:
        """The teacher two-pass finals read (loaded on first use)."""
        if self.teacher is None:
            if self.teacher_file is None or not self.teacher_file.is_file():
                raise ValueError(
                    "two-pass finals need the full-attention Whisper encoder, which this model "
                    f"lacks ({self.teacher_file or 'fbank front end'})"
                )
            self.teacher = load_encoder(self.teacher_file)
        return self.teacher

    def cache_key(self) -> dict[str, Any]:
        """What the frames depend on (training caches frames under a hash of it)."""
        if self.encoder_file is None:
            return dataclasses.asdict(self.cfg.features)
        digest = hashlib.sha1(self.encoder_file.read_bytes()).hexdigest()
        w = self.cfg.whisper
        key = {
            "floor": w.floor,
            "chunk": w.chunk,
            "left_context": w.left_context,
            "int8": "rows" if w.int8 and w.quantization == "rows" else w.int8,
            "encoder": digest,
        }
        if w.prime:  # frames cached before primes existed keep their names
            key["prime"] = w.prime
        return key if self.causal else {**key, "full_attention": True}


class _FbankStream:
    def __init__(self, cfg: ModelConfig) -> None:
        self._fbank = StreamingFbank(cfg.features)

    def accept(self, samples: np.ndarray) -> np.ndarray:
        return self._fbank.accept(samples)

    def finish(self) -> np.ndarray:
        return np.zeros((0, self._fbank.dim), dtype=np.float32)  # snip_edges: nothing owed

    def take_restarts(self) -> list[int]:
        return []  # filterbank frames carry no context to restart


class PauseRestart:
    """Finds pauses for the Whisper encoder's restarts: a chunk begins afresh when it is quiet
    and so are the ``seconds`` of audio before it. Fed the stream's 16 kHz
    audio as it comes, it decides from the audio alone, so the restarts fall on the same
    states whatever the chunking.

    A 20 ms piece is quiet when the loudest piece of the last ``FLOOR_WINDOW_S`` stands at
    least ``FLOOR_RANGE_DB`` above it (someone spoke, louder: a quietly recorded voice is
    no pause however few dBFS it has, and a stream without speech has none to end), and
    it is below ``threshold_db`` dBFS or, in a noisy room, within ``FLOOR_MARGIN_DB`` of
    the window's quietest piece.

    Why: the encoder was trained on single utterances with nothing before them, and a
    stream of several sentences read through one long context loses words (bench/long_stream.py).
    """

    FLOOR_WINDOW_S = 10.0
    FLOOR_MARGIN_DB = 6.0
    FLOOR_RANGE_DB = 20.0

    def __init__(self, seconds: float, threshold_db: float) -> None:
        if seconds <= 0:
            raise ValueError(f"a restart needs a pause longer than 0 s, got {seconds}")
        self.states = max(1, round(seconds / STATE_SECONDS))
        self.threshold_db = threshold_db
        self._loudness = HopLoudness(round(SAMPLE_RATE * STATE_SECONDS))
        self._quiet: deque[bool] = deque()  # of states self._first on
        self._first = 0
        self._window = round(self.FLOOR_WINDOW_S / STATE_SECONDS)
        self._heard = 0  # pieces whose loudness is known
        # the window's quietest and loudest candidates, (piece, dB), as monotone queues
        self._low: deque[tuple[int, float]] = deque()
        self._high: deque[tuple[int, float]] = deque()

    def add(self, audio16k: np.ndarray) -> None:
        for db in self._loudness.add(audio16k).tolist():
            self._quiet.append(self._is_quiet(db))

    def _is_quiet(self, db: float) -> bool:
        """Whether the next piece, ``db`` loud, is quiet; the window moves on by it."""
        piece, self._heard = self._heard, self._heard + 1
        while self._low and self._low[-1][1] >= db:  # never the quietest again
            self._low.pop()
        while self._high and self._high[-1][1] <= db:  # never the loudest again
            self._high.pop()
        for queue in (self._low, self._high):
            queue.append((piece, db))
            if queue[0][0] <= piece - self._window:
                queue.popleft()
        floor, peak = self._low[0][1], self._high[0][1]
        under = db < self.threshold_db or db < floor + self.FLOOR_MARGIN_DB
        return under and db <= peak - self.FLOOR_RANGE_DB

    def __call__(self, start: int, end: int) -> bool:
        """Whether a chunk of states [start, end) may begin afresh: it is quiet, and so are the
        states before it for the pause's length (asked in increasing order). The chunk's own
        quiet keeps a soft first sound (within the margin of a noisy room's floor) inside
        the new context, not cut off before it."""
        begin = start - self.states
        if begin < self._first:
            return False
        while self._first < begin:  # later questions start later still
            self._quiet.popleft()
            self._first += 1
        span = end - begin
        return len(self._quiet) >= span and all(itertools.islice(self._quiet, span))


class _WhisperStream:
    def __init__(
        self, cfg: ModelConfig, encoder: WhisperEncoder, restart: PauseRestart | None = None
    ) -> None:
        self.mel = StreamingWhisperMel(cfg.whisper.floor)
        self.encoder = encoder.stream(cfg.whisper.streaming())
        self.restart = restart
        self.encoder.restart = restart
        # log-mel frames kept for a second pass: from frame self._kept_from on
        self.keep = False
        self._kept: list[torch.Tensor] = []
        self._kept_from = 0
        self._kept_count = 0

    def remember(self, mel: torch.Tensor) -> None:
        if self.keep and len(mel):
            self._kept.append(mel)
            self._kept_count += len(mel)

    def take_restarts(self) -> list[int]:
        """The frames (states) at which the encoder started afresh since the last call."""
        restarts, self.encoder.restarts = self.encoder.restarts, []
        return restarts

    def mel_between(self, first: int, end: int) -> torch.Tensor:
        """Kept log-mel frames [first, end) (a second pass's input), and forget those before end."""
        kept = torch.cat(self._kept) if self._kept else torch.zeros(0, N_MELS)
        part = kept[max(0, first - self._kept_from) : max(0, end - self._kept_from)]
        drop = max(0, min(end, self._kept_from + len(kept)) - self._kept_from)
        self._kept = [kept[drop:]]
        self._kept_from += drop
        return part

    def accept(self, samples: np.ndarray) -> np.ndarray:
        return frames_of_many([self], [samples], [False])[0]

    def finish(self) -> np.ndarray:
        return frames_of_many([self], [np.zeros(0, np.float32)], [True])[0]


def frames_of_many(
    streams: Sequence[FrontendStream], audio: Sequence[np.ndarray], finish: Sequence[bool]
) -> list[np.ndarray]:
    """Frames of new 16 kHz audio (may be empty) for several streams of one front end, each
    ending there if ``finish`` says so. Whisper streams run their chunks through the encoder
    together (``encode_streams``); a stream alone gives the same frames bit for bit. Raises
    the first stream's failure (``frames_of_each`` gives each its own)."""
    outcomes = frames_of_each(streams, audio, finish)
    for outcome in outcomes:
        if isinstance(outcome, ValueError):
            raise outcome
    return cast(list[np.ndarray], outcomes)


def frames_of_each(
    streams: Sequence[FrontendStream], audio: Sequence[np.ndarray], finish: Sequence[bool]
) -> list[np.ndarray | ValueError]:
    """``frames_of_many``, where a stream whose features fail gets the failure as its outcome
    and the others go on: a stream's features read its own audio alone, so their failure is
    that audio's (a ValueError, as bad audio is), never a reason to fail the rest."""
    whisper = [s for s in streams if isinstance(s, _WhisperStream)]
    if whisper and len(whisper) != len(streams):
        raise ValueError("frames_of_many needs the streams of one front end")
    outcomes: list[np.ndarray | ValueError] = []
    for stream, x, last in zip(streams, audio, finish):
        try:
            outcomes.append(_features(stream, x, last))
        except Exception as err:
            message = f"cannot compute features of this audio: {err}"
            outcomes.append(err if isinstance(err, ValueError) else ValueError(message))
    if whisper:  # the log-mel frames of the streams that have them go through the encoder
        fine = [k for k, o in enumerate(outcomes) if not isinstance(o, ValueError)]
        mels = [torch.from_numpy(cast(np.ndarray, outcomes[k])) for k in fine]
        for k, mel in zip(fine, mels):
            whisper[k].remember(mel)
        states = encode_streams([whisper[k].encoder for k in fine], mels, [finish[k] for k in fine])
        for k, state in zip(fine, states):
            outcomes[k] = state.numpy()
    return outcomes


def _features(stream: FrontendStream, x: np.ndarray, last: bool) -> np.ndarray:
    """One stream's own work on its new audio: fbank frames, or Whisper's log-mel frames (for
    the encoder, which runs the chunks of all streams together)."""
    if isinstance(stream, _WhisperStream):
        if stream.restart is not None:
            stream.restart.add(x)
        parts = [stream.mel.accept(x)] if len(x) else []
        return _join([*parts, stream.mel.finish()] if last else parts)
    parts = [stream.accept(x)] if len(x) else []
    return np.concatenate([*parts, stream.finish()]) if last else _join(parts)


def _join(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros((0, N_MELS), dtype=np.float32)


def load_frontend(cfg: ModelConfig, bundle: Path | None = None) -> Frontend:
    """The front end of ``cfg``; a bundle's whisper kind reads the encoder the bundle carries."""
    if cfg.frontend == "fbank":
        return Frontend(cfg)
    if bundle is not None:
        path = bundle / BUNDLE_ENCODER_FILE
    else:
        if not cfg.whisper.encoder:
            raise ValueError(
                "model.frontend=whisper needs model.whisper.encoder (a directory, or a "
                "safetensors file such as a bundle's whisper_encoder.safetensors)"
            )
        path = Path(cfg.whisper.encoder)
        path = path if path.is_file() else path / WEIGHTS_FILE
    encoder = load_encoder(path)
    if encoder.dims.d_model != frontend_dim(cfg):
        raise ValueError(f"{path}: width {encoder.dims.d_model}, expected {frontend_dim(cfg)}")
    torch.set_flush_denormal(True)
    teacher = (
        Path(cfg.whisper.teacher) / WEIGHTS_FILE if bundle is None else bundle / BUNDLE_TEACHER_FILE
    )
    w = cfg.whisper
    streams = quantized(encoder, w.quantization == "rows") if w.int8 else per_item(encoder)
    return Frontend(cfg, streams, path, None, teacher)
