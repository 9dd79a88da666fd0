"""Band-limit a share of a manifest's audio, as a low sample rate recording sounds.

Most of the real English speech that packages ship was recorded at 11,025 Hz (about
5 kHz of bandwidth), while the synthetic corpus is full-band 16 kHz. A student distilled
on both could learn that a narrow band means a human voice. So a share of the synthetic
utterances is resampled down to ``--rate`` and back to 16 kHz (soxr, very high quality:
nothing above the new Nyquist frequency survives) and written beside the manifest; the
others keep their audio. The output manifest lists every utterance once, its band-limited
copy where it has one; rerunning with the same options writes only what is missing.

    python -m training.band_limit --manifest data/synth/train.jsonl \\
        --out data/synth-11k --rate 11025 --share 0.5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import soundfile
import soxr
from tqdm import tqdm

from training.dataset import entry_audio
from training.manifest import Entry, read_manifest

SAMPLE_RATE = 16000


def band_limited(samples: np.ndarray, rate: int) -> np.ndarray:
    """16 kHz samples as a recording at ``rate`` Hz would hold them, at 16 kHz again."""
    low = soxr.resample(samples, SAMPLE_RATE, rate, quality="VHQ")
    return soxr.resample(low, rate, SAMPLE_RATE, quality="VHQ")[: len(samples)]


def chosen(entry_id: str, share: float, seed: int) -> bool:
    """Whether an utterance is band-limited: a stable draw from its id, so a grown
    manifest keeps the choices it had."""
    digest = hashlib.sha1(f"{seed}:{entry_id}".encode()).digest()
    return int.from_bytes(digest[:4], "little") < share * 2**32


def write(entries: list[Entry], out: Path, rate: int, share: float, seed: int) -> list[Entry]:
    """The manifest's entries, with a band-limited WAV under ``out/audio`` for the chosen."""
    audio_dir = out / "audio"
    audio_dir.mkdir(parents=True, exist_ok=True)
    result = []
    for entry in tqdm(entries, desc=f"band-limit to {rate} Hz", unit="utt"):
        if not chosen(entry.id, share, seed):
            result.append(entry)
            continue
        path = audio_dir / f"{entry.id}.{rate}.wav"
        if not path.is_file():
            samples = band_limited(entry_audio(entry, SAMPLE_RATE), rate)
            tmp = path.with_name(f".{path.name}.tmp")
            soundfile.write(tmp, samples, SAMPLE_RATE, subtype="PCM_16", format="WAV")
            os.replace(tmp, path)
        extra = {**entry.extra, "band_limit": rate}
        result.append(Entry(entry.id, str(path), entry.text, entry.duration, extra=extra))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="directory of the new manifest")
    parser.add_argument("--rate", type=int, default=11025, help="sample rate to sound like (Hz)")
    parser.add_argument("--share", type=float, default=0.5, help="share of utterances limited")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 0 < args.rate < SAMPLE_RATE:
        parser.error(f"--rate must lie between 0 and {SAMPLE_RATE} Hz, got {args.rate}")
    if not 0 <= args.share <= 1:
        parser.error(f"--share must lie between 0 and 1, got {args.share}")
    entries, _ = read_manifest(args.manifest, require_text=False)
    result = write(entries, args.out, args.rate, args.share, args.seed)
    manifest = args.out / "manifest.jsonl"
    tmp = manifest.with_name(".manifest.jsonl.tmp")
    with open(tmp, "w") as f:
        for entry in result:
            f.write(json.dumps(entry.to_dict(args.out)) + "\n")
    os.replace(tmp, manifest)
    limited = sum("band_limit" in e.extra for e in result)
    print(f"{manifest}: {len(result)} utterances, {limited} band-limited to {args.rate} Hz")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
