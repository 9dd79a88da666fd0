"""Sentence sources that Debian packages install: fortune databases and WordNet examples."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from training.recipes.textnorm import is_clean, normalize, spell_out

FORTUNE_DIR = Path("/usr/share/games/fortunes")
WORDNET_DIR = Path("/usr/share/wordnet")
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


def load_sentences() -> list[tuple[str, str]]:
    """All clean sentence pairs from the installed sources, in a stable order."""
    return clean_pairs([*fortune_sentences(), *wordnet_sentences()])
