"""CTC forced alignment against exhaustive search, and the CTC-synchronous loss it feeds."""

from __future__ import annotations

import itertools

import pytest
import torch

from asr.config import ModelConfig
from asr.ctc_alignment import ctc_token_positions, ctc_token_spans
from asr.model import Seq2Seq


def brute_force_spans(log_probs: torch.Tensor, target: list[int]) -> tuple[list[int], list[int]]:
    """First and last frame of each token on the best of all label paths that collapse to
    ``target``."""
    frames, vocab = log_probs.shape
    best, best_path = -float("inf"), None
    for path in itertools.product(range(vocab), repeat=frames):
        collapsed = [c for i, c in enumerate(path) if c != 0 and (i == 0 or path[i - 1] != c)]
        if collapsed != target:
            continue
        score = float(sum(log_probs[t, c] for t, c in enumerate(path)))
        if score > best:
            best, best_path = score, path
    if best_path is None:
        return [-1] * len(target), [-1] * len(target)
    p = best_path
    first = [t for t, c in enumerate(p) if c != 0 and (t == 0 or p[t - 1] != c)]
    last = [t for t, c in enumerate(p) if c != 0 and (t == frames - 1 or p[t + 1] != c)]
    return first, last


def brute_force_positions(log_probs: torch.Tensor, target: list[int]) -> list[int]:
    """First frame of each token on the best of all label paths that collapse to ``target``."""
    return brute_force_spans(log_probs, target)[0]


def random_padded_batch(
    count: int,
) -> tuple[list[tuple[torch.Tensor, list[int]]], tuple[torch.Tensor, ...]]:
    """``count`` small random cases (repeated tokens and unalignable ones included) and the
    padded batch of them: log-probs, lengths, targets, target lengths."""
    generator = torch.Generator().manual_seed(0)
    cases = []
    for _ in range(count):
        frames = int(torch.randint(1, 7, (1,), generator=generator))
        units = int(torch.randint(1, 4, (1,), generator=generator))
        target = torch.randint(1, 4, (units,), generator=generator).tolist()  # repeats included
        log_probs = (torch.randn(frames, 4, generator=generator) * 2).log_softmax(-1)
        cases.append((log_probs, target))
    max_frames = max(lp.shape[0] for lp, _ in cases)
    max_units = max(len(t) for _, t in cases)
    padded = torch.zeros(len(cases), max_frames, 4)
    targets = torch.zeros(len(cases), max_units, dtype=torch.long)
    for b, (lp, target) in enumerate(cases):
        padded[b, : lp.shape[0]] = lp
        targets[b, : len(target)] = torch.tensor(target)
    lengths = torch.tensor([lp.shape[0] for lp, _ in cases])
    target_lens = torch.tensor([len(t) for _, t in cases])
    return cases, (padded, lengths, targets, target_lens)


def test_spans_equal_exhaustive_search_and_first_frames_equal_positions() -> None:
    cases, batch = random_padded_batch(30)
    first, last = ctc_token_spans(*batch)
    assert torch.equal(first, ctc_token_positions(*batch))
    held = 0
    for b, (lp, target) in enumerate(cases):
        expected_first, expected_last = brute_force_spans(lp, target)
        assert last[b, : len(target)].tolist() == expected_last, (lp, target)
        assert first[b, : len(target)].tolist() == expected_first, (lp, target)
        assert (last[b, len(target) :] == -1).all()
        held += sum(f != e for f, e in zip(expected_first, expected_last))
    assert held > 0  # some token was held for more than one frame: last != first was exercised


def peaked(best: list[int], vocab: int = 4) -> torch.Tensor:
    """Log-probs [1, T, vocab] where frame t gives ``best[t]`` 0.94 and every other unit 0.02."""
    probs = torch.full((len(best), vocab), 0.02)
    probs[torch.arange(len(best)), best] = 0.94
    return probs.log().unsqueeze(0)


@pytest.mark.parametrize(
    ("best", "target", "first", "last"),
    [
        ([0, 1, 1, 1, 0, 2, 0], [1, 2], [1, 5], [3, 5]),  # held three frames, then blank
        ([1, 1, 0, 1, 1, 1, 0], [1, 1], [0, 3], [1, 5]),  # a repeat: two runs, two spans
        ([0, 0, 2, 2, 2, 2, 2], [2], [2], [6]),  # held to the last frame
    ],
)
def test_spans_of_hand_made_alignments(
    best: list[int], target: list[int], first: list[int], last: list[int]
) -> None:
    args = (peaked(best), torch.tensor([len(best)]), torch.tensor([target]))
    spans = ctc_token_spans(*args, torch.tensor([len(target)]))
    assert [t.tolist() for t in spans] == [[first], [last]]
    assert ctc_token_positions(*args, torch.tensor([len(target)])).tolist() == [first]


