"""asr.attention against float64 references written from the papers' equations.

Raffel et al. (2017), soft monotonic attention:
    q(i,j) = (1 - p(i,j-1)) q(i,j-1) + alpha(i-1,j),   alpha(i,j) = p(i,j) q(i,j)
Chiu & Raffel (2018), MoChA:
    beta(i,j) = sum_{k=j}^{j+w-1} alpha(i,k) exp(u(i,j)) / sum_{l=k-w+1}^{k} exp(u(i,l))
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from asr import scan
from asr.attention import (
    ChunkwiseAttention,
    HardScan,
    MonotonicAttention,
    MonotonicEnergy,
    SoftmaxAttention,
    build_attention,
    chunkwise_weights,
    initial_alignment,
    soft_monotonic_alignment,
)
from asr.config import AttentionConfig
from asr.scan import linear_scan

TOL = 1e-6  # forward: L1 error per row relative to the row's mass, float32
GRAD_TOL = 1e-4  # backward: max error relative to the largest gradient magnitude

# --------------------------------------------------------------------------
# References
# --------------------------------------------------------------------------


@pytest.fixture(params=["kernel", "tensor"])
def scan_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run on the compiled CPU kernel and on the tensor-op scan that other devices use."""
    if request.param == "tensor":
        monkeypatch.setattr(scan, "kernel_scan", scan.tensor_scan)
    return request.param


def reference_alignment(energy, previous, lengths=None):
    """Step-by-step float64 recurrence, straight from the paper (differentiable)."""
    energy, previous = energy.double(), previous.double()
    batch, length = energy.shape
    p = torch.sigmoid(energy)
    if lengths is not None:
        valid = torch.arange(length)[None, :] < torch.as_tensor(lengths)[:, None]
        p = torch.where(valid, p, torch.zeros_like(p))
    columns = []
    q = previous.new_zeros(batch)
    for j in range(length):
        q = (1 - p[:, j - 1]) * q + previous[:, j] if j > 0 else previous[:, 0]
        columns.append(p[:, j] * q)
    return torch.stack(columns, dim=1)


def clipped_closed_form(energy, previous, clip=1e-10):
    """The paper's appendix closed form with the usual clipping of its denominator."""
    p = torch.sigmoid(energy)
    exclusive = torch.cumprod(torch.cat([torch.ones_like(p[:, :1]), 1 - p[:, :-1]], dim=1), dim=1)
    return p * exclusive * torch.cumsum(previous / exclusive.clamp(min=clip), dim=1)


def reference_scan(coeff, inp, reverse=False):
    coeff, inp = coeff.double(), inp.double()
    out = torch.zeros_like(inp)
    order = range(inp.shape[-1] - 1, -1, -1) if reverse else range(inp.shape[-1])
    last = None
    for j in order:
        out[..., j] = inp[..., j] if last is None else coeff[..., j] * out[..., last] + inp[..., j]
        last = j
    return out


def reference_beta(alpha, u, width, lengths):
    """Brute-force MoChA expected attention in float64."""
    alpha, u = alpha.double(), u.double()
    beta = torch.zeros_like(alpha)
    for b in range(alpha.shape[0]):
        n = int(lengths[b])
        for j in range(n):
            for k in range(j, min(j + width, n)):
                window = u[b, max(0, k - width + 1) : k + 1]
                beta[b, j] += (
                    alpha[b, k]
                    * torch.exp(u[b, j] - window.max())
                    / torch.exp(window - window.max()).sum()
                )
    return beta


def relative_l1(ours, ref):
    mass = ref.abs().sum(-1)
    return ((ours.double() - ref).abs().sum(-1) / mass.clamp(min=1e-300)).max().item()


def late_peaked(batch, length, seed=0):
    """Previous alignment peaked at 70% of T, p about 0.95 everywhere before the peak."""
    g = torch.Generator().manual_seed(seed)
    peak = int(0.7 * length)
    position = torch.arange(length, dtype=torch.float64)
    previous = torch.exp(-0.5 * ((position - peak) / 2.0) ** 2).expand(batch, length).clone()
    previous = (previous / previous.sum(-1, keepdim=True)).float()
    energy = math.log(0.95 / 0.05) + 0.3 * torch.randn(batch, length, generator=g)
    energy[:, peak - 3 :] = torch.randn(batch, length - peak + 3, generator=g) - 1.0
    return energy, previous


