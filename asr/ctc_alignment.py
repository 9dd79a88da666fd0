"""CTC forced alignment: the encoder state at which each reference token fires.

Soft monotonic attention explores only forward from its pointer, so early in
training it can sit in leading silence and never find the speech (see
"CTC-synchronous training", Inaguma et al., 2020). The CTC head learns where
tokens are much sooner; its Viterbi alignment tells the attention where each
token's boundary is (``Seq2Seq.compute_loss`` turns that into a loss). Serving
never uses it (it is the plain hard monotonic scan); besides training, only
bench/word_latency.py does, to time word ends from each token's last frame.
"""

from __future__ import annotations

import torch
from torch import Tensor


def ctc_token_positions(
    log_probs: Tensor, lengths: Tensor, targets: Tensor, target_lens: Tensor, blank: int = 0
) -> Tensor:
    """Best CTC path's first frame for every target token: [B, U] long, -1 where unalignable.

    ``log_probs`` [B, T, V] log-softmax outputs, ``lengths`` [B] valid frames,
    ``targets`` [B, U] padded token ids, ``target_lens`` [B]. An utterance with
    too few frames for its tokens (the CTC loss is infinite) gets -1 everywhere.
    """
    token, feasible = _best_path_tokens(log_probs, lengths, targets, target_lens, blank)
    return _token_frames(token, feasible, targets.shape[1], "amin")


def ctc_token_spans(
    log_probs: Tensor, lengths: Tensor, targets: Tensor, target_lens: Tensor, blank: int = 0
) -> tuple[Tensor, Tensor]:
    """First and last frame of every target token on the best CTC path, each [B, U] long
    (-1 where unalignable; arguments as :func:`ctc_token_positions`, whose first frames these
    are). The last frame is where a token's evidence ends: word-end timing reads it."""
    token, feasible = _best_path_tokens(log_probs, lengths, targets, target_lens, blank)
    units = targets.shape[1]
    return (
        _token_frames(token, feasible, units, "amin"),
        _token_frames(token, feasible, units, "amax"),
    )


@torch.no_grad()
def _best_path_tokens(
    log_probs: Tensor, lengths: Tensor, targets: Tensor, target_lens: Tensor, blank: int
) -> tuple[Tensor, Tensor]:
    """Viterbi: the target index each frame of the best path is on ([B, T] long; U for blanks
    and padding frames), and which utterances have any path at all ([B] bool)."""
    batch, frames, _ = log_probs.shape
    units = targets.shape[1]
    states = 2 * units + 1
    device = log_probs.device
    # The extended label sequence: blank, y1, blank, y2, ..., blank.
    labels = torch.full((batch, states), blank, dtype=torch.long, device=device)
    labels[:, 1::2] = targets
    state_ids = torch.arange(states, device=device)
    last = (2 * target_lens).unsqueeze(1)  # index of the final blank
    in_range = state_ids.unsqueeze(0) <= last
    # A skip from s-2 to s is allowed into a token that differs from the token two back.
    skip = torch.zeros(batch, states, dtype=torch.bool, device=device)
    skip[:, 2:] = (labels[:, 2:] != blank) & (labels[:, 2:] != labels[:, :-2])

    emit = log_probs.gather(2, labels.unsqueeze(1).expand(batch, frames, states))
    neg = torch.tensor(-torch.inf, device=device)
    score = torch.full((batch, states), -torch.inf, device=device)
    score[:, 0] = emit[:, 0, 0]
    score[:, 1] = torch.where(target_lens > 0, emit[:, 0, 1], neg)
    score = torch.where(in_range, score, neg)
    back = torch.zeros(frames, batch, states, dtype=torch.uint8, device=device)
    for t in range(1, frames):
        stay = score
        step = torch.cat([score.new_full((batch, 1), -torch.inf), score[:, :-1]], dim=1)
        jump = torch.cat([score.new_full((batch, 2), -torch.inf), score[:, :-2]], dim=1)
        jump = torch.where(skip, jump, neg)
        best, choice = torch.stack([stay, step, jump]).max(0)
        new = torch.where(in_range, best + emit[:, t], neg)
        active = (t < lengths).unsqueeze(1)
        score = torch.where(active, new, score)
        back[t] = torch.where(active, choice, torch.zeros_like(choice)).to(torch.uint8)

    rows = torch.arange(batch, device=device)
    final_blank = score[rows, last.squeeze(1)]
    final_token = score[rows, (last.squeeze(1) - 1).clamp(min=0)]
    state = torch.where(final_token > final_blank, last.squeeze(1) - 1, last.squeeze(1))
    feasible = torch.isfinite(torch.maximum(final_blank, final_token))
    path = torch.empty(frames, batch, dtype=torch.long, device=device)
    for t in range(frames - 1, -1, -1):
        path[t] = state
        state = state - back[t, rows, state].long()

    frame_ids = torch.arange(frames, device=device)
    is_token = (path % 2 == 1) & (frame_ids.unsqueeze(1) < lengths)  # [T, B]
    return torch.where(is_token, (path - 1) // 2, units).T, feasible


def _token_frames(token: Tensor, feasible: Tensor, units: int, reduce: str) -> Tensor:
    """Per target token, the smallest ("amin") or largest ("amax") frame the path spends on it:
    [B, U], -1 for tokens the path never visits and for infeasible utterances."""
    batch, frames = token.shape
    missing = frames if reduce == "amin" else -1  # the identity of the reduction
    found = torch.full((batch, units + 1), missing, dtype=torch.long, device=token.device)
    frame_ids = torch.arange(frames, device=token.device).expand(batch, frames)
    found.scatter_reduce_(1, token, frame_ids, reduce=reduce)  # blanks land in the spare column
    positions = found[:, :units]
    unaligned = (positions == missing) | ~feasible.unsqueeze(1)
    return positions.masked_fill(unaligned, -1)
