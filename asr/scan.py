"""Exact first-order linear recurrences ``q[j] = c[j] * q[j-1] + x[j]``, solved in parallel.

The expected alignment of soft monotonic attention is such a recurrence with
non-negative coefficients. Solving it as it stands (products and sums of
non-negative numbers) is exact and stable; the paper's closed form instead
divides by a cumulative product that underflows mid-utterance (DESIGN.md, "The
numerical trap").

Both backends use the same decomposition: solve blocks of the row independently
from a zero carry, then carry each block's end into the next. ``tensor_scan``
does it with whole-tensor ops (GPU-friendly: every op is parallel over T);
``kernel_scan`` does it in a compiled CPU loop, where dispatching dozens of
small tensor ops per scan costs more than the arithmetic.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

# --------------------------------------------------------------------------
# Tensor ops (any device)
# --------------------------------------------------------------------------

SCAN_BLOCK = 8
SCAN_DOUBLING_MAX = 64


def _doubling_scan(coeff: Tensor, inp: Tensor, reverse: bool) -> Tensor:
    """Hillis-Steele scan of [R, n] rows: ceil(log2 n) rounds of two whole-row ops.

    Round k composes each position with the one 2**k away (q <- q + c * q_shifted,
    c <- c * c_shifted), reading shifted views of zero-padded ping-pong buffers, so
    the Python-level op count is 2 log2(n) whatever the batch.
    """
    n = inp.shape[-1]
    steps = (n - 1).bit_length()
    pad = 1 << (steps - 1)
    lo = 0 if reverse else pad
    bufs = inp.new_zeros(4, inp.shape[0], n + pad).unbind(0)
    vals = [b.narrow(-1, lo, n) for b in bufs]
    vals[0].copy_(inp)
    vals[2].copy_(coeff)
    shift = 1
    for step in range(steps):
        i = step & 1
        src = lo + shift if reverse else lo - shift
        torch.addcmul(vals[i], vals[2 + i], bufs[i].narrow(-1, src, n), out=vals[1 - i])
        if step < steps - 1:  # the last round's products are never read
            torch.mul(vals[2 + i], bufs[2 + i].narrow(-1, src, n), out=vals[3 - i])
        shift *= 2
    return vals[steps & 1]


def _blocked_scan(coeff: Tensor, inp: Tensor, reverse: bool) -> Tensor:
    """Long rows: solve blocks of SCAN_BLOCK in place, scan the block ends, add the carries."""
    rows, n = inp.shape
    block = SCAN_BLOCK
    blocks = -(-n // block)
    extra = blocks * block - n
    # Fresh copies (solved in place); padding (coefficient 1, input 0) at the end
    # cannot change real positions in either direction.
    a = F.pad(inp, (0, extra)) if extra else inp.clone()
    c = F.pad(coeff, (0, extra), value=1.0) if extra else coeff.clone()
    a = a.view(rows, blocks, block)
    c = c.view(rows, blocks, block)
    a_cols, c_cols = a.unbind(-1), c.unbind(-1)
    order = range(block - 2, -1, -1) if reverse else range(1, block)
    step = 1 if reverse else -1
    for j in order:
        a_cols[j].addcmul_(c_cols[j], a_cols[j + step])
        c_cols[j].mul_(c_cols[j + step])
    # a: each block solved from a zero carry; c: products from the block's entry edge.
    edge = 0 if reverse else block - 1
    ends = tensor_scan(c_cols[edge].contiguous(), a_cols[edge].contiguous(), reverse)
    carry = F.pad(ends[:, 1:], (0, 1)) if reverse else F.pad(ends[:, :-1], (1, 0))
    return torch.addcmul(a, c, carry.unsqueeze(-1)).view(rows, blocks * block)[:, :n]


def tensor_scan(coeff: Tensor, inp: Tensor, reverse: bool) -> Tensor:
    """Scan of contiguous [R, n] rows with whole-tensor ops, on any device; no autograd."""
    if inp.shape[-1] == 1:
        return inp.clone()
    if inp.shape[-1] <= SCAN_DOUBLING_MAX:
        return _doubling_scan(coeff, inp, reverse)
    return _blocked_scan(coeff, inp, reverse)


# --------------------------------------------------------------------------
# Compiled CPU kernel
# --------------------------------------------------------------------------


KERNEL_BLOCK = 64


@cache
def _kernel() -> Any:
    """The compiled CPU kernel (numba is imported on first use: serving never needs it)."""
    import numba

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def blocked_scan(c, x, q, reverse, block):
        rows, n = x.shape
        blocks = (n + block - 1) // block
        acc = np.zeros(rows, dtype=x.dtype)
        # 1. every block from a zero carry (blocks are independent); rows innermost, so
        #    the row recurrences run side by side instead of waiting on one another
        for b in range(blocks):
            lo, hi = b * block, min(b * block + block, n)
            acc[:] = 0
            for t in range(hi - lo):
                j = hi - 1 - t if reverse else lo + t
                for r in range(rows):
                    acc[r] = c[r, j] * acc[r] + x[r, j]
                    q[r, j] = acc[r]
        # 2. the finished end of the previous block enters each block, decaying by c
        for s in range(1, blocks):
            b = blocks - 1 - s if reverse else s
            lo, hi = b * block, min(b * block + block, n)
            entry = hi if reverse else lo - 1
            for r in range(rows):
                acc[r] = q[r, entry]
            for t in range(hi - lo):
                j = hi - 1 - t if reverse else lo + t
                for r in range(rows):
                    acc[r] *= c[r, j]
                    q[r, j] += acc[r]

    return blocked_scan


def kernel_scan(coeff: Tensor, inp: Tensor, reverse: bool) -> Tensor:
    """Scan of contiguous [R, n] CPU rows with the compiled kernel; no autograd."""
    q = torch.empty_like(inp)
    _kernel()(coeff.detach().numpy(), inp.detach().numpy(), q.numpy(), reverse, KERNEL_BLOCK)
    return q


def scan_rows(coeff: Tensor, inp: Tensor, reverse: bool) -> Tensor:
    """Scan along the last dim of same-shape tensors, no autograd: the kernel on the CPU,
    tensor ops elsewhere."""
    length = inp.shape[-1]
    if length == 0:
        return inp.clone()
    flat_c = coeff.reshape(-1, length).contiguous()
    flat_x = inp.reshape(-1, length).contiguous()
    scan = kernel_scan if inp.device.type == "cpu" else tensor_scan
    return scan(flat_c, flat_x, reverse).reshape(inp.shape)


# --------------------------------------------------------------------------
# Public, differentiable
# --------------------------------------------------------------------------


class _LinearScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, coeff: Tensor, inp: Tensor, reverse: bool) -> Tensor:  # type: ignore[override]
        q = scan_rows(coeff, inp, reverse)
        ctx.save_for_backward(coeff, q)
        ctx.reverse = reverse
        return q

    @staticmethod
    def backward(ctx, grad_q: Tensor) -> tuple[Tensor, Tensor, None]:  # type: ignore[override]
        coeff, q = ctx.saved_tensors
        # The adjoint of a scan is the scan in the other direction with the
        # coefficients moved to the other end of each link.
        if ctx.reverse:
            grad_inp = scan_rows(shift_right(coeff, 0.0), grad_q, False)
            grad_coeff = grad_inp * shift_left(q, 0.0)
        else:
            grad_inp = scan_rows(shift_left(coeff, 0.0), grad_q, True)
            grad_coeff = grad_inp * shift_right(q, 0.0)
        return grad_coeff, grad_inp, None


def linear_scan(coeff: Tensor, inp: Tensor, reverse: bool = False) -> Tensor:
    """Solve ``q[j] = coeff[j] * q[j-1] + inp[j]`` (q[-1] = 0) along the last dim.

    With ``reverse=True``: ``q[j] = coeff[j] * q[j+1] + inp[j]`` (q[T] = 0).
    The coefficient that would multiply a missing neighbour is never used.

    Exact for non-negative coefficients and inputs: only products and sums of
    non-negative numbers, no division, no cancellation (see scan_rows for how).
    Differentiable (the backward pass is the opposite scan).
    """
    if coeff.shape != inp.shape:
        raise ValueError(
            f"coeff and inp must have the same shape, got {tuple(coeff.shape)} and {tuple(inp.shape)}"
        )
    if torch.is_grad_enabled() and (coeff.requires_grad or inp.requires_grad):
        return _LinearScan.apply(coeff, inp, reverse)
    return scan_rows(coeff, inp, reverse)


def shift_right(x: Tensor, fill: float) -> Tensor:
    """x[j-1] at position j, ``fill`` at position 0."""
    return F.pad(x[..., :-1], (1, 0), value=fill)


def shift_left(x: Tensor, fill: float) -> Tensor:
    """x[j+1] at position j, ``fill`` at the last position."""
    return F.pad(x[..., 1:], (0, 1), value=fill)
