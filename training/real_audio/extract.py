"""Write a source's clips as 16 kHz mono 16-bit WAV with one manifest, resumably.

Each clip's WAV is written atomically, so one that exists is finished and a rerun skips it
without decoding; a source whose manifest is written is skipped whole. Resampling takes the
same soxr path as ``asr.audio``, so these files are what serving would hear. A clip that
does not decode is reported and left out, never written half.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
from tqdm import tqdm

from asr.audio import resample
from training.manifest import Entry, read_manifest, write_manifest
from training.real_audio.sources import Source

RATE = 16000
MANIFEST = "manifest.jsonl"


@dataclass
class Summary:
    source: str
    clips: int
    seconds: float
    with_text: int


def summarise(name: str, entries: list[Entry]) -> Summary:
    return Summary(
        name, len(entries), sum(e.duration for e in entries), sum(bool(e.text) for e in entries)
    )


def extract(source: Source, roots: list[Path], out: Path) -> Summary:
    """Write ``out/<source>/audio/*.wav`` and ``out/<source>/manifest.jsonl``."""
    folder = out / source.name
    manifest = folder / MANIFEST
    if manifest.is_file():
        return summarise(source.name, read_manifest(manifest, require_text=False)[0])
    audio = folder / "audio"
    audio.mkdir(parents=True, exist_ok=True)
    entries: list[Entry] = []
    failed = 0
    for clip in tqdm(source.clips(roots), desc=source.name, unit="clip"):
        wav = audio / f"{clip.id}.wav"
        try:
            frames = soundfile.info(str(wav)).frames if wav.is_file() else _write(clip.load(), wav)
        except (ValueError, RuntimeError, OSError) as err:
            tqdm.write(f"{source.name}: skipping {clip.id}: {err}")
            failed += 1
            continue
        if frames == 0:
            continue
        extra = {"source": source.name, "language": clip.language or source.language}
        if clip.speaker:
            extra["speaker"] = clip.speaker
        entries.append(
            Entry(f"{source.name}-{clip.id}", str(wav), clip.text, frames / RATE, extra=extra)
        )
    if failed:
        tqdm.write(f"{source.name}: {failed} clips did not decode")
    write_manifest(manifest, entries)
    return summarise(source.name, entries)


def _write(audio: tuple[np.ndarray, int], wav: Path) -> int:
    """Resample to 16 kHz, write atomically as 16-bit PCM; the frame count (0: nothing
    written, the clip was empty)."""
    samples, rate = audio
    if len(samples) == 0:
        return 0
    samples = np.clip(resample(samples.astype(np.float32), rate, RATE), -1.0, 1.0)
    tmp = wav.with_name(f".{wav.name}.tmp")
    soundfile.write(str(tmp), samples, RATE, subtype="PCM_16", format="WAV")
    os.replace(tmp, wav)
    return len(samples)
