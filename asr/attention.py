"""Attention between decoder and encoder: monotonic (Raffel et al., 2017), MoChA, softmax.

Training uses the *soft* forms (expected alignments over whole padded
batches); inference uses the *hard* forms, which only ever look at encoder
states from a persistent pointer onward and so can run online.

The soft monotonic alignment is computed with an exact parallel scan of its
first-order linear recurrence instead of the paper's closed form, which divides
by a cumulative product that underflows mid-utterance (see DESIGN.md, "The
numerical trap").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from asr.config import AttentionConfig
from asr.scan import scan_rows, shift_left, shift_right

# --------------------------------------------------------------------------
# The soft monotonic alignment (its recurrence is solved by asr.scan).
# --------------------------------------------------------------------------


class _SoftMonotonic(torch.autograd.Function):
    """alpha = p * q with q[j] = (1 - p[j-1]) q[j-1] + previous[j]; analytic backward (a reverse scan)."""

    @staticmethod
    def forward(ctx, energy: Tensor, previous: Tensor, mask: Tensor | None) -> Tensor:  # type: ignore[override]
        if mask is not None:
            # Padding: p = sigmoid(-inf) = 0 and 1 - p = 1 exactly, whatever was there.
            energy = torch.where(mask, energy, -math.inf)
        p = torch.sigmoid(energy)
        # 1 - p computed as sigmoid(-e): exact even where p rounds to 1.
        one_minus_p = torch.sigmoid(-energy)
        q = scan_rows(shift_right(one_minus_p, 0.0), previous, False)
        alpha = p * q
        ctx.save_for_backward(p, one_minus_p, alpha)
        return alpha

    @staticmethod
    def backward(ctx, grad_alpha: Tensor) -> tuple[Tensor | None, Tensor | None, None]:  # type: ignore[override]
        p, one_minus_p, alpha = ctx.saved_tensors
        # G[j] = dL/dq[j] = g[j] p[j] + (1 - p[j]) G[j+1]: the same scan, run backwards.
        grad_q = scan_rows(one_minus_p, grad_alpha * p, True)
        grad_energy = None
        if ctx.needs_input_grad[0]:
            # dL/dp = q (g - G[j+1]); dp/de = p (1 - p); masked positions have alpha = 0.
            grad_energy = (grad_alpha - shift_left(grad_q, 0.0)) * alpha * one_minus_p
        return grad_energy, grad_q, None


def soft_monotonic_alignment(
    energy: Tensor, previous: Tensor, mask: Tensor | None = None
) -> Tensor:
    """Expected hard monotonic alignment alpha(i, .) from energies and alpha(i-1, .).

    ``energy`` and ``previous`` are float tensors [batch, T]; ``mask`` (bool
    [batch, T]) marks valid memory positions, padding gets zero. The result
    may sum to less than one: the missing mass is "nothing selected", whose
    context is the zero vector; it is never renormalised.
    """
    if energy.shape != previous.shape or energy.dim() != 2:
        raise ValueError(
            f"energy and previous must both be [batch, T], got {tuple(energy.shape)} "
            f"and {tuple(previous.shape)}"
        )
    if mask is not None:
        if mask.shape != energy.shape:
            raise ValueError(f"mask must be {tuple(energy.shape)}, got {tuple(mask.shape)}")
        mask = mask.to(device=energy.device, dtype=torch.bool)
    # At least float32 even under mixed precision: the recurrence multiplies T factors
    # (1 - p), which bfloat16's 8-bit mantissa cannot carry (DESIGN.md, the numerical trap).
    # None of its ops is one that autocast lowers, so the cast is all it takes.
    dtype = torch.promote_types(energy.dtype, torch.float32)
    return _SoftMonotonic.apply(energy.to(dtype), previous.to(dtype), mask)


def chunkwise_weights(alpha: Tensor, chunk_energy: Tensor, width: int, mask: Tensor) -> Tensor:
    """MoChA's expected attention: spread alpha(k) over the softmax of the w states ending at k.

    beta(j) = sum over k in [j, j+w-1] of alpha(k) exp(u(j) - Z(k)), with Z(k) the
    log-sum-exp of u over the window ending at k: two windowed log-sum-exps, so every
    exponent is taken of a difference within one window and no window underflows however
    far apart energies are along T. In float64 inside: u(j) and Z(k) are added apart,
    and float32 would lose ~1e-6 of each row's mass to their rounding when energies are
    large. Faster to differentiate than a loop over window offsets (bench/attention.py).
    """
    if width == 1:
        return alpha
    dtype = alpha.dtype
    u = chunk_energy.double().masked_fill(~mask, -math.inf)
    log_z = _window_logsumexp(u, width, ahead=False)
    log_z = torch.where(torch.isfinite(log_z), log_z, torch.zeros_like(log_z))  # empty windows
    # alpha = 0 adds under 1e-300 of mass; a log of 0 would give a NaN gradient
    ratio = torch.log(alpha.double().clamp_min(1e-300)) - log_z
    beta = torch.exp(u + _window_logsumexp(ratio, width, ahead=True))
    return torch.where(mask, beta, torch.zeros_like(beta)).to(dtype)


def _window_logsumexp(x: Tensor, width: int, ahead: bool) -> Tensor:
    """Log-sum-exp over the ``width`` entries of the last axis ending at (or, ``ahead``,
    starting at) each index; outside the axis counts as -inf."""
    pad = (0, width - 1) if ahead else (width - 1, 0)
    return torch.logsumexp(F.pad(x, pad, value=-math.inf).unfold(-1, width, 1), dim=-1)


# --------------------------------------------------------------------------
# Energy functions
# --------------------------------------------------------------------------


class AdditiveEnergy(nn.Module):
    """Bahdanau's energy ``v . tanh(W s + V h + b)``; keys ``V h`` are projected once per state."""

    def __init__(self, query_dim: int, key_dim: int, dim: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, dim)
        self.key_proj = nn.Linear(key_dim, dim, bias=False)
        self.v = nn.Parameter(torch.empty(dim).uniform_(-1 / math.sqrt(dim), 1 / math.sqrt(dim)))

    def keys(self, memory: Tensor) -> Tensor:
        return self.key_proj(memory)

    def query(self, state: Tensor) -> Tensor:
        return self.query_proj(state)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        """Energies for projected query [..., A] against projected keys [..., A] (broadcast)."""
        return torch.tanh(query + keys) @ self.v

    def grid(self, queries: Tensor, keys: Tensor) -> Tensor:
        """Energies [B, U, T] of every decoder state [B, U, Q] against every projected key [B, T, A]."""
        return self.score(self.query(queries).unsqueeze(2), keys.unsqueeze(1))


