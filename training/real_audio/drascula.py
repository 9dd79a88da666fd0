"""Drascula's speech (``*.ALS``: headerless unsigned 8-bit PCM at 11,025 Hz) paired with its
own text tables in ``drascula.dat``.

The one source whose transcripts are cheap to pair, so it measures pseudo-label quality.
The game speaks line N of a character's table from the file named by that character's
prefix and N: ``N.ALS`` the hero (table ``text``), ``D`` Drascula (``textd``), ``B`` the
drunk, ``BJ`` B.J., ``E`` the musician, ``I`` Igor, ``L`` the werewolf, ``P`` the pianist,
``T`` the bartender, ``VB`` Von Braun. The exception, D83, is the hero's line 83. Other
prefixes are spoken outside these tables and get no text.

``drascula.dat`` (version 6): ``DRASCULA``, a version byte, thirteen tables of fixed-size
records (each a big-endian 16-bit count, then the records) that this reader skips, a
16-bit language count, then the text tables in a fixed order. Each text table is a 16-bit
line count, then per language a 16-bit byte total and two padding bytes, then per line a
16-bit length (counting itself and the padding to a multiple of 4) and the NUL-ended
string. Languages come in the order English, Spanish, German, French, Italian, Russian;
the Western ones are in code page 850.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path

from training.real_audio.clip import Clip, pcm_u8
from training.recipes.textnorm import normalize

RATE = 11025
# bytes per record of the tables before the texts (char map, item locations, ..., talk
# sequences), in file order
RECORD_SIZES = (4, 4, 4, 2, 4, 2, 4, 2, 2, 20, 20, 10, 8)
TEXT_TABLES = (
    "text textd textb textbj texte texti textl textp textt textvb textsys texthis "
    "textverbs textmisc textd1"
).split()
LANGUAGES = ("en", "es", "de", "fr", "it", "ru")
PREFIX_TABLES = {
    "": "text",
    "D": "textd",
    "B": "textb",
    "BJ": "textbj",
    "E": "texte",
    "I": "texti",
    "L": "textl",
    "P": "textp",
    "T": "textt",
    "VB": "textvb",
}
EXCEPTIONS = {"D83": ("text", 83)}
SPEECH_NAME = re.compile(r"([A-Z]*)(\d+)\.ALS", re.IGNORECASE)


def text_tables(dat: bytes, language: str) -> dict[str, list[str]]:
    """Table name -> its lines in ``language`` (one of LANGUAGES)."""
    if dat[:8] != b"DRASCULA":
        raise ValueError("not a drascula.dat (no DRASCULA signature)")
    pos = 9
    for size in RECORD_SIZES:
        count, pos = _u16(dat, pos)
        pos += count * size
    languages, pos = _u16(dat, pos)
    wanted = LANGUAGES.index(language)
    if wanted >= languages:
        raise ValueError(f"drascula.dat holds {languages} languages, not {language}")
    encoding = "cp1251" if language == "ru" else "cp850"
    tables = {}
    for name in TEXT_TABLES:
        lines, pos = _u16(dat, pos)
        for lang in range(languages):
            pos += 4  # byte total (it overflows 16 bits for the long tables) and padding
            rows = []
            for _ in range(lines):
                size, pos = _u16(dat, pos)
                rows.append(dat[pos : pos + size - 2].split(b"\0")[0].decode(encoding))
                pos += size - 2
            if lang == wanted:
                tables[name] = rows
    return tables


def _u16(data: bytes, pos: int) -> tuple[int, int]:
    """The big-endian 16-bit number at ``pos`` and the position after it."""
    return struct.unpack_from(">H", data, pos)[0], pos + 2


def line_for(stem: str, tables: dict[str, list[str]]) -> tuple[str, str]:
    """(speaker prefix, the table line a speech file speaks) for a file stem such as
    ``VB12``; the line is "" when the game speaks that file outside the tables."""
    match = SPEECH_NAME.fullmatch(stem + ".ALS")
    if not match:
        return "", ""
    prefix, number = match[1].upper(), int(match[2])
    table, line = EXCEPTIONS.get(prefix + str(number), (PREFIX_TABLES.get(prefix), number))
    rows = tables.get(table or "", [])
    return prefix, rows[line] if 0 <= line < len(rows) else ""


def clips(speech: Path, game: Path, language: str) -> Iterator[Clip]:
    """Every ``.ALS`` file under ``speech`` with its line in ``language`` from the
    ``drascula.dat`` under ``game`` (the ``drascula`` package: ``drascula-spanish`` only links
    to it, as it links a few clips to English ones it does not ship; those are skipped)."""
    dat = next(p for p in game.rglob("drascula.dat") if p.is_file())
    tables = text_tables(dat.read_bytes(), language)
    for path in sorted(p for p in speech.rglob("*.[Aa][Ll][Ss]") if p.is_file()):
        prefix, line = line_for(path.stem, tables)
        text = " ".join(line.split())
        if language == "en":
            text = normalize(text)
        yield Clip(
            path.stem.upper(),
            lambda path=path: (pcm_u8(path.read_bytes()), RATE),
            text=text,
            speaker=f"drascula-{prefix or 'hero'}",
        )
