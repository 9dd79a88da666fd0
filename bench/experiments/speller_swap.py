"""A bundle with another bundle's streaming speller over its own student, for a probe: which
of a candidate's losses are its speller's (adapters and policy) and which its student's.

    python bench/experiments/speller_swap.py --bundle exp/real/bundle --speller models/default \\
        --out exp/probe/old-speller
    python bench/experiments/speller_swap.py --bundle exp/real/bundle --out exp/probe/no-agreement \\
        --policy agreement=0 patience=0
    python bench/real_speech.py --model exp/probe/old-speller --streaming-decoder whisper \\
        --no-whisper --no-two-pass --beam 1 --lm-weight 0 --manifest DEV

OUT holds --bundle's files (hard links where the filesystem allows them) with the adapters
(if any) and policy of --speller (default: --bundle's own), their metadata stamped for
--bundle's student (the policy's also for the adapters beside it), so that serving loads
them; --policy sets the policy's serving rules (agreement, patience, threshold, confidence,
first_threshold). Not for shipping: the stamp is what tells a bundle that its speller was
learnt on its student's states, and here it says so of files learnt on another's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from asr.speller import (  # noqa: E402
    ADAPTER_FILE,
    POLICY_FILE,
    bundle_adapter,
    bundle_policy,
    learnt_on,
    student_sha1,
)
from asr.whisper_encoder import weights_metadata  # noqa: E402

RULES = ("agreement", "patience", "threshold", "confidence", "first_threshold")


def restamp(source: Path, target: Path, changes: dict[str, str]) -> None:
    """``source``'s tensors written to ``target`` with its metadata updated by ``changes``."""
    from safetensors.torch import load_file, save_file

    save_file(load_file(str(source)), str(target), metadata=weights_metadata(source) | changes)


def swap(bundle: Path, speller: Path, out: Path, rules: dict[str, str]) -> None:
    """Write OUT (see the module's docstring), then load its speller as serving does."""
    if out.exists():
        raise FileExistsError(f"--out {out} exists: name a new directory")
    if not (speller / POLICY_FILE).is_file():
        raise FileNotFoundError(f"--speller {speller} has no {POLICY_FILE}")
    work = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(work, ignore_errors=True)  # a probe stopped half way
    work.mkdir(parents=True)
    try:
        for path in sorted(bundle.iterdir()):
            if path.is_file() and path.name not in (ADAPTER_FILE, POLICY_FILE):
                try:
                    os.link(path, work / path.name)
                except OSError:  # another filesystem
                    shutil.copyfile(path, work / path.name)
        student = {"student_sha1": student_sha1(work)}
        if (speller / ADAPTER_FILE).is_file():
            restamp(speller / ADAPTER_FILE, work / ADAPTER_FILE, student)
        restamp(speller / POLICY_FILE, work / POLICY_FILE, learnt_on(work) | rules)
        bundle_adapter(work)
        bundle_policy(work)
    except BaseException:
        shutil.rmtree(work)
        raise
    work.rename(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True, help="the student's bundle")
    parser.add_argument("--speller", type=Path, help="the speller's bundle (default: --bundle)")
    parser.add_argument("--out", type=Path, required=True, help="a new directory")
    parser.add_argument("--policy", nargs="*", default=[], metavar="RULE=VALUE")
    args = parser.parse_args(argv)
    rules = dict(item.partition("=")[::2] for item in args.policy)
    unknown = sorted(set(rules) - set(RULES))
    if unknown or not all(rules.values()):
        parser.error(f"--policy takes RULE=VALUE of {', '.join(RULES)}, got {args.policy}")
    try:
        swap(args.bundle, args.speller or args.bundle, args.out, rules)
    except (FileExistsError, FileNotFoundError, ValueError) as err:
        parser.error(str(err))
    print(f"{args.out}: {args.bundle}'s student, {args.speller or args.bundle}'s speller {rules}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
