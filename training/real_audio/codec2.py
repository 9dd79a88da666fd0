"""Codec 2's example speech: the WAV files of ``usr/share/codec2/wav`` (8 kHz, several
speakers, some received over HF radio), less ``all.wav``, which is a compilation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from training.real_audio.clip import Clip, soundfile_path

COMPILATION = "all.wav"


def clips(root: Path) -> Iterator[Clip]:
    folder = next(p for p in root.rglob("wav") if p.is_dir() and p.parent.name == "codec2")
    for path in sorted(folder.glob("*.wav")):
        if path.name != COMPILATION:
            yield Clip(path.stem, lambda path=path: soundfile_path(str(path)))
