"""Reader of CTranslate2's ``model.bin``, written from its binary layout (no ctranslate2 needed).

Layout (little-endian), binary version 6::

    u32 version | str spec name | u32 spec revision | u32 variable count
    per variable: str name | u8 rank | u32 dims[rank] | u8 dtype | u32 byte count | bytes
    u32 alias count | per alias: str alias | str variable name

where ``str`` is a u16 length (counting a trailing NUL), then the bytes and the NUL.
A file that ends early or holds an unknown dtype fails with an error naming the
variable being read and the byte offset, so a truncated download says so.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# CTranslate2's DataType enum, in its order.
DTYPES: dict[int, np.dtype] = {
    0: np.dtype("<f4"),
    1: np.dtype("i1"),
    2: np.dtype("<i2"),
    3: np.dtype("<i4"),
    4: np.dtype("<f2"),
    # 5 is bfloat16, which numpy has no type for; Whisper-base does not use it.
}
SUPPORTED_VERSIONS = (6,)


@dataclass
class CT2Model:
    """A parsed model.bin: spec name and revision, variables by name (aliases resolved)."""

    spec: str
    revision: int
    variables: dict[str, np.ndarray]


class _Reader:
    def __init__(self, data: bytes, source: str) -> None:
        self.data = data
        self.offset = 0
        self.source = source
        self.what = "the header"

    def take(self, size: int) -> bytes:
        if self.offset + size > len(self.data):
            raise ValueError(
                f"{self.source}: truncated: the file ends at byte {len(self.data):,} while "
                f"reading {self.what} (needs {self.offset + size:,} bytes)"
            )
        chunk = self.data[self.offset : self.offset + size]
        self.offset += size
        return chunk

    def unpack(self, fmt: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        raw = self.take(self.unpack("H"))
        if not raw.endswith(b"\0"):
            raise ValueError(f"{self.source}: corrupted: a string in {self.what} lacks its NUL")
        return raw[:-1].decode("utf-8", errors="replace")


def read_ct2_model(path: str | Path, data: bytes | None = None) -> CT2Model:
    """Parse ``path`` (or ``data``, named by ``path`` in errors) into numpy arrays (zero-copy)."""
    source = str(path)
    reader = _Reader(Path(path).read_bytes() if data is None else data, source)
    version = reader.unpack("I")
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"{source}: binary version {version} is not supported "
            f"(this reader knows {', '.join(map(str, SUPPORTED_VERSIONS))})"
        )
    spec = reader.string()
    revision = reader.unpack("I")
    count = reader.unpack("I")
    variables: dict[str, np.ndarray] = {}
    for index in range(count):
        reader.what = f"variable {index + 1} of {count}"
        name = reader.string()
        reader.what = f"variable {name!r}"
        rank = reader.unpack("B")
        shape = tuple(reader.unpack("I") for _ in range(rank))
        dtype_id = reader.unpack("B")
        if dtype_id not in DTYPES:
            raise ValueError(f"{source}: variable {name!r} has unsupported dtype id {dtype_id}")
        dtype = DTYPES[dtype_id]
        size = reader.unpack("I")
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if size != expected:
            raise ValueError(
                f"{source}: corrupted: variable {name!r} of shape {shape} holds {size} bytes, "
                f"expected {expected}"
            )
        variables[name] = np.frombuffer(reader.take(size), dtype=dtype).reshape(shape)
    reader.what = "the alias table"
    for _ in range(reader.unpack("I")):
        alias, target = reader.string(), reader.string()
        if target not in variables:
            raise ValueError(f"{source}: alias {alias!r} names a missing variable {target!r}")
        variables[alias] = variables[target]
    if reader.offset != len(reader.data):
        raise ValueError(
            f"{source}: corrupted: {len(reader.data) - reader.offset:,} bytes after the alias table"
        )
    return CT2Model(spec, revision, variables)
