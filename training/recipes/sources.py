"""Text sources for the corpus, by name (synth_corpus --text): what Debian packages install
(fortune databases, WordNet examples, Jane Austen's novels) and generated everyday material.

Never add the Harvard sentences (R's stringr::sentences) or recordings of real speech from
packages: both belong to held-out measurement.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from training.recipes import everyday
from training.recipes.textnorm import is_clean, normalize, spell_out

FORTUNE_DIR = Path("/usr/share/games/fortunes")
WORDNET_DIR = Path("/usr/share/wordnet")
# r-cran-janeaustenr: the six novels as R character vectors, one per line of the printed
# text, in R's lazy-load database. Install it with --no-install-recommends: its recommends
# (testthat, dplyr) pull in r-cran-stringr, which holds the Harvard sentences.
AUSTEN_DIR = Path("/usr/lib/R/site-library/janeaustenr/data")
# Collections that are pictures, foreign-language drills or mostly code, not sentences.
FORTUNE_SKIP = frozenset({"art", "ascii-art", "translate-me", "perl", "linux", "zippy"})
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')]*\s+(?=[\"'(]*[A-Z])")


def fortune_sentences(root: Path = FORTUNE_DIR) -> Iterator[str]:
    """Sentences of every fortune, without attributions ("-- Author") or indented verse."""
    for path in sorted(root.glob("*")):
        if path.suffix or path.name in FORTUNE_SKIP or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for entry in text.split("\n%\n"):
            lines = [ln for ln in entry.splitlines() if not ln.strip().startswith("--")]
            yield from SENTENCE_END.split(" ".join(ln.strip() for ln in lines))


def wordnet_sentences(root: Path = WORDNET_DIR) -> Iterator[str]:
    """The quoted usage examples that follow the glosses in WordNet's data files."""
    for pos in ("noun", "verb", "adj", "adv"):
        path = root / f"data.{pos}"
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if "|" in line and not line.startswith(" "):
                yield from re.findall(r'"([^"]+)"', line.split("|", 1)[1])


