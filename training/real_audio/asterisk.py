"""Asterisk's telephone prompts: one speaker per sounds folder, 8 or 16 kHz.

The core sounds (``asterisk-core-sounds-xx-g722``) are headerless G.722; the matching text
package ``asterisk-core-sounds-xx`` lists every prompt as ``path: text`` in
``core-sounds-xx.txt.gz``, where descriptions of non-speech sounds stand in brackets or
parentheses (those get no text). The community prompt sets (``asterisk-prompt-*``) are WAV
or headerless GSM files whose names say what the prompt is for, not its words: no text.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from pathlib import Path

from training.real_audio.clip import Clip, g722_path, soundfile_path
from training.real_audio.games import clip_id

NOT_WORDS = re.compile(r"^[\[(].*[\])]$")


def prompt_texts(listing: str) -> dict[str, str]:
    """Prompt path (no extension) -> its words, from a ``core-sounds-xx.txt``."""
    texts = {}
    for line in listing.splitlines():
        key, sep, text = line.lstrip("\ufeff").partition(":")
        text = " ".join(text.split())
        if sep and not key.startswith(";") and " " not in key.strip() and text:
            texts[key.strip()] = "" if NOT_WORDS.match(text) else text
    return texts


def _sounds(root: Path) -> Path:
    return next(p for p in root.rglob("sounds") if p.is_dir())


def core(audio: Path, text: Path) -> Iterator[Clip]:
    """The G.722 prompts under ``audio`` with their words from the listing under ``text``."""
    listing = next(text.rglob("core-sounds-*.txt.gz"))
    texts = prompt_texts(gzip.decompress(listing.read_bytes()).decode("utf-8"))
    for path in sorted(_sounds(audio).rglob("*.g722")):
        voice, _, prompt = (
            path.relative_to(_sounds(audio)).with_suffix("").as_posix().partition("/")
        )
        yield Clip(
            clip_id(f"{voice}/{prompt}"),
            lambda path=path: g722_path(str(path)),
            text=texts.get(prompt, ""),
            speaker=voice,
        )


def prompts(root: Path) -> Iterator[Clip]:
    """The WAV or GSM prompts of a community prompt set."""
    sounds = _sounds(root)
    for path in sorted(p for p in sounds.rglob("*") if p.suffix in (".wav", ".gsm")):
        relative = path.relative_to(sounds).as_posix()
        yield Clip(
            clip_id(relative),
            lambda path=path: soundfile_path(str(path)),
            speaker=relative.split("/", 1)[0],
        )
