"""Low-rank adapters (Hu et al. 2022) on a stack of layers' linear maps.

A pretrained network learns a new condition (a streaming mask for the encoder, memories
cut mid-speech for the decoder) through W + B A with W frozen: few weights, and the
pretrained behaviour is where training starts, since B starts at zero. Serving runs the
merged plain linears; a shipped adapter is its A and B per linear, merged at load.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn


class LowRank(nn.Module):
    """y = W x + b + B A x with frozen W, b and trainable A (r x in), B (out x r; starts at 0)."""

    def __init__(self, base: nn.Linear, rank: int) -> None:
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.down = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.up = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) + (x @ self.down.T) @ self.up.T

    def merged(self) -> nn.Linear:
        """The plain linear layer these adapters amount to (what serving runs)."""
        self.base.weight.data += self.up.data @ self.down.data
        return self.base


def add_adapters(
    model: nn.Module, layers: Sequence[nn.Module], names: Sequence[str], rank: int
) -> None:
    """Freeze ``model`` and put rank-``rank`` adapters on the linears ``names`` of each of
    its ``layers``."""
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in layers:
        for name in names:
            setattr(layer, name, LowRank(getattr(layer, name), rank))


def merge_adapters(layers: Sequence[nn.Module], names: Sequence[str]) -> None:
    """Replace every adapted linear of ``layers`` by the plain linear it amounts to."""
    for layer in layers:
        for name in names:
            module = getattr(layer, name)
            if isinstance(module, LowRank):
                setattr(layer, name, module.merged())


def adapter_weights(layers: Sequence[nn.Module], names: Sequence[str]) -> dict[str, Tensor]:
    """The adapters' A and B as ``{"<layer>.<name>.down": A, "<layer>.<name>.up": B}``."""
    weights = {}
    for i, layer in enumerate(layers):
        for name in names:
            module = getattr(layer, name)
            if isinstance(module, LowRank):
                weights[f"{i}.{name}.down"] = module.down.detach().contiguous()
                weights[f"{i}.{name}.up"] = module.up.detach().contiguous()
    return weights


def averaged_adapters(snapshots: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
    """The adapters whose every linear's B A is the mean of the ``snapshots``' (each an
    :func:`adapter_weights`), exactly: A stacked, B stacked and divided by their number, so
    rank times the count. Averaging A and B apart would give the product of the means,
    not the mean of the products; weights averaged over a run's last checkpoints are less
    a matter of which step the run stopped at than any one of them (the research record)."""
    if not snapshots:
        raise ValueError("no adapters to average")
    count = len(snapshots)
    averaged = {}
    for key in snapshots[0]:
        parts = [s[key].float() for s in snapshots]
        if key.endswith(".down"):
            averaged[key] = torch.cat(parts, dim=0)
        else:
            averaged[key] = torch.cat(parts, dim=1) / count
    return averaged


def restore_adapters(
    layers: Sequence[nn.Module], names: Sequence[str], weights: Mapping[str, Tensor]
) -> None:
    """Load :func:`adapter_weights` back into the adapters of ``layers`` (a resumed run)."""
    for i, layer in enumerate(layers):
        for name in names:
            module = getattr(layer, name)
            if isinstance(module, LowRank):
                # (set, not copied: averaged adapters have a rank of their own)
                module.down.data = weights[f"{i}.{name}.down"].clone()
                module.up.data = weights[f"{i}.{name}.up"].clone()


def apply_adapter_weights(
    layers: Sequence[nn.Module], names: Sequence[str], weights: Mapping[str, Tensor]
) -> None:
    """Merge saved adapters (:func:`adapter_weights`) into the plain linears of ``layers``;
    a ValueError where they do not fit."""
    expected = {
        f"{i}.{n}.{part}" for i in range(len(layers)) for n in names for part in ("down", "up")
    }
    unknown = sorted(set(weights) - expected)
    if unknown:
        raise ValueError(f"adapter weights for no linear of these layers: {', '.join(unknown[:3])}")
    for i, layer in enumerate(layers):
        for name in names:
            if f"{i}.{name}.down" not in weights:
                continue
            linear = getattr(layer, name)
            down, up = weights[f"{i}.{name}.down"].float(), weights[f"{i}.{name}.up"].float()
            if up.shape[0] != linear.out_features or down.shape[1] != linear.in_features:
                raise ValueError(
                    f"adapter {i}.{name} is {up.shape[0]} x {down.shape[1]}, its linear "
                    f"{linear.out_features} x {linear.in_features}"
                )
            with torch.no_grad():
                linear.weight += up @ down
