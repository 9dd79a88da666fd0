"""CTC prefix scores against every path of a tiny CTC output, counted one by one."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from asr.ctc_prefix import LOG_ZERO, CTCPrefixScorer
from asr.model import EOS_ID
from asr.tokenizer import BLANK_ID

VOCAB = 5  # blank, eos (never emitted by CTC), and tokens 2, 3, 4


def collapse(path: tuple[int, ...]) -> list[int]:
    out, previous = [], None
    for label in path:
        if label != previous and label != BLANK_ID:
            out.append(label)
        previous = label
    return out


def brute_force(log_probs: np.ndarray, prefix: list[int]) -> tuple[np.ndarray, float]:
    """log P(the frames' labelling starts with prefix + c) for every c, and log P(it is
    exactly prefix), summed over all paths."""
    starts = np.zeros(VOCAB)
    exact = 0.0
    labels = [BLANK_ID, *range(2, VOCAB)]
    for path in itertools.product(labels, repeat=len(log_probs)):
        p = float(np.exp(sum(log_probs[t, k] for t, k in enumerate(path))))
        out = collapse(path)
        if out == prefix:
            exact += p
        if len(out) > len(prefix) and out[: len(prefix)] == prefix:
            starts[out[len(prefix)]] += p
    return starts, exact


def random_log_probs(frames: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(frames, VOCAB)) * 2
    logits[:, EOS_ID] = -30  # CTC never emits end-of-sentence
    return logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)


def expected(log_probs: np.ndarray, prefix: list[int]) -> np.ndarray:
    """log P(the labelling starts with prefix + c) for tokens c = 2.., less the largest, from
    the sums over all paths (-inf where no path has it)."""
    starts = brute_force(log_probs, prefix)[0][2:]
    with np.errstate(divide="ignore"):
        return np.log(starts / starts.max())


def check(found: np.ndarray, log_probs: np.ndarray, prefix: list[int]) -> None:
    tokens = expected(log_probs, prefix)
    possible = np.isfinite(tokens)
    np.testing.assert_allclose(found[2:][possible], tokens[possible], rtol=0, atol=1e-9)
    assert (found[2:][~possible] <= LOG_ZERO / 2).all()
    assert found[BLANK_ID] <= LOG_ZERO / 2  # CTC's blank is no token
    assert found[EOS_ID] == 0.0  # left to attention


@pytest.mark.parametrize("prefix", [[], [2], [3, 3], [2, 4, 2], [4, 4, 4]])
@pytest.mark.parametrize("grown", ["at once", "state by state"])
def test_next_token_scores_are_the_sums_over_all_paths(prefix: list[int], grown: str) -> None:
    frames = 6
    log_probs = random_log_probs(frames, seed=len(prefix))
    scorer = CTCPrefixScorer()
    if grown == "at once":
        scorer.append(log_probs)
    state = scorer.initial()
    for n, token in enumerate(prefix):  # grow the hypothesis as a search would, one state on
        if grown == "state by state":
            scorer.append(log_probs[len(scorer.log_probs) : n + 1])
        scorer.scores(state, n + 1)
        state = scorer.child(state, token)
    if grown == "state by state":
        scorer.append(log_probs[len(scorer.log_probs) :])
    check(scorer.scores(state, frames), log_probs, prefix)


def test_scores_read_only_the_states_up_to_the_horizon() -> None:
    log_probs = random_log_probs(6, seed=7)
    scorer = CTCPrefixScorer()
    scorer.append(log_probs)
    check(scorer.scores(scorer.initial(), 4), log_probs[:4], [])


def test_a_new_segment_scores_from_its_first_state() -> None:
    log_probs = random_log_probs(7, seed=3)
    scorer = CTCPrefixScorer()
    scorer.append(log_probs)
    scorer.drop_before(2)
    check(scorer.scores(scorer.initial(), 5), log_probs[2:], [])


def test_a_hypothesis_ctc_finds_impossible_leaves_the_choice_to_attention() -> None:
    """Two tokens after one state: CTC prefers no next token to another."""
    scorer = CTCPrefixScorer()
    scorer.append(random_log_probs(1, seed=5))
    state = scorer.child(scorer.initial(), 2)
    state = scorer.child(state, 3)
    found = scorer.scores(state, 1)
    np.testing.assert_array_equal(found[1:], np.zeros(VOCAB - 1))
