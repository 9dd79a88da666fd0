"""Tests for the corpus text sources: generated everyday material, the R data reader behind
Jane Austen's novels, and the source registry that --text draws on."""

from __future__ import annotations

import gzip
import random
import re
import shutil
import string
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from training.recipes import everyday, sources
from training.recipes.engines import ENGINES
from training.recipes.sources import DEFAULT_TEXT, RReader, clean_pairs, load_text
from training.recipes.textnorm import (
    ONES,
    clock,
    digits,
    join_letters,
    money,
    normalize,
    ordinal,
    year,
)


@pytest.fixture(scope="module")
def pool() -> list[tuple[str, str]]:
    return everyday.pairs(seed=11, count=3000)


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (year(1999), "nineteen ninety nine"),
        (year(2005), "two thousand five"),
        (year(2023), "two thousand twenty three"),
        (clock("7", "05"), "seven oh five"),
        (clock("12", "00"), "twelve o'clock"),
        (money("£", "3.50", ""), "three pounds and fifty pence"),
        (money("$", "0.99", ""), "ninety nine cents"),
        (money("$", "1.01", ""), "one dollar and one cent"),
        (ordinal(23), "twenty third"),
        (everyday.spoken_digits("5550192", oh=False), "five five five zero one nine two"),
        (everyday.spoken_digits("5550192", oh=True), "five five five oh one nine two"),
        (digits("911"), "nine one one"),
    ],
)
def test_number_readings(words: str, expected: str) -> None:
    assert words == expected


def test_phone_numbers_are_read_digit_by_digit_in_groups() -> None:
    rng = random.Random(4)
    for _ in range(50):
        spoken, text = everyday.gen_phone(rng)
        groups = spoken.rstrip(".").split(", ")
        assert len(groups) >= 2 and all(g.lower().split() for g in groups)
        assert set(text.split()) <= {*ONES[:10], "oh"}
        assert 7 <= len(text.split()) <= 11


@pytest.mark.parametrize(
    ("words", "joined"),
    [
        ("m f a", "mfa"),  # spelled letters: one word, as Whisper writes them
        ("row twelve o", "row twelve o"),  # one letter alone stays
        ("i am a b c", "i am abc"),
        ("a i", "a i"),  # "a" and "i" together are words
        ("go to a b and i", "go to ab and i"),
        ("k o x", "kox"),
        ("", ""),
    ],
)
def test_spelled_letters_join_as_they_are_scored(words: str, joined: str) -> None:
    assert " ".join(join_letters(words.split())) == joined


def test_spelled_letters_and_nato() -> None:
    assert everyday.letters("b") == ("B", "b")
    assert everyday.letters("cat") == ("C, Eigh, T", "c a t")
    assert len(everyday.NATO) == 26
    assert [w[0] for w in everyday.NATO] == list(string.ascii_lowercase)
    assert everyday.NATO[:3] == ["alpha", "bravo", "charlie"] and everyday.NATO[23] == "x-ray"
    rng = random.Random(1)
    seen = {everyday.gen_nato(rng) for _ in range(300)}
    assert ("B as in bravo.", "b as in bravo") in seen
    assert ("X as in x ray.", "x as in x ray") in seen


def test_pool_covers_closed_sets_and_is_clean(pool: list[tuple[str, str]]) -> None:
    texts = {text for _, text in pool}
    assert len(texts) == len(pool) == 3000, "distinct transcripts"
    assert set(string.ascii_lowercase) <= texts, "every letter alone"
    assert {w.replace("-", " ") for w in everyday.NATO} <= texts
    assert {"stop", "next slide", "call mom", "yes", "thank you", "zero", "one hundred"} <= texts
    for spoken, text in pool:
        assert everyday.is_clean_item(spoken, text), (spoken, text)
        # the engine says the transcript's words (a spelled A is spoken "Eigh")
        assert re.sub(r"\beigh\b", "a", normalize(spoken)) == text, (spoken, text)
    lengths = [len(text.split()) for _, text in pool]
    assert sum(n <= 3 for n in lengths) > 0.3 * len(pool), "plenty of short material"
    assert max(lengths) <= 20