class RReader:
    """Just enough of R's XDR serialisation (format 2 or 3) to read vectors, lists and their
    names: what a data package's lazy-load database holds for plain data."""

    NIL, REF, SYMBOL, PAIRLIST, CHAR, ATTRLIST = 254, 255, 1, 2, 9, 239
    INTS, REALS, STRINGS, LIST = (10, 13), (14,), (16,), (19, 20)

    def __init__(self, data: bytes) -> None:
        if data[:2] != b"X\n":
            raise ValueError("not an XDR-serialised R object")
        self.data, self.pos, self.refs = data, 2, []
        version = self.int()
        self.pos += 8  # the writer's and the minimal reader's R versions
        if version == 3:
            self.pos += 4 + self.int()  # native encoding name

    def int(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def read(self) -> Any:
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind == self.NIL:
            return None
        if kind == self.REF:
            return self.refs[(flags >> 8 or self.int()) - 1]
        if kind == self.SYMBOL:
            self.refs.append(self.read())
            return self.refs[-1]
        if kind in (self.PAIRLIST, self.ATTRLIST):  # a list of (tag, value), as read
            if has_attr:
                self.read()
            tag = self.read() if has_tag else None
            head = [(tag, self.read())]
            return head + (self.read() or [])
        if kind == self.CHAR:
            n = self.int()
            if n == -1:
                return None  # NA_character_
            text = self.data[self.pos : self.pos + n].decode("utf-8", errors="replace")
            self.pos += n
            return text
        n = self.int()
        if n == -1:  # a long vector
            n = (self.int() << 32) + self.int()
        if kind in self.INTS or kind in self.REALS:
            code, size = ("i", 4) if kind in self.INTS else ("d", 8)
            values: list[Any] = list(struct.unpack_from(f">{n}{code}", self.data, self.pos))
            self.pos += size * n
        elif kind in self.STRINGS or kind in self.LIST:
            values = [self.read() for _ in range(n)]
        else:
            raise ValueError(f"R object type {kind} is not supported")
        if has_attr:
            names = dict(self.read()).get("names")
            if names is not None:
                return dict(zip(names, values, strict=True))
        return values


def read_lazyload(root: Path, name: str = "Rdata") -> dict[str, Any]:
    """Every object of an R package's lazy-load database (``data/Rdata.rdx`` and ``.rdb``),
    read without R: the index maps names to (offset, length) in the database, where each
    object is its serialisation, compressed after a 4-byte length."""
    index_bytes = (root / f"{name}.rdx").read_bytes()
    if index_bytes[:2] == b"\x1f\x8b":
        index_bytes = gzip.decompress(index_bytes)
    else:
        index_bytes = zlib.decompress(index_bytes[4:])
    index = RReader(index_bytes).read()
    database = (root / f"{name}.rdb").read_bytes()
    objects = {}
    for key, (offset, length) in index["variables"].items():
        blob = database[offset + 4 : offset + length]
        if index["compressed"][0] in (2, 3):  # bzip2, xz or none, named by a type byte
            unpack = {b"2": bz2.decompress, b"Z": lzma.decompress}.get(blob[:1], bytes)
            blob = unpack(blob[1:])
        else:
            blob = zlib.decompress(blob)
        objects[key] = RReader(blob).read()
    return objects


AUSTEN_NOVELS = (
    "sensesensibility",
    "prideprejudice",
    "mansfieldpark",
    "emma",
    "northangerabbey",
    "persuasion",
)
HONORIFICS = {"Mr": "Mister", "Mrs": "Missus", "Dr": "Doctor"}


def austen_paragraphs(lines: list[str | None]) -> Iterator[str]:
    """A novel's paragraphs (blank-line separated), its wrapped lines joined; indented lines
    (verse, letters set apart) left out."""
    paragraph: list[str] = []
    for line in [*lines, ""]:
        if line and line.strip():
            if not line.startswith(" "):
                paragraph.append(line.strip())
        elif paragraph:
            yield " ".join(paragraph)
            paragraph = []


def austen_sentences(root: Path = AUSTEN_DIR) -> Iterator[str]:
    """The sentences of Jane Austen's six novels, in publication order: italics marks (_x_)
    dropped, Mr./Mrs./Dr. written out (the engines read them, but ``is_clean`` rejects
    abbreviations), dashes made commas, and only whole sentences (ending in . ! or ?), so
    chapter headings and title lines fall away; sentences with an omitted name ("----")
    are left out."""
    novels = read_lazyload(root)
    for name in AUSTEN_NOVELS:
        for paragraph in austen_paragraphs(novels[name]):
            text = paragraph.replace("_", "")
            text = re.sub(r"-{3,}", "_", text)  # an omitted name ("the ----shire"): left out
            text = re.sub(r"\b(Mrs|Mr|Dr)\b\.?", lambda m: HONORIFICS[m.group(1)], text)
            # "...married.--Miss Taylor", "now,"--said": the dash after punctuation is a gap
            text = re.sub(r"([.!?,;:][\"']*)\s*--+\s*", r"\1 ", text)
            text = re.sub(r"\s*--+\s*", ", ", text)
            for sentence in SENTENCE_END.split(text):
                if "_" not in sentence and re.search(r"[.!?][\"')]*$", sentence):
                    yield sentence


def clean_pairs(raw: Iterable[str]) -> list[tuple[str, str]]:
    """(engine text, transcript) for the clean sentences, deduplicated by transcript."""
    seen: set[str] = set()
    pairs = []
    for sentence in raw:
        sentence = " ".join(sentence.split()).strip("\"' ")
        if not is_clean(sentence):
            continue
        text = normalize(sentence)
        if text not in seen:
            seen.add(text)
            spoken = re.sub(r"[^A-Za-z' ,.;:!?]+", " ", spell_out(sentence))
            pairs.append((" ".join(spoken.split()), text))
    return pairs


class Sentence(NamedTuple):
    """One line of corpus text: what the engine says, the transcript, the source's name."""

    spoken: str
    text: str
    source: str


@dataclass(frozen=True)
class TextSource:
    """A named text source: the Debian packages that carry it (none when generated), the
    path whose absence means it is not installed, and its (engine text, transcript) pairs
    as a function of the corpus seed (found text ignores the seed)."""

    name: str
    apt: tuple[str, ...]
    path: Path | None
    pairs: Callable[[int], list[tuple[str, str]]]

    def missing(self) -> str | None:
        """None when usable, else what is missing."""
        if self.path is None or self.path.exists():
            return None
        return f"{self.path} not found"

    def install_hint(self) -> str:
        return "apt-get install -y --no-install-recommends " + " ".join(self.apt)


TEXT_SOURCES = {
    "fortune": TextSource(
        "fortune",
        ("fortunes", "fortunes-min"),
        FORTUNE_DIR,
        lambda _: clean_pairs(fortune_sentences()),
    ),
    "wordnet": TextSource(
        "wordnet", ("wordnet-base",), WORDNET_DIR, lambda _: clean_pairs(wordnet_sentences())
    ),
    "austen": TextSource(
        "austen", ("r-cran-janeaustenr",), AUSTEN_DIR, lambda _: clean_pairs(austen_sentences())
    ),
    "everyday": TextSource("everyday", (), None, everyday.pairs),
}
DEFAULT_TEXT = ("fortune", "wordnet")


def load_text(names: Iterable[str], seed: int) -> list[Sentence]:
    """The sentences of the named sources, in the order named, each transcript once (the
    first source that has it keeps it). For fortune and wordnet this is exactly the list
    the corpus has always used, so existing corpora keep their plans."""
    seen: set[str] = set()
    out = []
    for name in names:
        for spoken, text in TEXT_SOURCES[name].pairs(seed):
            if text not in seen:
                seen.add(text)
                out.append(Sentence(spoken, text, name))
    return out
