"""Soft monotonic attention: forward+backward time and error, ours vs a step loop vs the closed form;
then MoChA's expected chunk attention, ours vs a loop over window offsets.

Run: python bench/attention.py
Error is the L1 error per row relative to the row's mass on the late-peaked case
(previous alignment peaked at 70% of T, p about 0.95 before it), against a float64
step-by-step reference; for MoChA, against the offset loop in float64.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.attention import chunkwise_weights, soft_monotonic_alignment  # noqa: E402

BATCH = 32
LENGTHS = (200, 800, 3000)


def step_loop(energy, previous):
    """The recurrence one memory index at a time (autograd through the loop)."""
    p = torch.sigmoid(energy)
    one_minus_p = torch.sigmoid(-energy)
    q = previous[:, 0]
    columns = [p[:, 0] * q]
    for j in range(1, energy.shape[1]):
        q = one_minus_p[:, j - 1] * q + previous[:, j]
        columns.append(p[:, j] * q)
    return torch.stack(columns, dim=1)


def closed_form(energy, previous, clip=1e-10):
    """The paper's closed form with the usual clipped division by an exclusive cumprod."""
    p = torch.sigmoid(energy)
    exclusive = torch.cumprod(torch.cat([torch.ones_like(p[:, :1]), 1 - p[:, :-1]], dim=1), dim=1)
    return p * exclusive * torch.cumsum(previous / exclusive.clamp(min=clip), dim=1)


def late_peaked(batch, length):
    g = torch.Generator().manual_seed(0)
    peak = int(0.7 * length)
    position = torch.arange(length, dtype=torch.float64)
    previous = torch.exp(-0.5 * ((position - peak) / 2.0) ** 2).expand(batch, length).clone()
    previous = (previous / previous.sum(-1, keepdim=True)).float()
    energy = math.log(0.95 / 0.05) + 0.3 * torch.randn(batch, length, generator=g)
    energy[:, peak - 3 :] = torch.randn(batch, length - peak + 3, generator=g) - 1.0
    return energy, previous


def row_error(ours, ref):
    """The largest L1 error of a row relative to the reference row's mass."""
    ours = ours.detach().double()
    return ((ours - ref).abs().sum(-1) / ref.abs().sum(-1).clamp(min=1e-300)).max().item()


def relative_error(fn, energy, previous):
    with torch.no_grad():
        return row_error(fn(energy, previous), step_loop(energy.double(), previous.double()))


def median_ms(run, repeats, warmup):
    """Median wall time of ``run()`` (a forward and backward pass) after ``warmup`` calls."""
    times = []
    for _ in range(repeats + warmup):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times[warmup:]) * 1e3


def timed(fn, energy, previous, repeats):
    energy = energy.clone().requires_grad_()
    previous = previous.clone().requires_grad_()
    weights = torch.randn(energy.shape, generator=torch.Generator().manual_seed(1))

    def run():
        energy.grad = previous.grad = None
        (fn(energy, previous) * weights).sum().backward()

    return median_ms(run, repeats, warmup=2)


def offset_loop(alpha, u, width, mask):
    """MoChA's expectation one window offset at a time: each window's softmax, then every
    alpha(k) spread over the states of its window (autograd through the loop)."""
    length = alpha.shape[-1]
    u = u.masked_fill(~mask, 0.0)
    windows = torch.nn.functional.pad(u, (width - 1, 0), value=-math.inf).unfold(-1, width, 1)
    contrib = torch.nn.functional.pad(
        alpha.unsqueeze(-1) * torch.softmax(windows, -1), (0, 0, 0, width - 1)
    )
    beta = alpha.new_zeros(alpha.shape)
    for offset in range(width):
        start = width - 1 - offset
        beta = beta + contrib[..., start : start + length, offset]
    return beta


def mocha() -> None:
    """Rows as one training batch's attention heads have them: 4 utterances x 8 heads x 40
    tokens over 500 states, windows of 32, energies of standard deviation 1 and 20."""
    rows, length, width = 4 * 8 * 40, 500, 32
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(rows, length, dtype=torch.bool)
    mask[: rows // 4, 400:] = False
    alpha = torch.rand(rows, length, generator=g) * mask / 10
    weights = torch.randn(rows, length, generator=g)
    print(f"\nMoChA expected attention, {rows} rows x T {length}, window {width}, forward+backward")
    header = f"{'energy std':>10} | {'ours ms':>8} {'loop ms':>8} {'loop/ours':>9} | {'err ours':>9} {'err loop':>9}"
    print(header)
    print("-" * len(header))
    for std in (1.0, 20.0):
        u = std * torch.randn(rows, length, generator=g)
        ref = offset_loop(alpha.double(), u.double(), width, mask)
        ms, err = {}, {}
        for name, fn in (("ours", chunkwise_weights), ("loop", offset_loop)):
            energy = u.clone().requires_grad_()

            def run(fn=fn, energy=energy):
                energy.grad = None
                (fn(alpha, energy, width, mask) * weights).sum().backward()

            ms[name] = median_ms(run, repeats=4, warmup=1)
            err[name] = row_error(fn(alpha, u, width, mask), ref)
        print(
            f"{std:>10.0f} | {ms['ours']:>8.1f} {ms['loop']:>8.1f} {ms['loop'] / ms['ours']:>9.1f} | "
            f"{err['ours']:>9.1e} {err['loop']:>9.1e}"
        )


def main() -> None:
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # as asr train runs
    methods = {"ours": soft_monotonic_alignment, "step": step_loop, "closed": closed_form}
    header = (
        f"{'T':>5} | {'ours ms':>8} {'step ms':>8} {'closed ms':>9} | "
        f"{'step/ours':>9} {'closed/ours':>11} | {'err ours':>9} {'err step':>9} {'err closed':>10}"
    )
    print(
        f"soft monotonic attention, batch {BATCH}, forward+backward, median, 1 thread, "
        "denormals flushed (as in training)"
    )
    print(header)
    print("-" * len(header))
    for length in LENGTHS:
        energy, previous = late_peaked(BATCH, length)
        ms, err = {}, {}
        for name, fn in methods.items():
            repeats = 5 if name == "step" else 50
            ms[name] = timed(fn, energy, previous, repeats)
            err[name] = relative_error(fn, energy, previous)
        print(
            f"{length:>5} | {ms['ours']:>8.3f} {ms['step']:>8.2f} {ms['closed']:>9.3f} | "
            f"{ms['step'] / ms['ours']:>9.1f} {ms['closed'] / ms['ours']:>11.2f} | "
            f"{err['ours']:>9.1e} {err['step']:>9.1e} {err['closed']:>10.1e}"
        )
    mocha()


if __name__ == "__main__":
    main()