def test_pool_is_a_function_of_the_seed(pool: list[tuple[str, str]]) -> None:
    assert everyday.pairs(seed=11, count=3000) == pool
    assert everyday.pairs(seed=12, count=3000) != pool
    assert everyday.pairs(seed=11, count=1000) == pool[:1000]


def test_is_clean_item() -> None:
    assert everyday.is_clean_item("B", "b")
    assert everyday.is_clean_item("Seven oh five.", "seven oh five")
    assert not everyday.is_clean_item("B-52.", "b fifty two")
    assert not everyday.is_clean_item("Hello.", "Hello")
    assert not everyday.is_clean_item("", "")
    assert not everyday.is_clean_item("Nazi.", "nazi")


def espeak_phonemes(text: str, voice: str = "en-us") -> str:
    out = subprocess.run(
        ["espeak-ng", "-q", "-x", "-v", voice, "--", text], capture_output=True, text=True
    ).stdout
    return re.sub(r"[\s',%=_:;|]", "", out)


# espeak-ng's letter names (en-us), stress and length marks dropped.
LETTER_PHONEMES = dict(
    zip(
        string.ascii_lowercase,
        "eI bi si di i Ef dZi eItS aI dZeI keI El Em En oU pi kju A@ Es ti ju vi dVb@Lju Eks "
        "waI zi".split(),
        strict=True,
    )
)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_espeak_reads_spelled_letters_as_their_names() -> None:
    for c in string.ascii_lowercase:
        assert espeak_phonemes(everyday.letters(c)[0]) == LETTER_PHONEMES[c], c
    spoken, text = everyday.letters("kab")
    assert espeak_phonemes(spoken) == "".join(LETTER_PHONEMES[c] for c in text.split())
    assert espeak_phonemes("B as in bravo.") == "bi" + espeak_phonemes("as in bravo.")
    # Synthesised, each letter is whole: it ends in silence, not cut off inside the letter
    # (as espeak-ng does to "B."), and three letters last well over twice as long as one.
    params = {"rate": 175, "pitch": 50}
    spoken = [everyday.letters(c)[0] for c in [*string.ascii_lowercase, "cat"]]
    audio = ENGINES["espeak"].synthesize("en-us+m1", [(text, params) for text in spoken])
    seconds = []
    for text, (samples, rate) in zip(spoken, audio, strict=True):
        frame = rate // 100
        energy = np.sqrt(
            np.mean(samples[: len(samples) // frame * frame].reshape(-1, frame) ** 2, 1)
        )
        assert energy[-1] < 0.01 * energy.max(), f"{text!r} is cut off"
        seconds.append(len(samples) / rate)
    assert all(0.3 < s < 1.2 for s in seconds[:26]) and seconds[26] > 2 * max(seconds[:3])


# A hand-made XDR serialisation, as R writes it (format 3), to test the reader without R.
def xdr(*ints: int) -> bytes:
    return b"".join(struct.pack(">i", i) for i in ints)


def r_char(text: str | None) -> bytes:
    if text is None:
        return xdr(0x9, -1)
    data = text.encode()
    return xdr(0x40009, len(data)) + data


def r_strings(items: list[str | None]) -> bytes:
    return xdr(0x10, len(items)) + b"".join(map(r_char, items))


def r_names(names: list[str], first: bool) -> bytes:
    """The attribute pairlist names=...; the symbol is written once, then referenced."""
    symbol = xdr(0x1) + r_char("names") if first else xdr((1 << 8) | 0xFF)
    return xdr(0x402) + symbol + r_strings(names) + xdr(0xFE)


HEADER = b"X\n" + xdr(3, 0x040201, 0x030500, 5) + b"UTF-8"


def test_r_reader_reads_named_lists_strings_and_references(tmp_path: Path) -> None:
    novel = HEADER + r_strings(["CHAPTER 1", "", "It is a truth.", None])
    assert RReader(novel).read() == ["CHAPTER 1", "", "It is a truth.", None]
    # a lazy-load index: list(variables = list(book = c(0L, n)), compressed = TRUE)
    blob = struct.pack(">I", len(novel)) + zlib.compress(novel)
    index = (
        HEADER
        + xdr(0x213, 2)
        + xdr(0x213, 1)
        + xdr(0xD, 2, 0, len(blob))
        + r_names(["book"], first=True)
        + xdr(0xA, 1, 1)
        + r_names(["variables", "compressed"], first=False)
    )
    (tmp_path / "Rdata.rdx").write_bytes(gzip.compress(index))
    (tmp_path / "Rdata.rdb").write_bytes(blob)
    assert sources.read_lazyload(tmp_path) == {"book": ["CHAPTER 1", "", "It is a truth.", None]}


def test_austen_paragraphs_and_sentences(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        "CHAPTER I",
        "",
        "It was _very_ odd.--Mr. Darcy said so; and Mrs. Bennet",
        "agreed--or seemed to.  He rode to ----shire that day.",
        "",
        "    A verse line, indented, left out.",
        "Chapter 2",
    ]
    assert list(sources.austen_paragraphs(lines)) == [
        "CHAPTER I",
        "It was _very_ odd.--Mr. Darcy said so; and Mrs. Bennet agreed--or seemed to.  "
        "He rode to ----shire that day.",
        "Chapter 2",
    ]
    monkeypatch.setattr(
        sources, "read_lazyload", lambda root: dict.fromkeys(sources.AUSTEN_NOVELS, lines)
    )
    found = list(sources.austen_sentences(tmp_path))[:2]
    assert found == [
        "It was very odd.",
        "Mister Darcy said so; and Missus Bennet agreed, or seemed to.",
    ]


@pytest.mark.skipif(not sources.AUSTEN_DIR.exists(), reason="r-cran-janeaustenr is not installed")
def test_austen_novels_from_the_debian_package() -> None:
    novels = sources.read_lazyload(sources.AUSTEN_DIR)
    sizes = {name: len(lines) for name, lines in novels.items()}
    assert sizes == {  # line counts as R's length() gives them
        "emma": 16235,
        "mansfieldpark": 15349,
        "northangerabbey": 7856,
        "persuasion": 8328,
        "prideprejudice": 13030,
        "sensesensibility": 12624,
    }
    raw = list(sources.austen_sentences())
    assert 30_000 < len(raw) < 35_000  # of which clean_pairs keeps about 17,400 (3-20 words)
    assert "Mister Bennet replied that he had not." in raw
    assert clean_pairs(raw[:20])[:3] == [
        (
            "The family of Dashwood had long been settled in Sussex.",
            "the family of dashwood had long been settled in sussex",
        ),
        (
            "In the society of his nephew and niece, and their children, the old Gentleman's "
            "days were comfortably spent.",
            "in the society of his nephew and niece and their children the old gentleman's "
            "days were comfortably spent",
        ),
        ("His attachment to them all increased.", "his attachment to them all increased"),
    ]


def test_default_text_is_the_old_sentence_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """load_text(DEFAULT_TEXT) is what the corpus always read: fortune then WordNet, cleaned
    and deduplicated together."""
    fortunes = ["I paid $5 for it.", "The cat sat on the mat.", "Too short."]
    wordnet = ["the cat sat on the mat", "he ran away quickly", "I paid $5 for it."]
    monkeypatch.setattr(sources, "fortune_sentences", lambda: iter(fortunes))
    monkeypatch.setattr(sources, "wordnet_sentences", lambda: iter(wordnet))
    loaded = load_text(DEFAULT_TEXT, seed=0)
    assert [(s.spoken, s.text) for s in loaded] == clean_pairs([*fortunes, *wordnet])
    assert [s.source for s in loaded] == ["fortune", "fortune", "wordnet"]
    assert load_text(DEFAULT_TEXT, seed=1) == loaded, "found text ignores the seed"


def test_sources_are_disjoint_by_transcript(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        sources, "fortune_sentences", lambda: iter(["Stop."] * 2 + ["Call mom now, please."])
    )
    loaded = load_text(["everyday", "fortune"], seed=0)
    texts = [s.text for s in loaded]
    assert len(texts) == len(set(texts))
    assert [s.source for s in loaded if s.text == "call mom now please"] == ["fortune"]
    assert [s.source for s in loaded if s.text == "stop"] == ["everyday"]