class MonotonicEnergy(AdditiveEnergy):
    """Raffel et al.'s energy ``g * v/||v|| . tanh(W s + V h + b) + r``.

    Weight-normalising v and starting r negative keep p small at first, so
    early in training the expected alignment does not collapse onto index 0.
    """

    def __init__(
        self, query_dim: int, key_dim: int, dim: int, init_r: float, init_g: float | None
    ) -> None:
        super().__init__(query_dim, key_dim, dim)
        self.g = nn.Parameter(torch.tensor(init_g if init_g is not None else 1 / math.sqrt(dim)))
        self.r = nn.Parameter(torch.tensor(float(init_r)))

    def direction(self) -> Tensor:
        """``g * v / ||v||``: the weight-normalised energy vector."""
        return self.g * self.v / self.v.norm()

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.tanh(query + keys) @ self.direction() + self.r


# --------------------------------------------------------------------------
# Attention modules: one interface for all three kinds
# --------------------------------------------------------------------------


@dataclass
class HardScan:
    """Result of a hard monotonic scan for N hypotheses.

    ``selected[n]`` is the chosen memory index or -1; ``position[n]`` is where
    the scan of hypothesis n stands (the index to evaluate next if it ran off
    the end of the available memory); ``evaluations`` counts energies computed.
    """

    selected: Tensor
    position: Tensor
    evaluations: int


