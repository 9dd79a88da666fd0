"""Beneath a Steel Sky's speech: files 50000-59391 of the ``sky.dsk`` archive, indexed by
``sky.dnr``.

``sky.dnr`` is a little-endian 32-bit entry count, then 8-byte entries: a 16-bit file number,
24 bits of offset into ``sky.dsk`` (low 23 bits; bit 23 means the offset counts 16-byte
units) and 24 bits of size and flags (low 22 bits the size; bit 23 set means stored as is,
clear means packed when the file's header says so). Every file starts with a 22-byte header
of 16-bit words; bit 7 of the first marks RNC ProPack data after the header, and the header's
total size (its high byte in the first word's high byte, the rest at byte 12) counts the
header too. After it come unsigned 8-bit samples at 11,025 Hz. The game pairs clips with
text through its scripts, so these clips carry none.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from training.real_audio.clip import Clip, pcm_u8
from training.real_audio.rnc import unpack

SPEECH = range(50000, 59392)
RATE = 11025
FILE_HEADER = 22
ENTRY = struct.Struct("<H3s3s")


def index(dnr: bytes) -> dict[int, tuple[int, int, bool]]:
    """File number -> (offset, size, stored as is) for every entry of a ``sky.dnr``."""
    (count,) = struct.unpack_from("<I", dnr)
    if len(dnr) < 4 + count * ENTRY.size:
        raise ValueError(f"sky.dnr: {count} entries announced, the file is too short")
    files = {}
    for number, where, flags in ENTRY.iter_unpack(dnr[4 : 4 + count * ENTRY.size]):
        offset, info = int.from_bytes(where, "little"), int.from_bytes(flags, "little")
        start = (offset & 0x7FFFFF) << (4 if offset >> 23 else 0)
        files[number] = (start, info & 0x3FFFFF, bool(info >> 23 & 1))
    return files


def samples(raw: bytes, stored: bool) -> bytes:
    """The 8-bit samples of one speech file as read from ``sky.dsk``."""
    if len(raw) < FILE_HEADER:
        raise ValueError(f"{len(raw)} bytes: shorter than the {FILE_HEADER}-byte header")
    flag, total = struct.unpack_from("<H", raw)[0], struct.unpack_from("<H", raw, 12)[0]
    total |= (flag & 0xFF00) << 8
    body = raw[FILE_HEADER:]
    if not stored and flag & 0x80:
        body = unpack(body)
    return body[: max(total - FILE_HEADER, 0)]


def clips(root: Path) -> Iterator[Clip]:
    """Every speech file in the ``sky.dnr``/``sky.dsk`` pair under ``root``."""
    directory = next(p.parent for p in root.rglob("sky.dnr"))
    files = index((directory / "sky.dnr").read_bytes())
    with open(directory / "sky.dsk", "rb") as dsk:
        for number in sorted(n for n in files if n in SPEECH):
            start, size, stored = files[number]
            dsk.seek(start)
            raw = dsk.read(size)
            yield Clip(str(number), lambda raw=raw, stored=stored: _decode(raw, stored))


def _decode(raw: bytes, stored: bool) -> tuple[np.ndarray, int]:
    return pcm_u8(samples(raw, stored)), RATE
