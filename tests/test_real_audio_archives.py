"""The game-archive readers of training/real_audio on small archives each test builds in that
game's format: RNC ProPack method 1 (packed by a test encoder), Beneath a Steel Sky's
sky.dnr/sky.dsk, Flight of the Amazon Queen's queen.1c and Drascula's drascula.dat with its
.ALS files. No package is fetched."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile

from training.real_audio import drascula, queen, rnc, sky

# A complete prefix code over 16 symbols (Kraft sum 1) with lengths 2 to 8 bits.
LENGTHS = [2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 8, 8]


class Packer:
    """A minimal RNC method-1 encoder: the bit stream in 16-bit little-endian words, LSB
    first; literal runs go where the reader's lookahead word would start."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.word = 0
        self.used = 16
        codes, code = {}, 0
        for length in range(1, 17):
            for symbol, n in enumerate(LENGTHS):
                if n == length:
                    codes[symbol] = (length, code >> (16 - length))
                    code += 1 << (16 - length)
        self.codes = codes

    def bits(self, value: int, n: int) -> None:
        for i in range(n):
            if self.used == 16:
                self.word, self.used = len(self.out), 0
                self.out += b"\0\0"
            if value >> i & 1:
                self.out[self.word + self.used // 8] |= 1 << (self.used % 8)
            self.used += 1

    def table(self) -> None:
        self.bits(len(LENGTHS), 5)
        for n in LENGTHS:
            self.bits(n, 4)

    def value(self, v: int) -> None:
        symbol = v if v < 2 else v.bit_length()
        length, code = self.codes[symbol]
        self.bits(int(f"{code:0{length}b}"[::-1], 2), length)
        if symbol >= 2:
            self.bits(v - (1 << (symbol - 1)), symbol - 1)

    def pack(self, blocks: list[list[tuple[bytes, tuple[int, int] | None]]]) -> bytes:
        """``blocks`` of items: (literal bytes, (offset, length) of a match, None for the
        block's last item)."""
        self.bits(0, 2)
        plain = bytearray()
        for items in blocks:
            for _ in range(3):
                self.table()
            self.bits(len(items), 16)
            for literal, match in items:
                self.value(len(literal))
                if literal:
                    self.out += literal
                    plain += literal
                if match:
                    offset, length = match
                    self.value(offset - 1)
                    self.value(length - 2)
                    for _ in range(length):
                        plain.append(plain[-offset])
        head = struct.pack(
            ">4sIIHHBB",
            b"RNC\x01",
            len(plain),
            len(self.out),
            rnc.crc16(plain),
            rnc.crc16(self.out),
            0,
            len(blocks),
        )
        self.plain = bytes(plain)
        return head + bytes(self.out)


def packed_sample() -> tuple[bytes, bytes]:
    """(packed, plain): literal runs of several lengths, overlapping and distant matches,
    a match right after another, over two blocks."""
    rng = np.random.default_rng(0)
    noise = bytes(rng.integers(0, 256, 40, dtype=np.uint8))
    blocks = [
        [(b"abc", (3, 9)), (noise[:17], (20, 5)), (b"", (1, 6)), (b"Z", None)],
        [(noise[17:], (40, 33)), (b"q" * 3, (2, 300)), (b"end", None)],
    ]
    packer = Packer()
    packed = packer.pack(blocks)
    return packed, packer.plain


def test_rnc_unpacks_what_the_packer_packed() -> None:
    packed, plain = packed_sample()
    assert len(plain) > 400 and plain.startswith(b"abcabcabcabc")
    assert rnc.unpack(packed) == plain


def test_rnc_refuses_damaged_or_foreign_data() -> None:
    packed, _ = packed_sample()
    damaged = bytearray(packed)
    damaged[30] ^= 0x10
    with pytest.raises(ValueError, match="CRC"):
        rnc.unpack(bytes(damaged))
    with pytest.raises(ValueError, match="not RNC"):
        rnc.unpack(b"RNC\x02" + packed[4:])


def sky_file(samples: bytes, packed: bool) -> bytes:
    """A speech file: the 22-byte header (bit 7 of the first word: packed; total size with
    the header at byte 12), then the samples, RNC-packed or not."""
    header = bytearray(22)
    struct.pack_into("<H", header, 0, 0x80 if packed else 0)
    struct.pack_into("<H", header, 12, 22 + len(samples))
    if packed:
        packer = Packer()
        body = packer.pack([[(samples[:50], (50, len(samples) - 60)), (samples[-10:], None)]])
        assert packer.plain == samples
        return bytes(header) + body
    return bytes(header) + samples


def test_sky_reads_speech_files_packed_or_stored(tmp_path: Path) -> None:
    tone = bytes(128 + int(60 * np.sin(i / 3)) for i in range(50))
    loud = tone * 8  # repeats, so the packer has matches to find
    plain = bytes(range(256)) * 2
    files = {50000: sky_file(loud, True), 50001: sky_file(plain, False), 7: b"\1" * 64}
    dsk, dnr = bytearray(), bytearray(struct.pack("<I", len(files)))
    for number, data in files.items():
        dsk += b"\0" * (-len(dsk) % 16)
        sixteens = number == 50001  # this one's offset counts 16-byte units
        offset = len(dsk) // 16 | 1 << 23 if sixteens else len(dsk)
        flags = len(data) | (1 << 23 if number == 50001 else 0)  # bit 23: stored as is
        dnr += (
            struct.pack("<H", number) + offset.to_bytes(3, "little") + flags.to_bytes(3, "little")
        )
        dsk += data
    folder = tmp_path / "usr" / "share" / "scummvm" / "sky"
    folder.mkdir(parents=True)
    (folder / "sky.dnr").write_bytes(bytes(dnr))
    (folder / "sky.dsk").write_bytes(bytes(dsk) + b"\0" * 32)
    clips = list(sky.clips(tmp_path))
    assert [c.id for c in clips] == ["50000", "50001"]
    assert all(c.text == "" for c in clips)
    for clip, raw in zip(clips, (loud, plain)):
        samples, rate = clip.load()
        assert rate == 11025
        np.testing.assert_array_equal(samples, (np.frombuffer(raw, np.uint8) - 128.0) / 128.0)


def mp3(frequency: float, seconds: float, rate: int = 11025) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    out = io.BytesIO()
    soundfile.write(
        out, (0.4 * np.sin(2 * np.pi * frequency * t)).astype(np.float32), rate, format="MP3"
    )
    return out.getvalue()


def test_queen_reads_the_sb_entries_as_mp3(tmp_path: Path) -> None:
    entries = {"0102J1.SB": mp3(300, 1.0), "ROOM.DOG": b"not speech", "0103P2.SB": mp3(700, 0.5)}
    table, data = b"", b""
    start = 15 + 21 * len(entries)
    for name, body in entries.items():
        table += struct.pack(">12sBII", name.encode(), 1, start + len(data), len(body))
        data += body
    archive = b"QTBL" + b"CEM10\0" + b"\0\0" + bytes([1]) + struct.pack(">H", len(entries))
    (tmp_path / "queen.1c").write_bytes(archive + table + data)
    clips = list(queen.clips(tmp_path))
    assert [c.id for c in clips] == ["0102J1", "0103P2"]
    for clip, frequency, seconds in zip(clips, (300, 700), (1.0, 0.5)):
        samples, rate = clip.load()
        assert rate == 11025 and abs(len(samples) / rate - seconds) < 0.1
        spectrum = np.abs(np.fft.rfft(samples))
        assert abs(np.argmax(spectrum) * rate / len(samples) - frequency) < 15


def text_table(lines: list[list[str]]) -> bytes:
    """One drascula.dat text table: a line count, then per language a byte total, two pad
    bytes and the lines, each with its padded length in front."""
    out = struct.pack(">H", len(lines[0]))
    for language in lines:
        body = b""
        for line in language:
            text = line.encode("cp850") + b"\0"
            pad = 4 - (len(text) + 2) % 4
            body += struct.pack(">H", len(text) + pad + 2) + text + b"\0" * pad
        out += struct.pack(">H", (len(body) + 2) & 0xFFFF) + b"\0\0" + body
    return out


def drascula_dat(tables: dict[str, list[str]]) -> bytes:
    """A version-6 drascula.dat: two char-map records and empty fixed tables, six languages
    (Spanish lines say so), and the text tables given (others hold one empty line)."""
    dat = b"DRASCULA" + bytes([6]) + struct.pack(">H", 2) + b"\1\0\2\3" * 2
    dat += struct.pack(">H", 0) * (len(drascula.RECORD_SIZES) - 1) + struct.pack(">H", 6)
    for name in drascula.TEXT_TABLES:
        english = tables.get(name, [""])
        spanish = [f"¿ESPAÑOL {i}?" for i in range(len(english))]
        dat += text_table([english, spanish] + [[""] * len(english)] * 4)
    return dat


def test_drascula_pairs_each_speech_file_with_its_table_line(tmp_path: Path) -> None:
    hero = [f"hero line {i}" for i in range(90)]
    hero[83] = "THE TRUNK SPEAKS, 2 TIMES!"
    tables = {
        "text": hero,
        "textd": ["d0", "I AM DRASCULA"],
        "textvb": ["v0", "v1", "WHO'S THERE?"],
    }
    game = tmp_path / "game" / "en"
    game.mkdir(parents=True)
    (game / "drascula.dat").write_bytes(drascula_dat(tables))
    pcm = bytes(range(0, 256, 4))
    for name in ("1.ALS", "D1.ALS", "VB2.ALS", "D83.ALS", "S3.ALS", "MUSIC.ALG"):
        (game / name).write_bytes(pcm)
    clips = {c.id: c for c in drascula.clips(game.parent, game.parent, "en")}
    assert {k: (v.text, v.speaker) for k, v in clips.items()} == {
        "1": ("hero line one", "drascula-hero"),
        "D1": ("i am drascula", "drascula-D"),
        "VB2": ("who's there", "drascula-VB"),
        "D83": ("the trunk speaks two times", "drascula-D"),  # the hero's table, not Drascula's
        "S3": ("", "drascula-S"),  # spoken outside the tables
    }
    samples, rate = clips["1"].load()
    assert rate == 11025 and samples[0] == -1.0 and samples[32] == 0.0
    spanish = {c.id: c.text for c in drascula.clips(game.parent, game.parent, "es")}
    assert spanish["VB2"] == "¿ESPAÑOL 2?"  # code page 850, kept as written
