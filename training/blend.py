"""Blend two streaming students in weight space: (1 - w) * start + w * tuned.

Distilling the bundle's student further on real speech moves it towards real voices and
away from the synthetic ones it knew (Whisper's decoder reads the tuned student 19 points
better on real dev clips and 2.3 points worse on synthetic ones). Averaging the weights of
a fine-tuned network with those it started from keeps much of both (WiSE-FT: Wortsman et
al., "Robust fine-tuning of zero-shot models", CVPR 2022): the research record's entry
"The student blended with its start" measures w = 0.3, 0.5 and 0.7 on the dev sets, and at
0.5 the blend reads real dev within 3.2 points of the tuned student, synthetic dev within
0.3 of the start, and short utterances better than either. Both students must be one
network served alike (same dimensions, chunk, left context and delay; a prime may differ:
see ``served_as``); the blend keeps the tuned student's metadata, with its held-out figures
(no longer its own) replaced by the blend's sources and weight.

Example:
  asr blend-students --start models/default/whisper_encoder.safetensors \\
      --tuned exp/real/student/student --weight 0.5 --out exp/real/blend
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from asr.speller import file_sha1
from asr.whisper_encoder import WhisperDims, load_encoder, weights_file, weights_metadata
from training.distill import save_encoder

# the streaming mask's fields: blending two students whose masks differ would give weights
# that match neither's
MASK = ("chunk", "left_context")


def served_as(meta: dict[str, str]) -> dict[str, object]:
    """What of a student's metadata its weights are bound to: its shape, its delay and its
    streaming mask. A prime (and its silence) is left out: it only says what a stream is
    encoded from before its audio, which the serving bundle's config sets, and the primed
    student of ``PRIME=N bash training/recipes/real_student.sh`` is blended with the
    bundle's, which learnt without one (students written before primes existed record
    none)."""
    streaming = json.loads(meta.get("streaming", "{}"))
    shape = {k: meta.get(k) for k in (*WhisperDims.__dataclass_fields__, "delay")}
    return shape | {k: streaming.get(k) for k in MASK}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--start", type=Path, required=True, help="the student the tuned one started from"
    )
    parser.add_argument("--tuned", type=Path, required=True, help="asr distill's student")
    parser.add_argument("--weight", type=float, required=True, help="the tuned student's share")
    parser.add_argument("--out", type=Path, required=True, help="directory of the blend")


def blend(start: Path, tuned: Path, weight: float, out: Path) -> Path:
    """Write the blend to ``out``/encoder.safetensors (float16, as ``asr distill`` writes
    students) and return its path."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"--weight {weight}: a share between 0 and 1")
    start_file, tuned_file = weights_file(start), weights_file(tuned)
    if not start_file.is_file() or not tuned_file.is_file():
        missing = start_file if not start_file.is_file() else tuned_file
        raise FileNotFoundError(f"{missing} is missing (`asr distill` writes students)")
    if weights_file(out).resolve() in (start_file.resolve(), tuned_file.resolve()):
        raise ValueError(f"--out {out}: that would overwrite a student being blended")
    start_meta, tuned_meta = weights_metadata(start_file), weights_metadata(tuned_file)
    start_as, tuned_as = served_as(start_meta), served_as(tuned_meta)
    differ = [k for k in start_as if start_as[k] != tuned_as[k]]
    if differ:
        raise ValueError(
            f"{start_file} and {tuned_file} are not served alike ({', '.join(differ)}: "
            f"{[start_as[k] for k in differ]} against {[tuned_as[k] for k in differ]})"
        )
    first, second = load_encoder(start_file), load_encoder(tuned_file)
    mixed = second.state_dict()  # its tensors are the network's: mixed in place
    with torch.no_grad():
        for name, value in first.state_dict().items():
            mixed[name].mul_(weight).add_(value, alpha=1.0 - weight)
    kept = {k: v for k, v in tuned_meta.items() if not k.startswith("heldout_")}
    source = {"start": str(start_file), "start_sha1": file_sha1(start_file)}
    source |= {"tuned": str(tuned_file), "tuned_sha1": file_sha1(tuned_file), "weight": weight}
    return save_encoder(second, out, {**kept, "blend": json.dumps(source)})


def run(args: argparse.Namespace) -> int:
    path = blend(args.start, args.tuned, args.weight, args.out)
    sources = f"{weights_file(args.start)} and {weights_file(args.tuned)}"
    print(f"blend of {sources} at {args.weight}: {path}")
    return 0
