"""Log-mel filterbank features and global CMVN.

Batch and streaming features come from the same kaldi-native-fbank online
extractor, so a stream fed in any chunking yields exactly the frames that the
whole utterance yields. ``snip_edges`` is on: a frame exists as soon as its
samples do, and no frame depends on audio after it, so nothing needs flushing.

Samples go in on the [-1, 1] scale rather than Kaldi's int16 scale; that only
shifts every log-mel value by the constant ln(32768^2), which CMVN removes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import kaldi_native_fbank as knf
import numpy as np
import torch

from asr.audio import check_sample_rate, check_samples
from asr.config import FeatureConfig

ArrayOrTensor = TypeVar("ArrayOrTensor", np.ndarray, torch.Tensor)

_VARIANCE_FLOOR = 1e-10  # keeps a constant dimension from dividing by zero


def _fbank_options(cfg: FeatureConfig) -> knf.FbankOptions:
    check_sample_rate(cfg.sample_rate)  # FeatureConfig checks each value's own bounds
    if cfg.frame_shift_ms > cfg.frame_length_ms:
        raise ValueError(
            f"need frame_shift_ms <= frame_length_ms, got {cfg.frame_shift_ms} and "
            f"{cfg.frame_length_ms}"
        )
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = float(cfg.sample_rate)
    opts.frame_opts.frame_length_ms = cfg.frame_length_ms
    opts.frame_opts.frame_shift_ms = cfg.frame_shift_ms
    opts.frame_opts.dither = cfg.dither
    opts.frame_opts.snip_edges = True
    opts.mel_opts.num_bins = cfg.num_mel_bins
    return opts


class StreamingFbank:
    """Incremental fbank: each :meth:`accept` returns only the frames completed by new samples.

    Frames are popped from the extractor once returned, so an hour-long stream
    holds at most one frame of audio and no old features.
    """

    def __init__(self, cfg: FeatureConfig) -> None:
        self.cfg = cfg
        self._extractor = knf.OnlineFbank(_fbank_options(cfg))
        self._next = 0  # global index of the first frame not yet returned

    @property
    def dim(self) -> int:
        return self.cfg.num_mel_bins

    @property
    def num_frames(self) -> int:
        """Frames returned so far (the index the next frame will have)."""
        return self._next

    def accept(self, samples: np.ndarray) -> np.ndarray:
        """Add samples at ``cfg.sample_rate`` (float in [-1, 1] or int16); return [n, dim] float32."""
        self._extractor.accept_waveform(float(self.cfg.sample_rate), check_samples(samples))
        ready = self._extractor.num_frames_ready
        if ready == self._next:
            return np.zeros((0, self.dim), dtype=np.float32)
        frames = np.stack([self._extractor.get_frame(i) for i in range(self._next, ready)])
        self._extractor.pop(ready - self._next)
        self._next = ready
        return frames


class Fbank:
    """Whole-utterance fbank: a fresh :class:`StreamingFbank` fed once, so batch equals stream."""

    def __init__(self, cfg: FeatureConfig) -> None:
        _fbank_options(cfg)
        self.cfg = cfg

    @property
    def dim(self) -> int:
        return self.cfg.num_mel_bins

    def compute(self, samples: np.ndarray) -> np.ndarray:
        """[T, dim] float32 features of ``samples`` at ``cfg.sample_rate``."""
        return StreamingFbank(self.cfg).accept(samples)


class CMVN:
    """Global per-dimension mean and standard deviation, accumulated over training features.

    The statistics are saved with the model so that serving normalises exactly
    as training did. The state is the float64 sums, so a loaded CMVN can keep
    accumulating.
    """

    def __init__(self) -> None:
        self._sum: np.ndarray | None = None
        self._sum_sq: np.ndarray | None = None
        self.count = 0
        self._mean: np.ndarray | None = None
        self._std: np.ndarray | None = None

    @property
    def dim(self) -> int | None:
        """Feature dimension, known after the first accumulate or a load."""
        return None if self._sum is None else int(self._sum.shape[0])

    @property
    def mean(self) -> np.ndarray:
        return self._finalized()[0].copy()

    @property
    def std(self) -> np.ndarray:
        return self._finalized()[1].copy()

    def accumulate(self, feats: np.ndarray | torch.Tensor) -> None:
        """Add [..., dim] frames to the running float64 sums."""
        if isinstance(feats, torch.Tensor):
            feats = feats.detach().cpu().numpy()
        if not isinstance(feats, np.ndarray) or feats.ndim < 2:
            raise ValueError("CMVN.accumulate needs a [..., dim] array of frames")
        frames = feats.reshape(-1, feats.shape[-1]).astype(np.float64)
        if not np.isfinite(frames).all():
            raise ValueError("CMVN.accumulate got NaN or infinite features")
        if self._sum is None:
            self._sum = np.zeros(frames.shape[1])
            self._sum_sq = np.zeros(frames.shape[1])
        self._check_dim(frames.shape[1])
        self._sum += frames.sum(axis=0)
        self._sum_sq += np.square(frames).sum(axis=0)
        self.count += frames.shape[0]

    def finalize(self) -> None:
        """Turn the sums into mean and std; call again after more accumulation."""
        if self._sum is None or self._sum_sq is None or self.count == 0:
            raise ValueError("CMVN.finalize called before any frames were accumulated")
        mean = self._sum / self.count
        variance = np.maximum(self._sum_sq / self.count - np.square(mean), _VARIANCE_FLOOR)
        self._mean, self._std = mean, np.sqrt(variance)

    def apply(self, feats: ArrayOrTensor) -> ArrayOrTensor:
        """Normalise [..., dim] features; numpy gives float32, tensors keep device and dtype."""
        mean, std = self._finalized()
        if not isinstance(feats, (np.ndarray, torch.Tensor)) or feats.ndim < 1:
            raise ValueError(
                "CMVN.apply needs a numpy array or torch tensor of [..., dim] features"
            )
        self._check_dim(feats.shape[-1])
        if isinstance(feats, torch.Tensor):
            where = {"dtype": feats.dtype, "device": feats.device}
            return (feats - torch.as_tensor(mean, **where)) / torch.as_tensor(std, **where)
        return ((feats - mean) / std).astype(np.float32)

    def save(self, path: str | Path) -> None:
        mean, std = self._finalized()
        data = {"dim": self.dim, "count": self.count, "mean": mean.tolist(), "std": std.tolist()}
        Path(path).write_text(json.dumps(data) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> CMVN:
        """Read statistics written by :meth:`save`; the result is finalized."""
        try:
            data: Any = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: cannot read CMVN statistics: {err}") from None
        if not isinstance(data, dict) or not {"dim", "count", "mean", "std"} <= data.keys():
            raise ValueError(f"{path}: CMVN file needs the keys dim, count, mean and std")
        dim, count = data["dim"], data["count"]
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"{path}: CMVN count must be a positive integer, got {count!r}")
        try:
            mean = np.asarray(data["mean"], dtype=np.float64)
            std = np.asarray(data["std"], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{path}: CMVN mean and std must be lists of numbers") from None
        if mean.shape != (dim,) or std.shape != (dim,):
            raise ValueError(f"{path}: CMVN mean and std must both have dim={dim} entries")
        if not (np.isfinite(mean).all() and np.isfinite(std).all() and (std > 0).all()):
            raise ValueError(f"{path}: CMVN mean must be finite, std finite and positive")
        cmvn = cls()
        cmvn.count = count
        cmvn._sum = mean * count
        cmvn._sum_sq = (np.square(std) + np.square(mean)) * count
        cmvn._mean, cmvn._std = mean, std
        return cmvn

    def _finalized(self) -> tuple[np.ndarray, np.ndarray]:
        if self._mean is None or self._std is None:
            raise ValueError("CMVN statistics are not finalized (call finalize() or load())")
        return self._mean, self._std

    def _check_dim(self, dim: int) -> None:
        if dim != self.dim:
            raise ValueError(
                f"feature dimension {dim} does not match the CMVN dimension {self.dim}"
            )
