"""RNC ProPack method 1: the packer Beneath a Steel Sky's speech files are stored with.

Written from the format's description. A packed block is an 18-byte big-endian header
(``RNC\\x01``, unpacked size, packed size, CRC-16 of the unpacked data, CRC-16 of the
packed data, leeway byte, block count) followed by one bit stream and the literal bytes
interleaved with it. Bits are taken least significant first from little-endian 16-bit
words, and the reader always holds at least 16 bits; the last word it took is its
lookahead. A run of literal bytes starts where that lookahead word starts: the reader
gives the word back, copies the literals, and takes the next word after them.

Each block holds three canonical Huffman tables (literal-run lengths, match offsets, match
lengths), a 16-bit count of items, then the items: a literal run, and (except for the
last item) a match copied from earlier output. Both CRCs are checked, so a misread stream
is an error, never noise.
"""

from __future__ import annotations

import struct

MAGIC = b"RNC\x01"
HEADER = struct.Struct(">4sIIHHBB")
MIN_MATCH = 2


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC = _crc_table()


def crc16(data: bytes | bytearray) -> int:
    """CRC-16 with the reflected polynomial 0xA001 and initial value 0 (the one RNC stores)."""
    crc = 0
    for byte in data:
        crc = (crc >> 8) ^ _CRC[(crc ^ byte) & 0xFF]
    return crc


class _Bits:
    """The packed stream: LSB-first bits from 16-bit words, literals between them."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0  # next byte not yet taken into the bit buffer
        self.buffer = 0
        self.count = 0
        self._take_word()

    def _take_word(self) -> None:
        word = int.from_bytes(self.data[self.pos : self.pos + 2].ljust(2, b"\0"), "little")
        self.buffer |= word << self.count
        self.count += 16
        self.pos += 2

    def peek(self) -> int:
        return self.buffer & 0xFFFF

    def read(self, n: int) -> int:
        value = self.buffer & ((1 << n) - 1)
        self.buffer >>= n
        self.count -= n
        if self.count < 16:
            self._take_word()
        return value

    def literals(self, n: int) -> bytes:
        self.count -= 16  # give the lookahead word back: literals start where it does
        self.buffer &= (1 << self.count) - 1
        self.pos -= 2
        out = self.data[self.pos : self.pos + n]
        if len(out) < n:
            raise ValueError("RNC: literal run past the end of the packed data")
        self.pos += n
        self._take_word()
        return out


Table = list[tuple[int, int, int]]  # (length in bits, code as read LSB first, symbol)


def _table(bits: _Bits) -> Table:
    """A canonical Huffman table: 5 bits of symbol count, then a 4-bit length per symbol."""
    lengths = [bits.read(4) for _ in range(bits.read(5))]
    table: Table = []
    code = 0
    for length in range(1, 17):
        for symbol, n in enumerate(lengths):
            if n == length:
                msb_first = code >> (16 - length)
                table.append((length, int(f"{msb_first:0{length}b}"[::-1], 2), symbol))
                code += 1 << (16 - length)
    return table


def _value(bits: _Bits, table: Table) -> int:
    """A Huffman symbol and the extra bits it calls for: symbols 0 and 1 stand for themselves,
    symbol s >= 2 for 2**(s-1) plus s-1 further bits."""
    window = bits.peek()
    for length, code, symbol in table:
        if window & ((1 << length) - 1) == code:
            bits.read(length)
            if symbol < 2:
                return symbol
            return (1 << (symbol - 1)) | bits.read(symbol - 1)
    raise ValueError("RNC: no Huffman code matches the stream")


def unpack(packed: bytes) -> bytes:
    """The data an RNC method-1 block packs; ValueError if it is not one or fails its CRCs."""
    if len(packed) < HEADER.size or packed[:4] != MAGIC:
        raise ValueError("not RNC method-1 data")
    _, size, packed_size, crc_unpacked, crc_packed, _, blocks = HEADER.unpack_from(packed)
    body = packed[HEADER.size : HEADER.size + packed_size]
    if len(body) != packed_size or crc16(body) != crc_packed:
        raise ValueError("RNC: packed data truncated or damaged (CRC)")
    bits = _Bits(body)
    bits.read(2)  # lock and key flags, unused by method 1
    out = bytearray()
    for _ in range(blocks):
        runs, offsets, lengths = _table(bits), _table(bits), _table(bits)
        items = bits.read(16)
        for item in range(items):
            run = _value(bits, runs)
            if run:
                out += bits.literals(run)
            if item == items - 1:
                break
            offset = _value(bits, offsets) + 1
            length = _value(bits, lengths) + MIN_MATCH
            if offset > len(out):
                raise ValueError("RNC: match reaches before the start of the output")
            start = len(out) - offset
            if offset >= length:
                out += out[start : start + length]
            else:  # overlapping: the copy repeats the last ``offset`` bytes
                for i in range(length):
                    out.append(out[start + i])
    if len(out) != size or crc16(out) != crc_unpacked:
        raise ValueError(f"RNC: unpacked {len(out)} bytes, expected {size} (or CRC differs)")
    return bytes(out)
