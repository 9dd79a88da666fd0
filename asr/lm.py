"""A token n-gram language model for shallow fusion: text-only knowledge of spelling and wording.

The acoustic model spells what it hears piece by piece; words it heard a few times in
training come out misspelt ("restrunc" for "restaurant"). Text is far cheaper than
speech, so an n-gram model over the same sentencepiece tokens, trained on any amount
of text, adds ``decode.lm_weight`` times its log-probabilities to the decoder's in the
beam search. It is over the model's own token ids, so no lexicon or word boundary
handling is needed, and it predicts end-of-sentence, which helps endpointing.

Smoothing is interpolated Kneser-Ney (one absolute discount per order, estimated from
the counts of counts), the usual choice for small n-gram models. The model is stored
as ``lm.npz`` in a model bundle: plain arrays, no pickled objects.
"""

from __future__ import annotations

import zipfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from asr.tokenizer import BLANK_ID, EOS_ID

LM_FILE = "lm.npz"
_CACHE_SIZE = 200_000  # distributions kept per model (a few hundred bytes... a kilobyte each)


class TokenLM:
    """Interpolated Kneser-Ney n-gram model over token ids (see module docstring).

    For each order k >= 2 and each context h of k-1 tokens seen in training it keeps
    the discounted probabilities of the tokens seen after h (``alpha``) and the mass
    left for the order below (``gamma``). Sentence starts are contexts padded with
    end-of-sentence ids.
    """

    def __init__(
        self,
        vocab_size: int,
        unigram: np.ndarray,
        orders: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    ) -> None:
        self.vocab_size = vocab_size
        self.order = len(orders) + 1
        if vocab_size ** max(self.order - 1, 1) >= 2**63:
            raise ValueError(
                f"a {self.order}-gram over {vocab_size} tokens has more contexts than 64-bit "
                "keys can number: use a lower order"
            )
        self._unigram = unigram.astype(np.float64)
        self._orders = []
        for contexts, offsets, nexts, alphas, gammas in orders:
            # contexts as sorted 64-bit keys (a few bytes each; a dict of tuples would hold
            # hundreds of MB in every server process)
            keys = _context_keys(contexts, vocab_size)
            rows = np.argsort(keys, kind="stable")
            index = (keys[rows], rows, contexts)
            self._orders.append((index, offsets, nexts, alphas, gammas))
        self._cache: dict[tuple[int, ...], np.ndarray] = {}

    # -- training -------------------------------------------------------------------
    @classmethod
    def train(cls, sequences: Iterable[Sequence[int]], vocab_size: int, order: int) -> TokenLM:
        """Count n-grams of token-id sequences (no end-of-sentence: it is added)."""
        if order < 1:
            raise ValueError(f"n-gram order must be >= 1, got {order}")
        top: dict[tuple[int, ...], Counter[int]] = defaultdict(Counter)
        sentences = 0
        for seq in sequences:
            ids = list(seq)
            bad = [i for i in ids if not 0 <= i < vocab_size or i in (BLANK_ID, EOS_ID)]
            if bad:
                raise ValueError(
                    f"token id {bad[0]} is not a content token of a {vocab_size}-token vocabulary"
                )
            padded = [EOS_ID] * (order - 1) + ids + [EOS_ID]
            for t in range(order - 1, len(padded)):
                top[tuple(padded[t - order + 1 : t])][padded[t]] += 1
            sentences += 1
        if not sentences:
            raise ValueError("no text to train the language model on")
        # counts[k] maps a context of k tokens to the counts of the next token: raw counts
        # at the highest order, continuation counts (distinct left neighbours) below it.
        counts: list[dict[tuple[int, ...], Counter[int]]] = [dict() for _ in range(order)]
        counts[order - 1] = top
        for k in range(order - 2, -1, -1):
            lower: dict[tuple[int, ...], Counter[int]] = defaultdict(Counter)
            for context, nexts in counts[k + 1].items():
                for token in nexts:
                    lower[context[1:]][token] += 1
            counts[k] = lower

        tables = [_discounted(counts[k], k) for k in range(order)]
        # The unigram's one context (the empty one) leaves its mass to a uniform distribution.
        _, _, nexts, alphas, gammas = tables[0]
        unigram = np.full(vocab_size, float(gammas[0]) / (vocab_size - 1))  # every id but blank
        unigram[BLANK_ID] = 0.0
        unigram[nexts] += alphas
        return cls(vocab_size, unigram, tables[1:])

    # -- queries ------------------------------------------------------------------
    def log_probs(self, history: Sequence[int]) -> np.ndarray:
        """log P(next token | the tokens of the sentence so far), over the whole vocabulary
        (float32; the cached array itself, so read-only to callers)."""
        context = tuple([EOS_ID] * (self.order - 1) + list(history))[len(history) :]
        cached = self._cache.get(context)
        if cached is not None:
            return cached
        probs = self._unigram.copy()
        for k, (index, offsets, nexts, alphas, gammas) in enumerate(self._orders, start=1):
            row = _find(index, context[len(context) - k :], self.vocab_size)
            if row is None:  # a longer context containing this one is unseen as well
                break
            lo, hi = offsets[row], offsets[row + 1]
            probs *= gammas[row]
            probs[nexts[lo:hi]] += alphas[lo:hi]
        with np.errstate(divide="ignore"):
            result = np.log(probs).astype(np.float32)
        if len(self._cache) >= _CACHE_SIZE:
            self._cache.clear()
        self._cache[context] = result
        return result

    def score(self, sequence: Sequence[int]) -> float:
        """Natural-log probability of a whole sentence, end-of-sentence included."""
        ids = list(sequence)
        return sum(float(self.log_probs(ids[:t])[token]) for t, token in enumerate(ids + [EOS_ID]))

    # -- storage ------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        arrays: dict[str, np.ndarray] = {
            "vocab_size": np.asarray(self.vocab_size),
            "unigram": self._unigram.astype(np.float32),
        }
        for k, (index, offsets, nexts, alphas, gammas) in enumerate(self._orders, start=1):
            arrays[f"contexts{k}"] = index[2].astype(np.int32).reshape(-1, k)
            arrays[f"offsets{k}"] = offsets
            arrays[f"nexts{k}"] = nexts
            arrays[f"alphas{k}"] = alphas
            arrays[f"gammas{k}"] = gammas
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(tmp, **arrays)
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> TokenLM:
        try:
            with np.load(path, allow_pickle=False) as data:
                vocab_size = int(data["vocab_size"])
                unigram = data["unigram"]
                orders = []
                k = 1
                while f"contexts{k}" in data:
                    orders.append(
                        tuple(
                            data[f"{name}{k}"]
                            for name in ("contexts", "offsets", "nexts", "alphas", "gammas")
                        )
                    )
                    k += 1
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as err:
            raise ValueError(f"{path}: not a token language model ({err})") from None
        if unigram.shape != (vocab_size,):
            raise ValueError(
                f"{path}: unigram table has shape {unigram.shape}, expected ({vocab_size},)"
            )
        return cls(vocab_size, unigram, orders)  # type: ignore[arg-type]


