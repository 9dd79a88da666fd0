"""Fill a training config's frame cache ahead of training, one shard per process.

The Whisper front end's states cost most of a run's preparation (about 0.05 of real
time per core in int8), and two runs over the same front end (the monotonic model and
its softmax baseline) need the same frames. Run one shard per core into the shared
``train.feature_cache``; both trainings then find every frame cached. A rerun skips
what is cached, so an interrupted fill resumes. With ``train.teacher_share`` the full-
attention teacher's states of the training manifest are cached too.

  python -m training.cache_frames --config training/configs/whisper.yaml \\
      model.whisper.encoder=exp/live/student/student train.feature_cache=exp/live/frames \\
      --manifest data/live/train.jsonl data/live/dev.jsonl --shard 1/2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from asr.config import Config
from asr.frontend import load_frontend
from training.dataset import cache_features
from training.manifest import read_manifest


def parse_shard(text: str) -> tuple[int, int]:
    """'k/n' (1-based) -> (rank k - 1, world n)."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: expected K/N, e.g. 1/2") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: K must be within 1..N")
    return k - 1, n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="the training config")
    parser.add_argument("overrides", nargs="*", help="section.key=value settings, as for training")
    parser.add_argument("--manifest", type=Path, nargs="+", required=True)
    parser.add_argument("--shard", type=parse_shard, default=(0, 1), help="K/N (default 1/1)")
    args = parser.parse_args(argv)
    config = Config.load(args.config, args.overrides)
    if not config.train.feature_cache:
        parser.error("train.feature_cache is not set: the frames need a directory runs share")
    for manifest in args.manifest:
        if not manifest.is_file():
            parser.error(f"--manifest {manifest} does not exist")
    torch.set_num_threads(1)  # one shard per core
    frontend = load_frontend(config.model)
    rank, world = args.shard
    jobs = [(manifest, frontend, "") for manifest in args.manifest]
    if config.train.teacher_share > 0:  # and the teacher's states of the training manifest
        train = Path(config.train.train_manifest).resolve()
        named = [m for m in args.manifest if m.resolve() == train]
        if named:  # the teacher is loaded only when it has work
            teacher = frontend.teacher_view()
            jobs += [(m, teacher, " teacher") for m in named]
    for manifest, source, name in jobs:
        entries, _ = read_manifest(manifest, log=sys.stderr)
        desc = f"{manifest}{name} {rank + 1}/{world}"
        # this shard's share, as a training rank takes it, with its own progress bar
        cache_features(entries[rank::world], source, Path(config.train.feature_cache), desc=desc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
