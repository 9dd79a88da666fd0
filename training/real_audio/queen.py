"""Flight of the Amazon Queen's speech: the ``*.SB`` entries of the ``queen.1c`` archive.

The archive starts with ``QTBL``, a 6-byte version and a compression byte (1: MP3) at
offset 12, then a big-endian 16-bit entry count and, from offset 15, 21-byte entries: a
12-byte NUL-padded name, a bundle byte, a big-endian 32-bit offset and a 32-bit size. In
this compressed edition each ``.SB`` entry is an MP3 stream as it is. Pairing clips with
the dialogue text follows the game engine's logic, so these clips carry no text.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from training.real_audio.clip import Clip, soundfile_bytes

MAGIC = b"QTBL"
MP3 = 1
ENTRY = struct.Struct(">12sBII")
TABLE = 15


def entries(head: bytes) -> dict[str, tuple[int, int]]:
    """Entry name -> (offset, size), read from the start of a ``queen.1c``."""
    if head[:4] != MAGIC:
        raise ValueError("not a queen.1c archive (no QTBL)")
    if head[12] != MP3:
        raise ValueError(f"queen.1c: compression {head[12]}, expected {MP3} (MP3)")
    (count,) = struct.unpack_from(">H", head, 13)
    if len(head) < TABLE + count * ENTRY.size:
        raise ValueError(f"queen.1c: {count} entries announced, the table is cut short")
    found = {}
    for name, _, offset, size in ENTRY.iter_unpack(head[TABLE : TABLE + count * ENTRY.size]):
        found[name.rstrip(b"\0").decode("ascii")] = (offset, size)
    return found


def clips(root: Path) -> Iterator[Clip]:
    """Every ``.SB`` entry of the ``queen.1c`` under ``root``, in name order."""
    path = next(root.rglob("queen.1c"))
    with open(path, "rb") as f:
        head = f.read(TABLE)
        head += f.read(struct.unpack_from(">H", head, 13)[0] * ENTRY.size)
        table = entries(head)
        for name in sorted(n for n in table if n.endswith(".SB")):
            offset, size = table[name]
            f.seek(offset)
            data = f.read(size)
            yield Clip(name[:-3], lambda data=data: soundfile_bytes(data))
