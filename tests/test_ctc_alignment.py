"""CTC forced alignment against exhaustive search, and the CTC-synchronous loss it feeds."""

from __future__ import annotations

import itertools

import pytest
import torch

from asr.config import ModelConfig
from asr.ctc_alignment import ctc_token_positions
from asr.model import Seq2Seq


def brute_force_positions(log_probs: torch.Tensor, target: list[int]) -> list[int]:
    """First frame of each token on the best of all label paths that collapse to ``target``."""
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
        return [-1] * len(target)
    return [t for t, c in enumerate(best_path) if c != 0 and (t == 0 or best_path[t - 1] != c)]


def test_positions_equal_exhaustive_search_in_a_padded_batch() -> None:
    generator = torch.Generator().manual_seed(0)
    cases = []
    for _ in range(30):
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
    positions = ctc_token_positions(
        padded,
        torch.tensor([lp.shape[0] for lp, _ in cases]),
        targets,
        torch.tensor([len(t) for _, t in cases]),
    )
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
