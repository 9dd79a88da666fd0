"""The distillation mix: real speech from packages beside synthetic speech, as manifests.

    python -m training.recipes.distill_mix --real data/real-audio --synth data/synth/train.jsonl \\
        --out data/mix [--share flight-of-the-amazon-queen=0.5] [--other-share 0.17 --synth-repeats 3] \\
        [--taught-speakers drascula-hero]

From the extracted sources of the allowed list (``python -m training.recipes.real_audio``)
and a synthetic corpus's train manifest it writes, under OUT (audio paths absolute):

- ``real_dev.jsonl``: Drascula's clips of every speaker but ``--taught-speakers`` (its
  hero), each speaker held out whole from everything else (those with the game's own text
  are scored): the real speech that students are chosen on. A dev set of clips drawn at random
  let the rest of their speakers' clips teach the student, and overstated its real gains
  (research record, 2026-11-30). ``bench/real_speech.py``'s recordings are measurement only
  and never used.
- ``real_en.jsonl``: the other English clips (all of each source, or its ``--share``, by id);
  ``real_other.jsonl``: ``--other-share`` of the clips in other languages (they teach the
  encoder voices, not words).
- ``long/real_en_long.jsonl``: a fifth of the English clips joined into 12-28 s clips,
  speakers mixed, as a game's dialogue runs on (``training.join_utterances``).
- ``synth-11k/manifest.jsonl``: the synthetic utterances, half of them band-limited as an
  11 kHz recording sounds (``training.band_limit``), and ``long/synth_long.jsonl``: the
  same joined into long clips of one voice.
- ``valid.jsonl``: ``real_dev`` and the synthetic corpus's dev split, the held-out set of
  ``asr distill``.
- ``train_manifests.txt``: the ``distill.train_manifests`` list, the synthetic manifests
  given ``--synth-repeats`` times so that synthetic speech keeps its share of the steps
  (distilled on real speech alone, the student forgets what the synthetic mix taught it).

A rerun rewrites the manifests and only the audio that is missing.
"""

from __future__ import annotations

import argparse
import json
import zlib
from pathlib import Path

from training import band_limit, join_utterances

DEV_SOURCE = "drascula"
TAUGHT_SPEAKERS = ("drascula-hero",)  # about half of Drascula's hours, kept in training
LONG_SHARE = 0.2


def stable_share(clip_id: str, share: float) -> bool:
    """Whether a clip falls in a share, drawn from its id alone (reruns agree)."""
    return zlib.crc32(clip_id.encode()) % 1000 < share * 1000


def read_rows(manifest: Path) -> list[dict]:
    """A manifest's rows with absolute audio paths (the mix's manifests lie elsewhere)."""
    rows = []
    base = manifest.parent.absolute()  # a relative --synth-dev gave paths that led nowhere
    for line in manifest.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            row["audio"] = str(base / row["audio"])  # an absolute audio path stays as it is
            rows.append(row)
    return rows


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    hours = sum(row["duration"] for row in rows) / 3600
    print(f"{path}: {len(rows)} clips, {hours:.2f} h")
    return path


def english(row: dict) -> bool:
    return str(row.get("language", "en")).lower().startswith("en")


def build(args: argparse.Namespace) -> list[Path]:
    """Write the mix's manifests; the distill.train_manifests list."""
    sources = sorted(p.parent for p in args.real.glob("*/manifest.jsonl"))
    if not sources:
        raise FileNotFoundError(f"--real {args.real}: no source manifests (*/manifest.jsonl)")
    dev, spoken, other = [], [], []
    speakers: set[str] = set()  # the dev source's
    for source in sources:
        for row in read_rows(source / "manifest.jsonl"):
            held = source.name == DEV_SOURCE
            if held:
                speakers.add(str(row.get("speaker")))
            if held and row.get("speaker") not in args.taught_speakers:
                dev.append(row)
            elif english(row):
                if stable_share(row["id"], args.share.get(source.name, 1.0)):
                    spoken.append(row)
            elif stable_share(row["id"], args.other_share):
                other.append(row)
    unknown = sorted(set(args.taught_speakers) - speakers)
    if speakers and (unknown or speakers <= set(args.taught_speakers)):
        problem = f"{DEV_SOURCE} has no speaker {', '.join(unknown)}"
        if not unknown:
            problem = f"that leaves no {DEV_SOURCE} speaker for the real dev set"
        raise ValueError(
            f"--taught-speakers {' '.join(args.taught_speakers)}: {problem} "
            f"(its speakers: {', '.join(sorted(speakers))})"
        )
    out = args.out
    write_rows(out / "real_dev.jsonl", dev)
    real_en = write_rows(out / "real_en.jsonl", spoken)
    real_other = write_rows(out / "real_other.jsonl", other)
    for_long = [row for row in spoken if stable_share(row["id"] + "/long", LONG_SHARE)]
    joined = write_rows(out / "long" / "real_en_for_long.jsonl", for_long)
    real_long = out / "long" / "real_en_long.jsonl"
    join_utterances.main(["--manifest", str(joined), "--out", str(real_long), "--any-voice"])
    synth = out / "synth-11k"
    band_limit.main(["--manifest", str(args.synth), "--out", str(synth), "--share", "0.5"])
    synth_long = out / "long" / "synth_long.jsonl"
    join_utterances.main(["--manifest", str(synth / "manifest.jsonl"), "--out", str(synth_long)])
    valid = dev + (read_rows(args.synth_dev) if args.synth_dev else [])
    write_rows(out / "valid.jsonl", valid)
    synthetic = [synth / "manifest.jsonl", synth_long] * args.synth_repeats
    return [real_en, real_long, real_other, *synthetic]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", type=Path, required=True, help="real_audio's output directory")
    parser.add_argument("--synth", type=Path, required=True, help="a synthetic train manifest")
    parser.add_argument("--synth-dev", type=Path, help="its dev manifest (joins valid.jsonl)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--share",
        nargs="+",
        default=[],
        metavar="SOURCE=SHARE",
        help="take only this share of an English source's clips",
    )
    parser.add_argument("--other-share", type=float, default=0.17)
    parser.add_argument(
        "--taught-speakers",
        nargs="*",
        default=list(TAUGHT_SPEAKERS),
        metavar="SPEAKER",
        help=f"{DEV_SOURCE}'s speakers that stay in training; its others are the real dev set",
    )
    parser.add_argument("--synth-repeats", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        args.share = {k: float(v) for k, v in (item.split("=", 1) for item in args.share)}
    except ValueError:
        parser.error(f"--share takes SOURCE=SHARE, got {' '.join(args.share)}")
    if not all(0 <= x <= 1 for x in [*args.share.values(), args.other_share]):
        parser.error("--share and --other-share must lie between 0 and 1")
    if args.synth_repeats < 1:
        parser.error("--synth-repeats must be at least 1")
    try:
        manifests = build(args)
    except (FileNotFoundError, ValueError) as err:
        parser.error(str(err))
    listing = args.out / "train_manifests.txt"
    listing.write_text("[" + ",".join(str(m) for m in manifests) + "]\n")
    print(f"{listing}: distill.train_manifests=$(cat {listing})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