def random_case(batch, length, std, mean, seed):
    g = torch.Generator().manual_seed(seed)
    energy = mean + std * torch.randn(batch, length, generator=g)
    # A previous alignment with a few peaks and near-zero tails, mass slightly below 1.
    logits = 4.0 * torch.randn(batch, length, generator=g)
    previous = 0.9 * torch.softmax(logits, dim=-1)
    return energy, previous


def padded(energy, previous, lengths, garbage):
    """Mask for right padding; padded energies hold garbage, padded previous is zero."""
    length = energy.shape[1]
    mask = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
    energy = energy.masked_fill(~mask, garbage)
    previous = previous.masked_fill(~mask, 0.0)
    return energy, previous, mask


# --------------------------------------------------------------------------
# 1. Forward against the float64 recurrence
# --------------------------------------------------------------------------


@pytest.mark.usefixtures("scan_backend")
@pytest.mark.parametrize(
    "length,batch,std,mean",
    [
        (50, 8, 1.0, 0.0),
        (50, 8, 25.0, 0.0),
        (333, 4, 1.0, -4.0),
        (333, 4, 5.0, -1.0),
        (1500, 3, 25.0, 0.0),
        (4000, 2, 1.0, 0.0),
        (4000, 2, 25.0, 2.0),
    ],
)
def test_forward_matches_float64_recurrence(length, batch, std, mean):
    energy, previous = random_case(batch, length, std, mean, seed=length)
    ref = reference_alignment(energy, previous)
    ours = soft_monotonic_alignment(energy, previous)
    assert ours.dtype == torch.float32
    assert torch.isfinite(ours).all()
    assert relative_l1(ours, ref) <= TOL


@pytest.mark.usefixtures("scan_backend")
def test_forward_from_initial_alignment_over_several_steps():
    """Chained steps (alpha of one step is previous of the next) stay on the reference."""
    torch.manual_seed(1)
    length = 600
    mask = torch.ones(3, length, dtype=torch.bool)
    ours = initial_alignment(mask)
    ref = ours.double()
    for _ in range(6):
        energy = 3.0 * torch.randn(3, length) - 1.0
        ours = soft_monotonic_alignment(energy, ours, mask)
        ref = reference_alignment(energy, ref)
        assert relative_l1(ours, ref) <= TOL


