"""How far each acoustic change moves the teacher itself: its relative squared distance from
its own states of the clean audio, per kind of ``training/augment.py`` and with all of
them at once, over cached utterances (``asr distill``'s teacher cache).

A student learning the clean states from changed audio has to undo the change; the teacher,
which heard 680,000 hours, shows how much of each change its states keep. Compare with the
student's own distance from the teacher (about 0.19 for the bundle's).

    python bench/experiments/augment_strength.py --cache /work/data/teacher --limit 12
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from asr.whisper_encoder import load_encoder  # noqa: E402
from training.augment import augment_one  # noqa: E402

KINDS = (["warp"], ["colour"], ["reverb"], ["noise"], ["warp", "colour", "reverb", "noise"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, required=True, help="asr distill's cache_dir")
    parser.add_argument(
        "--teacher", default=str(ROOT / "models/default/whisper_teacher.safetensors")
    )
    parser.add_argument("--limit", type=int, default=12, help="cached utterances read")
    parser.add_argument("--floor", type=float, default=-7.0, help="model.whisper.floor")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    teacher = load_encoder(args.teacher).eval()
    items = []
    for path in sorted(args.cache.glob("*.npz")):
        with np.load(path) as data:
            if "mel" in data.files:
                items.append((data["mel"], torch.from_numpy(data["teacher"].astype(np.float32))))
        if len(items) == args.limit:
            break
    if not items:
        parser.error(f"no cached teacher states in {args.cache}")
    rng = np.random.default_rng(args.seed)
    print(f"{len(items)} utterances of {args.cache}; the teacher's distance from its clean states")
    print("| change | relative squared distance (mean) |\n|---|---|")
    with torch.no_grad():
        for kinds in KINDS:
            distances = []
            for mel, clean in items:
                changed = torch.from_numpy(augment_one(mel, kinds, args.floor, rng))[None]
                states = teacher(changed, torch.tensor([len(mel)]))[0][0, : len(clean)]
                distances.append(float(((states - clean) ** 2).sum() / (clean**2).sum()))
            print(f"| {' + '.join(kinds)} | {statistics.mean(distances):.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
