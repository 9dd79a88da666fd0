"""Training data: cached features, length-bucketed batches and SpecAugment.

Features are computed once per utterance by the model's front end
(:class:`asr.frontend.Frontend`, the one serving uses: fbank, or the streaming
Whisper encoder's states) and cached as ``.npy`` files named by a hash of the
audio span and the front end's settings (and encoder weights), so a changed
manifest or front end never reads stale features. Batches hold at most a fixed amount of padded
audio; their composition and order depend only on the seed and the epoch, so
a resumed run sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset
from tqdm import tqdm

from asr.audio import load_audio
from asr.config import SpecAugmentConfig
from asr.features import CMVN
from asr.frontend import Frontend
from asr.tokenizer import Tokenizer
from training.manifest import Entry


@dataclass
class Utterance:
    """One training example: cached features and target ids."""

    id: str
    features: Path
    frames: int
    text: str
    tokens: list[int]
    teacher_features: Path | None = None  # the full-attention teacher's states (teacher_share)


@dataclass
class Batch:
    """Padded features and targets of several utterances."""

    ids: list[str]
    feats: Tensor  # [B, T, F] raw fbank (the model applies CMVN)
    feat_lens: Tensor  # [B]
    targets: Tensor  # [B, U], 0-padded, without EOS
    target_lens: Tensor  # [B]
    texts: list[str]


def entry_audio(entry: Entry, rate: int, cache: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """The samples of a manifest entry at ``rate``, cut to its offset/end span.

    ``cache`` keeps the last recording, so consecutive segments of one long
    file decode it once.
    """
    if cache is not None and entry.audio in cache:
        samples = cache[entry.audio]
    else:
        samples = load_audio(entry.audio, rate)
        if cache is not None:
            cache.clear()
            cache[entry.audio] = samples
    if entry.offset is None and entry.end is None:
        return samples
    start = int(round((entry.offset or 0.0) * rate))
    stop = len(samples) if entry.end is None else int(round(entry.end * rate))
    return samples[start:stop]


def _cache_name(entry: Entry, frontend_key: dict) -> str:
    key = json.dumps([entry.audio, entry.offset, entry.end, frontend_key])
    return hashlib.sha1(key.encode()).hexdigest()[:24] + ".npy"


def _save_atomic(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


def cache_features(
    entries: Sequence[Entry],
    frontend: Frontend,
    cache_dir: Path,
    rank: int = 0,
    world: int = 1,
    desc: str = "features",
) -> dict[str, tuple[Path, int]]:
    """Compute (or find) the features of this rank's share of ``entries``: id -> (file, frames).

    Entries whose audio cannot be decoded are reported and left out.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = frontend.cache_key()
    found: dict[str, tuple[Path, int]] = {}
    audio_cache: dict[str, np.ndarray] = {}
    share = [e for i, e in enumerate(entries) if i % world == rank]
    computed = 0
    for entry in tqdm(share, desc=desc, unit="utt", disable=rank != 0, leave=False):
        path = cache_dir / _cache_name(entry, key)
        if path.is_file():
            frames = np.load(path, mmap_mode="r").shape[0]
        else:
            try:
                feats = frontend.compute(entry_audio(entry, frontend.sample_rate, audio_cache))
            except ValueError as err:
                tqdm.write(f"skipping {entry.id}: {err}")
                continue
            _save_atomic(path, feats)
            frames = feats.shape[0]
            computed += 1
        found[entry.id] = (path, frames)
    if rank == 0 and share:
        print(f"{desc}: {len(found)} utterances ({computed} computed, rest cached) in {cache_dir}")
    return found


def build_utterances(
    entries: Sequence[Entry],
    features: dict[str, tuple[Path, int]],
    tokenizer: Tokenizer,
    min_frames: int,
    log: Callable[[str], None] = print,
    teacher: dict[str, tuple[Path, int]] | None = None,
) -> list[Utterance]:
    """Utterances with features and non-empty targets; too-short ones are reported and skipped.
    With ``teacher`` (the teacher's states, as many frames), only utterances that have both."""
    utterances = []
    short = 0
    for entry in entries:
        if entry.id not in features or (teacher is not None and entry.id not in teacher):
            continue
        path, frames = features[entry.id]
        if frames < min_frames:
            short += 1
            continue
        tokens = tokenizer.encode(entry.text)
        if tokens:
            teacher_path = None if teacher is None else teacher[entry.id][0]
            utterances.append(Utterance(entry.id, path, frames, entry.text, tokens, teacher_path))
    if short:
        log(f"skipped {short} utterances shorter than one encoder state ({min_frames} frames)")
    return utterances


def compute_cmvn(utterances: Sequence[Utterance], desc: str = "cmvn") -> CMVN:
    """Global mean and standard deviation over all training frames."""
    cmvn = CMVN()
    for utt in tqdm(utterances, desc=desc, unit="utt", leave=False):
        cmvn.accumulate(np.load(utt.features))
    cmvn.finalize()
    return cmvn