def _context_keys(contexts: np.ndarray, vocab_size: int) -> np.ndarray:
    """Each context (a row of token ids) as one integer: its ids as digits base vocab_size."""
    keys = np.zeros(len(contexts), dtype=np.int64)
    for column in np.asarray(contexts, dtype=np.int64).reshape(len(contexts), -1).T:
        keys = keys * vocab_size + column
    return keys


def _find(
    index: tuple[np.ndarray, np.ndarray, np.ndarray], context: Sequence[int], vocab_size: int
) -> int | None:
    """The row of ``context`` in an order's table (None: not seen in training)."""
    keys, rows, _ = index
    key = _context_keys(np.asarray([context]), vocab_size)[0]
    at = int(np.searchsorted(keys, key))
    return int(rows[at]) if at < len(keys) and keys[at] == key else None


def _discount(counts: dict[tuple[int, ...], Counter[int]]) -> float:
    """Absolute discount n1 / (n1 + 2 n2) from how many n-grams were seen once and twice."""
    n1 = n2 = 0
    for following in counts.values():
        for c in following.values():
            n1 += c == 1
            n2 += c == 2
    return n1 / (n1 + 2 * n2) if n1 + n2 else 0.5


def _discounted(
    counts: dict[tuple[int, ...], Counter[int]], k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One order's table: its contexts of ``k`` tokens [M, k], and per context (rows
    offsets[i]:offsets[i + 1]) the tokens seen after it with their discounted probabilities,
    and the mass it leaves to the order below."""
    discount = _discount(counts)
    contexts, offsets, nexts, alphas, gammas = [], [0], [], [], []
    for context, following in counts.items():
        total = sum(following.values())
        contexts.append(context)
        tokens = sorted(following)
        nexts.extend(tokens)
        alphas.extend(max(following[t] - discount, 0.0) / total for t in tokens)
        gammas.append(discount * len(tokens) / total)
        offsets.append(len(nexts))
    return (
        np.asarray(contexts, dtype=np.int32).reshape(len(contexts), k),
        np.asarray(offsets, dtype=np.int64),
        np.asarray(nexts, dtype=np.int32),
        np.asarray(alphas, dtype=np.float64 if k == 0 else np.float32),
        np.asarray(gammas, dtype=np.float32),
    )