class Attention(nn.Module):
    """Common interface.

    ``keys(memory)`` projects encoder states once; ``soft(...)`` is the
    training-time expected attention for a batch; ``hard_context(...)`` gives
    the inference-time context for chosen positions.
    """

    monotonic: bool = True
    energy: AdditiveEnergy  # the selection energy; its keys are what ``keys`` projects

    def __init__(self, query_dim: int, memory_dim: int, cfg: AttentionConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.memory_dim = memory_dim

    def keys(self, memory: Tensor) -> Tensor:
        return self.energy.keys(memory)

    def soft(
        self, query: Tensor, memory: Tensor, keys: Tensor, mask: Tensor, previous: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One step: (context [B, D], alignment for the next step [B, T], weights [B, T])."""
        context, alignment, weights = self.soft_steps(
            query.unsqueeze(1), memory, keys, mask, previous
        )
        return context[:, 0], alignment[:, 0], weights[:, 0]

    def soft_steps(
        self, queries: Tensor, memory: Tensor, keys: Tensor, mask: Tensor, previous: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """U steps whose queries [B, U, Q] are known up front: contexts [B, U, D], alignments
        and weights [B, U, T]. ``previous`` is the alignment before the first of them."""
        raise NotImplementedError

    def _noisy(self, energy: Tensor) -> Tensor:
        if self.training and self.cfg.noise_std > 0:
            return energy + torch.randn_like(energy) * self.cfg.noise_std
        return energy


class MonotonicAttention(Attention):
    """Soft monotonic attention in training, hard monotonic scan at inference."""

    def __init__(self, query_dim: int, memory_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, memory_dim, cfg)
        self.energy = MonotonicEnergy(query_dim, memory_dim, cfg.dim, cfg.init_r, cfg.init_g)

    def soft_steps(
        self, queries: Tensor, memory: Tensor, keys: Tensor, mask: Tensor, previous: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        alpha = self._monotonic(queries, keys, mask, previous)
        return torch.bmm(alpha, memory), alpha, alpha

    def _monotonic(self, queries: Tensor, keys: Tensor, mask: Tensor, previous: Tensor) -> Tensor:
        """Soft monotonic alignments [B, U, T]: all energies at once, then the recurrence over i."""
        energies = self._noisy(self.energy.grid(queries, keys))
        alignments = []
        for i in range(queries.shape[1]):
            previous = soft_monotonic_alignment(energies[:, i], previous, mask)
            alignments.append(previous)
        return torch.stack(alignments, 1)

    def scan(self, query: Tensor, keys: Tensor, position: Tensor, available: int) -> HardScan:
        """Hard monotonic scan for N hypotheses over one stream's memory.

        ``query`` [N, Q] decoder states, ``keys`` [T_avail, A] projected memory
        (index 0 = the oldest retained state), ``position`` [N] where each scan
        starts (its previous choice). Energies are evaluated lazily, one
        position at a time, only where a scan still stands; the first p > 0.5
        (energy > 0) is chosen. A scan that reaches ``available`` without a
        choice stops there and resumes from that position when more memory
        exists, without recomputing anything.
        """
        chosen, stops, evaluations = self.walk(
            self.energy.query(query), self.energy.direction(), keys, position.tolist(), available
        )
        return HardScan(torch.tensor(chosen), torch.tensor(stops), evaluations)

    def walk(
        self, projected: Tensor, direction: Tensor, keys: Tensor, starts: list[int], available: int
    ) -> tuple[list[int], list[int], int]:
        """:meth:`scan` on plain integers, for queries the search projected itself
        (``energy.query``) with the energy's ``direction()``, both once per output step
        however often its scan resumes: the chosen index per hypothesis (-1: none yet),
        where each stands, and the energies evaluated.

        This is the serving hot path, one call per arriving state, so the bookkeeping of a
        handful of hypotheses stays in Python rather than in tiny tensors."""
        # numpy: one energy is a 128-wide tanh and dot, where each torch call costs more
        # in dispatch than in arithmetic (the same float32 sums, in any chunking)
        queries, memory = projected.detach().numpy(), keys.detach().numpy()
        vector, r = direction.detach().numpy(), self.energy.r.detach().numpy()
        chosen, stops, evaluations = [], [], 0
        for n, p in enumerate(starts):
            q, found = queries[n], -1
            while p < available:
                evaluations += 1
                if np.dot(np.tanh(q + memory[p]), vector) + r > 0:
                    found = p
                    break
                p += 1
            chosen.append(found)
            stops.append(p)
        return chosen, stops, evaluations

    def hard_context(self, query: Tensor, memory: Tensor, keys: Tensor, selected: Tensor) -> Tensor:
        """Context for chosen indices; the zero vector where nothing was chosen (-1)."""
        chosen = selected.clamp(min=0)
        context = memory[chosen]
        return context * (selected >= 0).unsqueeze(-1).to(context.dtype)

    @property
    def lookback(self) -> int:
        """How many states before the pointer inference still reads (MoChA's chunk)."""
        return 0


class ChunkwiseAttention(MonotonicAttention):
    """MoChA (Chiu & Raffel, 2018): monotonic choice, then softmax over the w states ending there."""

    def __init__(self, query_dim: int, memory_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, memory_dim, cfg)  # AttentionConfig checks chunk_width
        self.chunk_energy = AdditiveEnergy(query_dim, memory_dim, cfg.dim)

    def keys(self, memory: Tensor) -> Tensor:
        return torch.cat([self.energy.keys(memory), self.chunk_energy.keys(memory)], dim=-1)

    def _split(self, keys: Tensor) -> tuple[Tensor, Tensor]:
        return keys[..., : self.cfg.dim], keys[..., self.cfg.dim :]

    def soft_steps(
        self, queries: Tensor, memory: Tensor, keys: Tensor, mask: Tensor, previous: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        mono_keys, chunk_keys = self._split(keys)
        alpha = self._monotonic(queries, mono_keys, mask, previous)
        u = self.chunk_energy.grid(queries, chunk_keys)
        weights = chunkwise_weights(alpha, u, self.cfg.chunk_width, mask.unsqueeze(1))
        return torch.bmm(weights, memory), alpha, weights

    def walk(
        self, projected: Tensor, direction: Tensor, keys: Tensor, starts: list[int], available: int
    ) -> tuple[list[int], list[int], int]:
        return super().walk(projected, direction, self._split(keys)[0], starts, available)

    def hard_context(self, query: Tensor, memory: Tensor, keys: Tensor, selected: Tensor) -> Tensor:
        width = self.cfg.chunk_width
        _, chunk_keys = self._split(keys)
        offsets = torch.arange(-width + 1, 1, device=selected.device)
        positions = selected.unsqueeze(1) + offsets  # [N, w]
        # The chosen state itself is always in the window; where nothing was chosen
        # (-1) keep it finite too (clamped to 0) so the softmax never sees a row of
        # -inf, and zero the context below.
        valid = (positions >= 0) | (offsets == 0)
        positions = positions.clamp(min=0)
        u = self.chunk_energy.score(
            self.chunk_energy.query(query).unsqueeze(1), chunk_keys[positions]
        )
        weights = torch.softmax(u.masked_fill(~valid, -math.inf), dim=-1)
        context = (weights.unsqueeze(-1) * memory[positions]).sum(1)
        return torch.where((selected >= 0).unsqueeze(-1), context, 0.0)

    @property
    def lookback(self) -> int:
        return self.cfg.chunk_width - 1


class SoftmaxAttention(Attention):
    """Bahdanau attention over the whole memory: the offline baseline (needs complete memory)."""

    monotonic = False

    def __init__(self, query_dim: int, memory_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, memory_dim, cfg)
        self.energy = AdditiveEnergy(query_dim, memory_dim, cfg.dim)

    def soft_steps(
        self, queries: Tensor, memory: Tensor, keys: Tensor, mask: Tensor, previous: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        e = self.energy.grid(queries, keys)
        weights = torch.softmax(e.masked_fill(~mask.unsqueeze(1), -math.inf), dim=-1)
        return torch.bmm(weights, memory), weights, weights

    def full_context(self, query: Tensor, memory: Tensor, keys: Tensor) -> Tensor:
        """Context for N queries [N, Q] over one stream's complete memory [T, D]."""
        e = self.energy.score(self.energy.query(query).unsqueeze(1), keys.unsqueeze(0))
        return torch.softmax(e, dim=-1) @ memory


def build_attention(query_dim: int, memory_dim: int, cfg: AttentionConfig) -> Attention:
    kinds = {
        "monotonic": MonotonicAttention,
        "chunkwise": ChunkwiseAttention,
        "softmax": SoftmaxAttention,
    }
    if cfg.kind not in kinds:
        raise ValueError(f"attention.kind must be one of {sorted(kinds)}, got {cfg.kind!r}")
    return kinds[cfg.kind](query_dim, memory_dim, cfg)


def initial_alignment(mask: Tensor) -> Tensor:
    """alpha(0, .): all mass on the first memory state, so the first scan starts at index 0."""
    alpha = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    alpha[:, 0] = 1.0
    return alpha
