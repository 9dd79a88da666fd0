"""Speech shipped as loose Ogg or WAV files by free games, picked by where it lives.

- Warzone 2100: the ``base.wz`` zip's ``audio/`` (mission briefings, unit and commander
  replies, countdowns, taunts) and ``sequenceaudio/`` (cut-scene narration), less the
  effects in ``audio/sfx`` and the radio clicks.
- Hedgewars: ``Data/Sounds/voices/<pack>/``, one speaker per pack; the packs named after a
  language speak it. File names name the game event, not always the words (the themed
  packs say their own lines), so no text.
- MegaGlest: the units' spoken acknowledgements (``*_ack*.wav``, ``*_select*.wav``); the
  factions share some files, kept once.
- Fish Fillets NG: ``sound/**/<language>/*.ogg``. The dialogue text lives in the
  ``fillets-ng-data`` package, which is not on the allowed list, so no text.

Pairing these clips with the games' strings needs engine logic: their text stays empty.
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

from training.real_audio.clip import Clip, soundfile_bytes, soundfile_path

WARZONE_SPEECH = re.compile(r"(audio/(?!sfx/|radclick/)|sequenceaudio/).*\.ogg")
HEDGEWARS_LANGUAGES = {
    "Default_es": "es",
    "Default_pl": "pl",
    "Default_ru": "ru",
    "Default_uk": "uk",
    "Russian": "ru",
    "Russian_pl": "pl",
}
MEGAGLEST_SPEECH = re.compile(r".+_(ack|select)\d*\.wav")


def clip_id(relative: str) -> str:
    """A flat, file-name-safe id for a path inside a package."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", relative.rsplit(".", 1)[0]).strip("-")


def warzone(root: Path) -> Iterator[Clip]:
    with zipfile.ZipFile(next(root.rglob("base.wz"))) as wz:
        for name in sorted(n for n in wz.namelist() if WARZONE_SPEECH.fullmatch(n)):
            data = wz.read(name)  # read now: the clip may be decoded after the zip is closed
            yield Clip(clip_id(name), lambda data=data: soundfile_bytes(data))


def hedgewars(root: Path) -> Iterator[Clip]:
    voices = next(p for p in root.rglob("voices") if p.is_dir())
    for path in sorted(voices.glob("*/*.ogg")):
        pack = path.parent.name
        yield Clip(
            clip_id(f"{pack}/{path.name}"),
            lambda path=path: soundfile_path(str(path)),
            speaker=f"hedgewars-{pack}",
            language=HEDGEWARS_LANGUAGES.get(pack, "en"),
        )


def megaglest(root: Path) -> Iterator[Clip]:
    seen: set[str] = set()
    for path in sorted(root.rglob("*.wav")):
        if not MEGAGLEST_SPEECH.fullmatch(path.name):
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        relative = re.sub(r"^(.*/)?techs/", "", path.relative_to(root).as_posix())
        yield Clip(clip_id(relative), lambda path=path: soundfile_path(str(path)))


def fillets(root: Path, language: str) -> Iterator[Clip]:
    sound = next(p for p in root.rglob("sound") if p.is_dir())
    for path in sorted(sound.rglob(f"{language}/*.ogg")):
        relative = path.relative_to(sound).as_posix()
        yield Clip(clip_id(relative), lambda path=path: soundfile_path(str(path)))