def make_batches(
    frames: Sequence[int], max_frames: int, seed: int, epoch: int, shuffle: bool = True
) -> list[list[int]]:
    """Length-bucketed batches of indices with at most ``max_frames`` padded frames each.

    Lengths are jittered by up to 10% before sorting, so batch composition
    varies between epochs; the batch order is shuffled. Everything depends
    only on (seed, epoch). An utterance longer than ``max_frames`` is a batch
    of its own.
    """
    lengths = np.asarray(frames, dtype=np.float64)
    if shuffle:
        rng = np.random.default_rng([seed, epoch])
        order = np.argsort(lengths * (1 + 0.1 * rng.random(len(lengths))), kind="stable")
    else:
        order = np.argsort(lengths, kind="stable")
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order.tolist():
        longest_with = max(longest, int(frames[index]))
        if current and longest_with * (len(current) + 1) > max_frames:
            batches.append(current)
            current, longest_with = [], int(frames[index])
        current.append(index)
        longest = longest_with
    if current:
        batches.append(current)
    if shuffle:
        rng.shuffle(batches)  # type: ignore[arg-type]
    return batches


class UtteranceDataset(Dataset):
    """Loads one utterance's cached features; a batch sampler groups them. Index
    ``len + i`` is utterance i read through the teacher (:func:`teacher_batches`)."""

    def __init__(self, utterances: Sequence[Utterance]) -> None:
        self.utterances = list(utterances)

    def __len__(self) -> int:
        return 2 * len(self.utterances)

    def __getitem__(self, index: int) -> tuple[Utterance, np.ndarray]:
        utt = utterance_at(self.utterances, index)
        if index < len(self.utterances):
            return utt, np.load(utt.features)
        if utt.teacher_features is None:
            raise ValueError(f"{utt.id}: no teacher states cached (train.teacher_share)")
        return utt, np.load(utt.teacher_features)


def utterance_at(utterances: Sequence[Utterance], index: int) -> Utterance:
    """The utterance a batch index stands for (``len + i``: utterance i, read through the
    teacher)."""
    return utterances[index % len(utterances)]


def teacher_batches(
    batches: list[list[int]], count: int, share: float, seed: int, epoch: int
) -> list[list[int]]:
    """``share`` of the batches (drawn from (seed, epoch)) read the teacher's states: their
    indices move to ``count + i`` (:class:`UtteranceDataset`)."""
    if share <= 0:
        return batches
    chosen = np.random.default_rng([seed, epoch, 1]).random(len(batches)) < share
    return [[count + i for i in b] if t else b for b, t in zip(batches, chosen.tolist())]


def collate(items: Sequence[tuple[Utterance, np.ndarray]]) -> Batch:
    """Pad features with zeros and targets with blank (0)."""
    utts = [u for u, _ in items]
    feats = [torch.from_numpy(np.asarray(f, dtype=np.float32)) for _, f in items]
    feat_lens = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
    padded = torch.zeros(len(feats), int(feat_lens.max()), feats[0].shape[1])
    for i, f in enumerate(feats):
        padded[i, : f.shape[0]] = f
    target_lens = torch.tensor([len(u.tokens) for u in utts], dtype=torch.long)
    targets = torch.zeros(len(utts), int(target_lens.max()), dtype=torch.long)
    for i, u in enumerate(utts):
        targets[i, : len(u.tokens)] = torch.tensor(u.tokens)
    return Batch(
        [u.id for u in utts], padded, feat_lens, targets, target_lens, [u.text for u in utts]
    )


class SpecAugment:
    """Frequency and time masks (Park et al., 2019) on normalised features; draws from torch's RNG."""

    def __init__(self, cfg: SpecAugmentConfig) -> None:
        if min(cfg.freq_masks, cfg.freq_width, cfg.time_masks, cfg.time_width) < 0:
            raise ValueError("train.spec mask counts and widths must be >= 0")
        if not 0 <= cfg.time_ratio <= 1:
            raise ValueError(f"train.spec.time_ratio must be in [0, 1], got {cfg.time_ratio}")
        self.cfg = cfg

    def __call__(self, x: Tensor, lens: Tensor) -> Tensor:
        batch, steps, dims = x.shape
        masked = torch.zeros(batch, steps, dims, dtype=torch.bool)
        freq = torch.arange(dims)
        for _ in range(self.cfg.freq_masks):
            width = torch.randint(0, min(self.cfg.freq_width, dims) + 1, (batch,))
            start = (torch.rand(batch) * (dims - width + 1)).long()
            band = (freq >= start[:, None]) & (freq < (start + width)[:, None])
            masked |= band[:, None, :]
        time = torch.arange(steps)
        limit = torch.minimum(
            torch.full((batch,), self.cfg.time_width),
            (lens.float() * self.cfg.time_ratio).long(),
        )
        for _ in range(self.cfg.time_masks):
            width = (torch.rand(batch) * (limit + 1)).long()
            start = (torch.rand(batch) * (lens - width + 1)).long()
            span = (time >= start[:, None]) & (time < (start + width)[:, None])
            masked |= span[:, :, None]
        return x.masked_fill(masked, 0.0)
