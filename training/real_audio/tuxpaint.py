"""Tux Paint's stamp descriptions read aloud: ``<stamp>_desc[_xx].ogg`` beside ``<stamp>.txt``.

The text file's first line is the English description and ``xx.utf8=...`` lines the
translations; a recording without a language suffix is English. About one volunteer reads
each language. Translations may have changed since the recording, so the text is the
package's description, not a checked transcript.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from training.real_audio.clip import Clip, soundfile_path
from training.real_audio.games import clip_id

DESCRIPTION = re.compile(r"(.+)_desc(?:_([a-z]{2,3}))?\.ogg")


def descriptions(listing: str) -> dict[str, str]:
    """Language -> description, from a stamp's ``.txt``."""
    lines = [line.strip() for line in listing.splitlines() if line.strip()]
    found = {"en": lines[0]} if lines and "=" not in lines[0] else {}
    for line in lines:
        key, sep, text = line.partition("=")
        if sep and key.endswith(".utf8"):
            found.setdefault(key[: -len(".utf8")], text.strip())
    return found


def clips(root: Path) -> Iterator[Clip]:
    stamps = next(p for p in root.rglob("stamps") if p.is_dir())
    for path in sorted(stamps.rglob("*_desc*.ogg")):
        match = DESCRIPTION.fullmatch(path.name)
        if not match:
            continue
        language = match[2] or "en"
        listing = path.with_name(match[1] + ".txt")
        texts = descriptions(listing.read_text("utf-8")) if listing.is_file() else {}
        yield Clip(
            clip_id(path.relative_to(stamps).as_posix()),
            lambda path=path: soundfile_path(str(path)),
            text=" ".join(texts.get(language, "").split()),
            speaker=f"tuxpaint-{language}",
            language=language,
        )