@pytest.mark.usefixtures("scan_backend")
@pytest.mark.parametrize("garbage", [1e4, -1e4, math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("length,lengths", [(60, [60, 37, 1, 12]), (2100, [2100, 1333])])
def test_forward_padded_batch(length, lengths, garbage):
    energy, previous = random_case(len(lengths), length, 4.0, -1.0, seed=len(lengths))
    energy, previous, mask = padded(energy, previous, lengths, garbage)
    ours = soft_monotonic_alignment(energy, previous, mask)
    assert torch.isfinite(ours).all()
    assert (ours[~mask] == 0).all()
    ref = reference_alignment(energy.masked_fill(~mask, 0.0), previous, lengths)
    assert relative_l1(ours, ref) <= TOL


@pytest.mark.usefixtures("scan_backend")
@pytest.mark.parametrize("length", [800, 4000])
def test_late_peak_keeps_mass_where_clipped_closed_form_loses_it(length):
    energy, previous = late_peaked(2, length)
    ref = reference_alignment(energy, previous)
    closed = clipped_closed_form(energy, previous)
    ours = soft_monotonic_alignment(energy, previous)
    assert (ref.sum(-1) > 0.9).all()  # the true alignment keeps (almost) all its mass
    assert (closed.sum(-1) < 1e-6).all()  # the clipped closed form returns zeros
    assert relative_l1(closed, ref) > 0.999
    assert relative_l1(ours, ref) <= TOL


@pytest.mark.usefixtures("scan_backend")
def test_bfloat16_energies_run_in_float32_under_autocast():
    """Mixed-precision training hands over bfloat16 energies; the recurrence, a product of
    T factors (1 - p), still runs in float32 and stays on the reference."""
    energy, previous = late_peaked(2, 1500)
    energy = energy.bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = soft_monotonic_alignment(energy, previous)
    assert ours.dtype == torch.float32
    assert relative_l1(ours, reference_alignment(energy.float(), previous)) <= TOL


def test_previous_dtype_is_cast_and_nothing_renormalised():
    energy = torch.full((1, 5), -20.0)
    previous = torch.tensor([[1.0, 0, 0, 0, 0]], dtype=torch.float64)
    alpha = soft_monotonic_alignment(energy, previous)
    assert alpha.dtype == torch.float32
    assert alpha.sum() < 1e-7  # "nothing selected" keeps the missing mass


# --------------------------------------------------------------------------
# 2. Gradients against autograd through the float64 reference
# --------------------------------------------------------------------------


def _grads(fn, energy, previous, weights):
    energy = energy.detach().clone().requires_grad_()
    previous = previous.detach().clone().requires_grad_()
    (fn(energy, previous) * weights).sum().backward()
    return energy.grad, previous.grad


@pytest.mark.usefixtures("scan_backend")
@pytest.mark.parametrize(
    "case",
    ["std1-T50", "std25-T300", "mean-4-T1000", "late-T800", "late-T4000", "padded-T700"],
)
def test_gradients_match_float64_reference(case):
    g = torch.Generator().manual_seed(7)
    if case.startswith("late"):
        length = int(case.split("T")[1])
        energy, previous = late_peaked(1 if length > 1000 else 2, length)
        lengths, mask = None, None
    elif case.startswith("padded"):
        energy, previous = random_case(3, 700, 3.0, -1.0, seed=3)
        lengths = [700, 450, 9]
        energy, previous, mask = padded(energy, previous, lengths, math.nan)
    else:
        std = 25.0 if "std25" in case else 1.0
        mean = -4.0 if "mean-4" in case else 0.0
        length = int(case.split("T")[1])
        energy, previous = random_case(3, length, std, mean, seed=length)
        lengths, mask = None, None
    weights = torch.randn(energy.shape, generator=g)

    ge, gp = _grads(lambda e, p: soft_monotonic_alignment(e, p, mask), energy, previous, weights)
    clean = energy if mask is None else energy.masked_fill(~mask, 0.0)
    re, rp = _grads(
        lambda e, p: reference_alignment(e, p, lengths), clean.double(), previous.double(), weights
    )
    for ours, ref in ((ge, re), (gp, rp)):
        assert torch.isfinite(ours).all()
        scale = ref.abs().max().item()
        assert scale > 0
        assert (ours.double() - ref).abs().max().item() <= GRAD_TOL * scale
    if mask is not None:
        assert (ge[~mask] == 0).all()


@pytest.mark.usefixtures("scan_backend")
def test_gradients_finite_with_extreme_energies_and_masks():
    torch.manual_seed(3)
    energy = 60.0 * torch.randn(4, 300)
    energy[0, ::7] = math.inf
    energy[1, ::5] = -math.inf
    previous = torch.softmax(torch.randn(4, 300) * 5, -1)
    mask = torch.arange(300)[None, :] < torch.tensor([300, 250, 3, 1])[:, None]
    energy = energy.masked_fill(~mask, math.nan).requires_grad_()
    previous.requires_grad_()
    alpha = soft_monotonic_alignment(energy, previous, mask)
    (alpha * torch.randn_like(alpha)).sum().backward()
    for t in (alpha, energy.grad, previous.grad):
        assert torch.isfinite(t).all()


@pytest.mark.usefixtures("scan_backend")
def test_gradcheck_float64():
    torch.manual_seed(4)
    energy = torch.randn(2, 9, dtype=torch.float64, requires_grad=True)
    previous = torch.softmax(torch.randn(2, 9, dtype=torch.float64), -1).requires_grad_()
    mask = torch.tensor([[True] * 9, [True] * 6 + [False] * 3])
    assert torch.autograd.gradcheck(
        lambda e, p: soft_monotonic_alignment(e, p, mask), (energy, previous)
    )


@pytest.mark.usefixtures("scan_backend")
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_scan_gradcheck_float64(reverse):
    torch.manual_seed(5)
    for length in (5, 90):  # doubling path and blocked path
        coeff = torch.rand(2, length, dtype=torch.float64, requires_grad=True)
        inp = torch.rand(2, length, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda c, x: linear_scan(c, x, reverse), (coeff, inp))


@pytest.mark.usefixtures("scan_backend")
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length", [1, 2, 3, 63, 64, 65, 100, 1000, 5003])
def test_linear_scan_matches_loop(length, reverse):
    torch.manual_seed(length)
    coeff = torch.rand(3, length)
    coeff[:, ::11] = 0.0  # p = 1 exactly cuts the chain
    coeff[:, 1::13] = 1.0
    inp = torch.rand(3, length)
    ours = linear_scan(coeff, inp, reverse=reverse)
    ref = reference_scan(coeff, inp, reverse)
    assert ((ours.double() - ref).abs() / ref.abs().clamp(min=1e-30)).max() < 1e-5
    # leading dims are flattened and restored
    assert linear_scan(coeff.view(3, 1, length), inp.view(3, 1, length), reverse).shape == (
        3,
        1,
        length,
    )


# --------------------------------------------------------------------------
# Crafted modules: discrete p from large energies
# --------------------------------------------------------------------------

GAIN = 1e4


def crafted(kind="monotonic", width=1, noise=1.0):
    """A module whose monotonic energy is GAIN * tanh(query[0] + keys[j, 0]): p in {0, 1}."""
    cfg = AttentionConfig(kind=kind, dim=2, chunk_width=width, noise_std=noise)
    att = build_attention(1, 3, cfg)
    with torch.no_grad():
        energy = att.energy
        energy.query_proj.weight.copy_(torch.tensor([[1.0], [0.0]]))
        energy.query_proj.bias.zero_()
        energy.v.copy_(torch.tensor([1.0, 0.0]))
        energy.g.fill_(GAIN)
        energy.r.zero_()
    return att.eval()


def crafted_inputs(length, steps, seed):
    g = torch.Generator().manual_seed(seed)
    memory = torch.randn(length, 3, generator=g)
    # Keys and queries kept away from the decision boundary: |energy| >= GAIN * tanh(0.1).
    shifts = torch.linspace(-2.0, 2.0, steps)[torch.randperm(steps, generator=g)]
    queries = shifts.unsqueeze(1)  # [U, 1]
    key_values = torch.rand(length, generator=g) * 4 - 2
    key_values = torch.where(
        ((key_values[None, :] + shifts[:, None]).abs() < 0.1).any(0), key_values + 0.25, key_values
    )
    return memory, queries, key_values


def with_keys(att, memory, key_values):
    keys = att.keys(memory).detach().clone()
    keys[:, 0] = key_values  # overrides the monotonic energy's projection only
    return keys


def hard_decode(att, queries, keys, memory, available):
    """Hard monotonic attention step by step; returns chosen indices and contexts."""
    position = torch.zeros(1, dtype=torch.long)
    chosen, contexts = [], []
    for query in queries:
        scan = att.scan(query[None], keys[:available], position, available)
        selected = scan.selected
        contexts.append(att.hard_context(query[None], memory, keys, selected)[0])
        chosen.append(int(selected))
        if int(selected) < 0:
            position = scan.position
        else:
            position = selected
    return chosen, torch.stack(contexts)


# --------------------------------------------------------------------------
# 3. Soft equals hard for discrete p
# --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_soft_equals_hard_for_discrete_p(seed):
    length, steps = 40, 12
    att = crafted()
    memory, queries, key_values = crafted_inputs(length, steps, seed)
    keys = with_keys(att, memory, key_values)
    chosen, hard_contexts = hard_decode(att, queries, keys, memory, length)
    assert any(c >= 0 for c in chosen)

    mask = torch.ones(1, length, dtype=torch.bool)
    previous = initial_alignment(mask)
    for i, query in enumerate(queries):
        context, alpha, weights = att.soft(query[None], memory[None], keys[None], mask, previous)
        expected = torch.zeros(length)
        if chosen[i] >= 0:
            expected[chosen[i]] = 1.0
        assert torch.equal(alpha[0], expected)
        assert torch.equal(weights, alpha)
        torch.testing.assert_close(context[0], hard_contexts[i], rtol=0, atol=1e-6)
        previous = alpha


def test_soft_equals_hard_with_padding():
    """A padded soft batch row agrees with the hard scan over that row's real states."""
    length, real, steps = 30, 17, 8
    att = crafted()
    memory, queries, key_values = crafted_inputs(length, steps, seed=9)
    keys = with_keys(att, memory, key_values)
    chosen, hard_contexts = hard_decode(att, queries, keys, memory, real)
    mask = (torch.arange(length) < real)[None]
    previous = initial_alignment(mask)
    for i, query in enumerate(queries):
        context, alpha, _ = att.soft(query[None], memory[None], keys[None], mask, previous)
        assert alpha[0, real:].abs().sum() == 0
        if chosen[i] >= 0:
            assert int(alpha[0].argmax()) == chosen[i]
        else:
            assert alpha.sum() == 0
        torch.testing.assert_close(context[0], hard_contexts[i], rtol=0, atol=1e-6)
        previous = alpha


# --------------------------------------------------------------------------
# 4. Linear-time hard scan, online with memory arriving in pieces
# --------------------------------------------------------------------------


def greedy_scan_loop(att, queries, keys, length, pieces):
    """U output steps, each scan starting at the previous choice; memory grows by `pieces`."""
    n = queries.shape[1]
    position = torch.zeros(n, dtype=torch.long)
    evaluations, choices = 0, []
    ends = list(range(pieces, length, pieces)) + [length]
    available = ends.pop(0)
    for query in queries:
        scan = att.scan(query, keys[:available], position, available)
        evaluations += scan.evaluations
        selected = scan.selected
        # Ran off the end of what exists: wait for more memory, resume where it stopped.
        while ((selected < 0) & (scan.position >= available)).any() and ends:
            waiting = (selected < 0) & (scan.position >= available)
            available = ends.pop(0)
            resumed = att.scan(query[waiting], keys[:available], scan.position[waiting], available)
            assert resumed.evaluations <= int(waiting.sum()) * (available + 1)
            evaluations += resumed.evaluations
            newly = resumed.selected
            selected = selected.clone()
            position_now = scan.position.clone()
            selected[waiting] = newly
            position_now[waiting] = resumed.position
            scan = HardScan(selected, position_now, scan.evaluations + resumed.evaluations)
        choices.append(selected.clone())
        position = torch.where(selected >= 0, selected, scan.position)
    return torch.stack(choices), evaluations


@pytest.mark.parametrize("init_r", [-4.0, 0.0, 2.0])
def test_hard_scan_is_linear_and_resumes_online(init_r):
    torch.manual_seed(11)
    length, steps, hyps = 200, 60, 3
    cfg = AttentionConfig(kind="monotonic", dim=16, init_r=init_r)
    att = build_attention(8, 5, cfg).eval()
    memory = torch.randn(length, 5)
    keys = att.keys(memory)
    queries = torch.randn(steps, hyps, 8)
    with torch.no_grad():
        whole, evaluations = greedy_scan_loop(att, queries, keys, length, pieces=length)
        # at most T + U energies per hypothesis
        assert evaluations <= hyps * (length + steps)
        for h in range(hyps):
            single, single_evals = greedy_scan_loop(
                att, queries[:, h : h + 1], keys, length, length
            )
            assert single_evals <= length + steps
            assert torch.equal(single[:, 0], whole[:, h])
        for pieces in (1, 7, 64):
            online, online_evals = greedy_scan_loop(att, queries, keys, length, pieces)
            assert torch.equal(online, whole)
            assert online_evals == evaluations  # nothing evaluated twice
    # choices are monotonic
    last = torch.zeros(hyps, dtype=torch.long)
    for row in whole:
        assert ((row < 0) | (row >= last)).all()
        last = torch.where(row >= 0, row, last)


def test_hard_scan_counts_energies_exactly():
    """Evaluations equal the positions visited: first p > 0.5 from the start position."""
    att = crafted()
    length = 10
    memory = torch.randn(length, 3)
    keys = with_keys(att, memory, torch.tensor([-1.0] * 6 + [1.0] + [-1.0] * 3))
    query = torch.zeros(2, 1)
    scan = att.scan(query, keys, torch.tensor([2, 8]), length)
    assert scan.selected.tolist() == [6, -1]
    assert scan.position.tolist() == [6, length]
    assert scan.evaluations == (6 - 2 + 1) + (length - 8)
    # Stopped at the end of the available memory, then resumed without re-evaluation.
    part = att.scan(query[:1], keys[:4], torch.tensor([2]), 4)
    assert part.selected.tolist() == [-1] and part.position.tolist() == [4]
    rest = att.scan(query[:1], keys, part.position, length)
    assert rest.selected.tolist() == [6]
    assert part.evaluations + rest.evaluations == 6 - 2 + 1
    # Nothing selected with complete memory: the zero context.
    context = att.hard_context(query, memory, keys, scan.selected)
    assert torch.equal(context[1], torch.zeros(3))
    torch.testing.assert_close(context[0], memory[6])


# --------------------------------------------------------------------------
# 5. MoChA
# --------------------------------------------------------------------------


def test_mocha_width_one_equals_monotonic():
    torch.manual_seed(12)
    cfg = AttentionConfig(kind="chunkwise", dim=8, chunk_width=1, noise_std=0.0)
    mocha = build_attention(6, 5, cfg).eval()
    mono = build_attention(6, 5, replace(cfg, kind="monotonic")).eval()
    mono.energy.load_state_dict(mocha.energy.state_dict())
    memory = torch.randn(3, 50, 5)
    mask = torch.arange(50)[None, :] < torch.tensor([50, 31, 8])[:, None]
    memory = memory * mask.unsqueeze(-1)
    query = torch.randn(3, 6)
    previous = soft_monotonic_alignment(torch.randn(3, 50), initial_alignment(mask), mask)
    c1, a1, w1 = mocha.soft(query, memory, mocha.keys(memory), mask, previous)
    c2, a2, w2 = mono.soft(query, memory, mono.keys(memory), mask, previous)
    torch.testing.assert_close(a1, a2, rtol=0, atol=0)
    torch.testing.assert_close(w1, w2, rtol=0, atol=0)
    torch.testing.assert_close(c1, c2)
    # hard path: same choices, same contexts
    keys_mocha, keys_mono = mocha.keys(memory[0]), mono.keys(memory[0])
    queries = torch.randn(4, 6)
    s1 = mocha.scan(queries, keys_mocha, torch.zeros(4, dtype=torch.long), 50)
    s2 = mono.scan(queries, keys_mono, torch.zeros(4, dtype=torch.long), 50)
    assert torch.equal(s1.selected, s2.selected) and s1.evaluations == s2.evaluations
    torch.testing.assert_close(
        mocha.hard_context(queries, memory[0], keys_mocha, s1.selected),
        mono.hard_context(queries, memory[0], keys_mono, s2.selected),
    )
    assert mocha.lookback == 0 and mono.lookback == 0


@pytest.mark.parametrize("width", [2, 4])
def test_soft_mocha_with_discrete_p_equals_hard(width):
    length, steps = 40, 10
    att = crafted("chunkwise", width)
    assert isinstance(att, ChunkwiseAttention) and att.lookback == width - 1
    memory, queries, key_values = crafted_inputs(length, steps, seed=width)
    keys = with_keys(att, memory, key_values)
    chosen, hard_contexts = hard_decode(att, queries, keys, memory, length)
    assert any(c >= 0 for c in chosen)
    mask = torch.ones(1, length, dtype=torch.bool)
    previous = initial_alignment(mask)
    for i, query in enumerate(queries):
        context, alpha, weights = att.soft(query[None], memory[None], keys[None], mask, previous)
        if chosen[i] >= 0:
            assert int(alpha[0].argmax()) == chosen[i] and alpha.sum() == 1
            support = weights[0].nonzero().squeeze(1)
            assert support.min() >= max(0, chosen[i] - width + 1) and support.max() == chosen[i]
        else:
            assert alpha.sum() == 0 and weights.sum() == 0
        torch.testing.assert_close(context[0], hard_contexts[i], rtol=1e-5, atol=1e-6)
        previous = alpha


@pytest.mark.parametrize("width", [1, 2, 4, 7])
@pytest.mark.parametrize("std", [1.0, 20.0])
def test_chunkwise_weights_match_bruteforce(width, std):
    torch.manual_seed(width)
    lengths = [30, 22, 5]
    mask = torch.arange(30)[None, :] < torch.tensor(lengths)[:, None]
    alpha = torch.rand(3, 30) * mask / 10
    u = std * torch.randn(3, 30)
    ours = chunkwise_weights(alpha, u, width, mask)
    ref = reference_beta(alpha, u, width, lengths)
    assert torch.isfinite(ours).all()
    assert (ours[~mask] == 0).all()
    assert relative_l1(ours, ref) <= TOL
    # total mass is preserved (each alpha(k) is spread over its window)
    torch.testing.assert_close(ours.sum(-1), alpha.sum(-1))


def test_chunkwise_weights_gradient_is_finite():
    alpha = torch.rand(2, 12, requires_grad=True)
    u = (30 * torch.randn(2, 12)).requires_grad_()
    mask = torch.arange(12)[None, :] < torch.tensor([12, 4])[:, None]
    chunkwise_weights(alpha, u, 3, mask).sum().backward()
    assert torch.isfinite(alpha.grad).all() and torch.isfinite(u.grad).all()


def test_hard_context_is_zero_when_nothing_selected():
    for kind, width in (("monotonic", 1), ("chunkwise", 1), ("chunkwise", 3)):
        att = build_attention(4, 3, AttentionConfig(kind=kind, dim=8, chunk_width=width)).eval()
        memory = torch.randn(6, 3)
        keys = att.keys(memory)
        context = att.hard_context(torch.randn(3, 4), memory, keys, torch.tensor([-1, 0, 5]))
        assert torch.isfinite(context).all()
        assert torch.equal(context[0], torch.zeros(3))


# --------------------------------------------------------------------------
# Modules: noise, initialisation, shapes, softmax baseline
# --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["monotonic", "chunkwise"])
def test_noise_only_in_training_mode(kind):
    torch.manual_seed(13)
    att = build_attention(4, 3, AttentionConfig(kind=kind, dim=8, noise_std=1.0))
    memory = torch.randn(2, 20, 3)
    mask = torch.ones(2, 20, dtype=torch.bool)
    query = torch.randn(2, 4)
    previous = initial_alignment(mask)
    keys = att.keys(memory)
    att.eval()
    first = att.soft(query, memory, keys, mask, previous)
    second = att.soft(query, memory, keys, mask, previous)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    att.train()
    noisy1 = att.soft(query, memory, keys, mask, previous)[1]
    noisy2 = att.soft(query, memory, keys, mask, previous)[1]
    assert not torch.equal(noisy1, noisy2)
    assert not torch.equal(noisy1, first[1])
    quiet = build_attention(4, 3, AttentionConfig(kind=kind, dim=8, noise_std=0.0))
    quiet.load_state_dict(att.state_dict())
    quiet.train()
    assert torch.equal(quiet.soft(query, memory, keys, mask, previous)[1], first[1])


def test_energy_initialisation_defaults_and_overrides():
    att = build_attention(4, 3, AttentionConfig(kind="monotonic", dim=64))
    assert isinstance(att.energy, MonotonicEnergy)
    assert att.energy.r.item() == pytest.approx(-4.0)
    assert att.energy.g.item() == pytest.approx(1 / math.sqrt(64))
    custom = build_attention(
        4, 3, AttentionConfig(kind="chunkwise", dim=16, init_r=-1.5, init_g=2.0)
    )
    assert custom.energy.r.item() == pytest.approx(-1.5)
    assert custom.energy.g.item() == pytest.approx(2.0)
    # the initial energies are small and negative: p well below 0.5
    memory = torch.randn(5, 3)
    e = att.energy.score(att.energy.query(torch.randn(2, 4)).unsqueeze(1), att.keys(memory))
    assert (e < -4 + 1 / math.sqrt(64) + 1e-5).all() and (e > -4 - 1 / math.sqrt(64) - 1e-5).all()


def test_bad_shapes_raise_value_error():
    e = torch.zeros(2, 5)
    with pytest.raises(ValueError):
        soft_monotonic_alignment(e, torch.zeros(2, 6))
    with pytest.raises(ValueError):
        soft_monotonic_alignment(torch.zeros(5), torch.zeros(5))
    with pytest.raises(ValueError):
        soft_monotonic_alignment(torch.zeros(2, 3, 5), torch.zeros(2, 3, 5))
    with pytest.raises(ValueError):
        soft_monotonic_alignment(e, e, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError):
        linear_scan(torch.zeros(2, 5), torch.zeros(2, 4))
    with pytest.raises(ValueError):
        build_attention(4, 3, AttentionConfig(kind="bogus"))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        build_attention(4, 3, AttentionConfig(kind="chunkwise", chunk_width=0))


def test_softmax_baseline_interface():
    torch.manual_seed(14)
    att = build_attention(4, 3, AttentionConfig(kind="softmax", dim=8)).eval()
    assert isinstance(att, SoftmaxAttention) and not att.monotonic
    memory = torch.randn(2, 9, 3)
    mask = torch.arange(9)[None, :] < torch.tensor([9, 5])[:, None]
    query = torch.randn(2, 4)
    context, alignment, weights = att.soft(query, memory, att.keys(memory), mask, None)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2))
    assert (weights[~mask] == 0).all()
    full = att.full_context(query[1:], memory[1, :5], att.keys(memory[1, :5]))
    torch.testing.assert_close(full[0], context[1])
    assert isinstance(build_attention(4, 3, AttentionConfig(kind="monotonic")), MonotonicAttention)
