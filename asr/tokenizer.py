"""Output units: sentencepiece pieces for words, or a plain symbol list for phones and characters.

Every tokenizer shares the id layout the model relies on: 0 ``<blank>``
(padding and CTC blank), 1 ``<eos>`` (also the decoder's start symbol),
2 ``<unk>``, and real units from 3 on. ``encode`` only lowercases; corpus
recipes do the rest of the text normalisation before training.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

BLANK_ID = 0
EOS_ID = 1
UNK_ID = 2
SPECIALS = ("<blank>", "<eos>", "<unk>")


class Tokenizer(ABC):
    """Text <-> ids with the shared special-id layout."""

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; blank and eos are dropped so raw decoder output can be passed in."""

    @abstractmethod
    def pieces(self, ids: Iterable[int]) -> list[str]:
        """The unit string of every id (specials included), for display and alignment plots."""

    def _content_ids(self, ids: Iterable[int]) -> list[int]:
        return [i for i in self._check_ids(ids) if i not in (BLANK_ID, EOS_ID)]

    def _check_ids(self, ids: Iterable[int]) -> list[int]:
        try:
            checked = [int(i) for i in ids]
        except (TypeError, ValueError):
            raise ValueError(f"token ids must be integers, got {ids!r}") from None
        bad = [i for i in checked if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(
                f"token ids {bad[:5]} are outside the vocabulary 0..{self.vocab_size - 1}"
            )
        return checked

    @staticmethod
    def _check_text(text: object) -> str:
        if not isinstance(text, str):
            raise ValueError(f"text to encode must be a str, got {type(text).__name__}")
        return text.lower()


class SentencePieceTokenizer(Tokenizer):
    """A sentencepiece model trained with the project's special ids."""

    def __init__(self, model_file: str | Path) -> None:
        self.path = Path(model_file)
        if not self.path.is_file():
            raise ValueError(f"{self.path}: no such sentencepiece model")
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.load(str(self.path))
        except (OSError, RuntimeError) as err:
            raise ValueError(f"{self.path}: not a sentencepiece model ({err})") from None
        found = tuple(self._sp.id_to_piece(i) for i in range(min(3, self._sp.get_piece_size())))
        if found != SPECIALS:
            raise ValueError(f"{self.path}: ids 0-2 are {found}, expected {SPECIALS}")

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        model_prefix: str | Path,
        vocab_size: int,
        model_type: str = "unigram",
    ) -> SentencePieceTokenizer:
        """Train on ``texts`` (lowercased), write ``model_prefix``.model/.vocab and load it.

        ``vocab_size`` is an upper bound: a small corpus yields fewer pieces
        instead of failing.
        """
        if model_type not in ("unigram", "bpe"):
            raise ValueError(f"model_type must be 'unigram' or 'bpe', got {model_type!r}")
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 3:
            raise ValueError(f"vocab_size must be an integer above 3, got {vocab_size!r}")
        lines = [cls._check_text(t).strip() for t in texts]
        lines = [line for line in lines if line]
        if not lines:
            raise ValueError("cannot train a sentencepiece model on no text")
        prefix = Path(model_prefix)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(lines),
                model_prefix=str(prefix),
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=1.0,
                hard_vocab_limit=False,
                pad_id=BLANK_ID,
                pad_piece=SPECIALS[BLANK_ID],
                eos_id=EOS_ID,
                eos_piece=SPECIALS[EOS_ID],
                unk_id=UNK_ID,
                unk_piece=SPECIALS[UNK_ID],
                bos_id=-1,
                minloglevel=2,
            )
        except RuntimeError as err:
            raise ValueError(f"sentencepiece training failed: {err}") from None
        return cls(prefix.with_name(prefix.name + ".model"))

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(self._check_text(text), out_type=int)

    def decode(self, ids: Iterable[int]) -> str:
        # a bare "▁" piece (a space with no word yet) must not leave a space at either end
        return " ".join(self._sp.decode(self._content_ids(ids)).split())

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self._sp.id_to_piece(i) for i in self._check_ids(ids)]


class SymbolTokenizer(Tokenizer):
    """Whitespace-separated symbols (phones, characters) from a list; specials are implicit."""

    def __init__(self, symbols: Sequence[str]) -> None:
        symbols = list(symbols)
        for symbol in symbols:
            if not isinstance(symbol, str) or not symbol or symbol.split() != [symbol]:
                raise ValueError(f"symbol {symbol!r} must be a non-empty string without whitespace")
            if symbol != symbol.lower():
                raise ValueError(f"symbol {symbol!r} must be lowercase: encode() lowercases text")
            if symbol in SPECIALS:
                raise ValueError(
                    f"symbol list must not contain {symbol!r}: the specials are implicit"
                )
        if len(set(symbols)) != len(symbols):
            repeated = sorted({s for s in symbols if symbols.count(s) > 1})
            raise ValueError(f"symbol list repeats {repeated}")
        if not symbols:
            raise ValueError("symbol list is empty")
        self.symbols = [*SPECIALS, *symbols]
        self._ids = {symbol: i for i, symbol in enumerate(self.symbols)}

    @classmethod
    def build(cls, texts: Iterable[str]) -> SymbolTokenizer:
        """The sorted set of symbols seen in ``texts`` (lowercased, as :meth:`encode` sees them)."""
        return cls(sorted({s for text in texts for s in cls._check_text(text).split()}))

    @classmethod
    def load(cls, path: str | Path) -> SymbolTokenizer:
        """One symbol per line; blank lines are skipped."""
        try:
            lines = Path(path).read_text().splitlines()
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: cannot read symbol list: {err}") from None
        try:
            return cls([line.strip() for line in lines if line.strip()])
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text("".join(f"{s}\n" for s in self.symbols[len(SPECIALS) :]))

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(s, UNK_ID) for s in self._check_text(text).split()]

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.symbols[i] for i in self._content_ids(ids))

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.symbols[i] for i in self._check_ids(ids)]


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Open a tokenizer file by its suffix: ``.model`` sentencepiece, ``.txt`` symbol list."""
    path = Path(path)
    if path.suffix == ".model":
        return SentencePieceTokenizer(path)
    if path.suffix == ".txt":
        return SymbolTokenizer.load(path)
    raise ValueError(f"{path}: unknown tokenizer file type; expected .model or .txt")
