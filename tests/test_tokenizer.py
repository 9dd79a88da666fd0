"""Tokenizers: shared special ids, round trips, symbol lists, file loading and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import sentencepiece as spm

from asr.tokenizer import (
    BLANK_ID,
    EOS_ID,
    SPECIALS,
    UNK_ID,
    SentencePieceTokenizer,
    SymbolTokenizer,
    load_tokenizer,
)

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "she had your dark suit in greasy wash water all year",
    "don't ask me to carry an oily rag like that",
    "a streaming recognizer emits tokens as soon as it can",
    "monotonic attention moves from left to right",
] * 4

PHONES = ["sil dh ax k w ih k sil", "b r aw n f aa k s", "sil sh iy hh ae d sil"]


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def sentencepiece(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    prefix = tmp_path_factory.mktemp("spm") / "sub" / "tok"
    return SentencePieceTokenizer.train(CORPUS, prefix, vocab_size=60, model_type=request.param)


def test_sentencepiece_layout_and_files(sentencepiece: SentencePieceTokenizer) -> None:
    assert sentencepiece.pieces([BLANK_ID, EOS_ID, UNK_ID]) == list(SPECIALS)
    assert 30 < sentencepiece.vocab_size <= 60
    assert sentencepiece.path.name == "tok.model"
    assert sentencepiece.path.with_suffix(".vocab").is_file()


def test_sentencepiece_round_trip(sentencepiece: SentencePieceTokenizer) -> None:
    for text in set(CORPUS) | {"the dog jumps to the left"}:
        ids = sentencepiece.encode(text)
        assert min(ids) >= 3
        assert sentencepiece.decode(ids) == text
        assert "".join(sentencepiece.pieces(ids)).replace("\u2581", " ").strip() == text
    ids = sentencepiece.encode("The Quick FOX")
    assert ids == sentencepiece.encode("the quick fox")
    assert sentencepiece.decode([EOS_ID, *ids, EOS_ID, BLANK_ID, BLANK_ID]) == "the quick fox"


def test_sentencepiece_unknown_characters_map_to_unk(sentencepiece: SentencePieceTokenizer) -> None:
    assert UNK_ID in sentencepiece.encode("the fox ate 42 €")


def test_sentencepiece_load_and_load_tokenizer(sentencepiece: SentencePieceTokenizer) -> None:
    again = load_tokenizer(sentencepiece.path)
    assert isinstance(again, SentencePieceTokenizer)
    assert again.encode(CORPUS[0]) == sentencepiece.encode(CORPUS[0])


def test_sentencepiece_rejects_foreign_models_and_bad_files(tmp_path: Path) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_prefix=str(tmp_path / "plain"), vocab_size=40,
        hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"plain\.model: ids 0-2 are"):
        SentencePieceTokenizer(tmp_path / "plain.model")
    (tmp_path / "junk.model").write_bytes(b"junk")
    with pytest.raises(ValueError, match=r"junk\.model: not a sentencepiece model"):
        SentencePieceTokenizer(tmp_path / "junk.model")
    with pytest.raises(ValueError, match=r"none\.model: no such"):
        load_tokenizer(tmp_path / "none.model")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"texts": CORPUS, "vocab_size": 60, "model_type": "word"}, "model_type"),
        ({"texts": CORPUS, "vocab_size": 3}, "vocab_size"),
        ({"texts": CORPUS, "vocab_size": 60.0}, "vocab_size"),
        ({"texts": ["", "  "], "vocab_size": 60}, "no text"),
        ({"texts": [b"bytes"], "vocab_size": 60}, "must be a str"),
        ({"texts": CORPUS, "vocab_size": 10}, "training failed: .*Vocabulary size"),
    ],
)
def test_sentencepiece_train_rejects(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SentencePieceTokenizer.train(model_prefix=tmp_path / "t", **kwargs)


def test_sentencepiece_rejects_bad_ids_and_text(sentencepiece: SentencePieceTokenizer) -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        sentencepiece.decode([3, sentencepiece.vocab_size])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        sentencepiece.pieces([-1])
    with pytest.raises(ValueError, match="must be a str"):
        sentencepiece.encode(None)  # type: ignore[arg-type]


def test_symbol_tokenizer_build_encode_decode() -> None:
    tok = SymbolTokenizer.build(PHONES)
    assert tok.symbols[:3] == list(SPECIALS)
    assert tok.symbols[3:] == sorted({p for line in PHONES for p in line.split()})
    assert tok.vocab_size == 3 + len(tok.symbols[3:])
    ids = tok.encode("sil  B r\taw sil")
    assert ids == [tok.symbols.index(s) for s in ["sil", "b", "r", "aw", "sil"]]
    assert tok.decode([EOS_ID, *ids, EOS_ID, BLANK_ID]) == "sil b r aw sil"
    assert tok.encode("sil zz") == [tok.symbols.index("sil"), UNK_ID]
    assert tok.decode(tok.encode("sil zz")) == "sil <unk>"
    assert tok.pieces([0, 1, 2, ids[1]]) == [*SPECIALS, "b"]
    for line in PHONES:
        assert tok.decode(tok.encode(line)) == line


def test_symbol_tokenizer_save_load(tmp_path: Path) -> None:
    tok = SymbolTokenizer.build(PHONES)
    tok.save(tmp_path / "phones.txt")
    lines = (tmp_path / "phones.txt").read_text().splitlines()
    assert lines == tok.symbols[3:]
    (tmp_path / "phones.txt").write_text("\n".join(lines) + "\n\n")
    again = load_tokenizer(tmp_path / "phones.txt")
    assert isinstance(again, SymbolTokenizer) and again.symbols == tok.symbols


@pytest.mark.parametrize(
    ("symbols", "message"),
    [
        (["aa", "b", "aa"], r"repeats \['aa'\]"),
        (["aa", "<unk>"], "specials are implicit"),
        (["a a"], "without whitespace"),
        ([""], "without whitespace"),
        (["AA"], "lowercase"),
        ([], "empty"),
    ],
)
def test_symbol_tokenizer_rejects_bad_lists(symbols: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SymbolTokenizer(symbols)


def test_symbol_tokenizer_rejects_bad_ids_and_files(tmp_path: Path) -> None:
    tok = SymbolTokenizer(["aa", "b"])
    with pytest.raises(ValueError, match=r"token ids \[5\] are outside the vocabulary 0\.\.4"):
        tok.decode([3, 5])
    (tmp_path / "dup.txt").write_text("aa\nb\naa\n")
    with pytest.raises(ValueError, match=r"dup\.txt: symbol list repeats"):
        load_tokenizer(tmp_path / "dup.txt")
    with pytest.raises(ValueError, match="token ids must be integers"):
        tok.pieces(["aa"])
    with pytest.raises(ValueError, match="cannot read symbol list"):
        SymbolTokenizer.load(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match=r"x\.json: unknown tokenizer file type"):
        load_tokenizer(tmp_path / "x.json")