def test_too_few_frames_leave_every_token_unaligned() -> None:
    spans = ctc_token_spans(
        peaked([1, 1]), torch.tensor([2]), torch.tensor([[1, 1]]), torch.tensor([2])
    )
    assert [t.tolist() for t in spans] == [[[-1, -1]], [[-1, -1]]]


def test_positions_equal_exhaustive_search_in_a_padded_batch() -> None:
    cases, batch = random_padded_batch(30)
    positions = ctc_token_positions(*batch)
    impossible = 0
    for b, (lp, target) in enumerate(cases):
        expected = brute_force_positions(lp, target)
        impossible += expected[0] == -1
        assert positions[b, : len(target)].tolist() == expected, (lp, target)
        assert (positions[b, len(target) :] == -1).all()
    assert 0 < impossible < len(cases)  # both kinds of case were exercised


def alignment_rows(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows).unsqueeze(0)


@pytest.fixture
def model() -> Seq2Seq:
    return Seq2Seq(ModelConfig(ctc_weight=0.5, alignment_weight=1.0, alignment_window=0), 8)


def test_loss_is_zero_for_the_alignment_hard_decoding_wants(model: Seq2Seq) -> None:
    """Each token's mass on its CTC frame, and nothing for the end-of-sentence step."""
    positions = torch.tensor([[1, 3]])
    perfect = alignment_rows([[0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]])
    assert float(model._alignment_loss(perfect, positions, torch.tensor([2]))) == pytest.approx(
        0, abs=1e-5
    )
    early = alignment_rows([[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]])  # token 1 fires too soon
    assert float(model._alignment_loss(early, positions, torch.tensor([2]))) > 10
    late_eos = alignment_rows([[0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0.5]])
    loss = float(model._alignment_loss(late_eos, positions, torch.tensor([2])))
    assert loss == pytest.approx(-torch.log(torch.tensor(0.5)).item(), rel=1e-5)


def test_unalignable_utterances_add_nothing(model: Seq2Seq) -> None:
    anything = alignment_rows([[1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]])
    loss = model._alignment_loss(anything, torch.tensor([[-1, -1]]), torch.tensor([2]))
    assert float(loss) == 0


def test_alignment_loss_needs_the_ctc_head() -> None:
    with pytest.raises(ValueError, match="ctc_weight"):
        Seq2Seq(ModelConfig(alignment_weight=1.0), 8)


def test_every_utterance_of_a_padded_batch_gets_its_end_term(model: Seq2Seq) -> None:
    """The shorter utterance's padded token slot must not switch its end-of-sentence term off."""
    long = [[0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]]
    short = [[0, 0, 1, 0], [0, 0, 0, 0.25], [0, 0, 0, 0]]  # its EOS step (row 1) keeps 0.25
    loss = model._alignment_loss(
        torch.tensor([long, short]), torch.tensor([[1, 3], [2, -1]]), torch.tensor([2, 1])
    )
    assert float(loss) == pytest.approx(-torch.log(torch.tensor(0.75)).item(), rel=1e-5)


def test_delayed_boundaries_move_later_and_stay_inside_the_utterance() -> None:
    """alignment_delay trains each boundary that many states after its CTC spike, clamped
    to the utterance's last state; unaligned tokens stay unaligned."""
    delayed = Seq2Seq(
        ModelConfig(ctc_weight=0.5, alignment_weight=1.0, alignment_window=0, alignment_delay=2),
        8,
    )
    positions = torch.tensor([[0, 3, -1], [1, 2, 4]])
    targets = delayed._delayed(positions, torch.tensor([5, 7]))
    assert targets.tolist() == [[2, 4, -1], [3, 4, 6]]
    # The alignment the delayed model is trained towards costs nothing under its loss.
    on_target = alignment_rows([[0, 0, 1, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]])
    loss = delayed._alignment_loss(on_target, targets[:1, :2], torch.tensor([2]))
    assert float(loss) == pytest.approx(0, abs=1e-5)
    with pytest.raises(ValueError, match="alignment_delay"):
        Seq2Seq(ModelConfig(ctc_weight=0.5, alignment_weight=1.0, alignment_delay=-1), 8)
