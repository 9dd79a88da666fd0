"""Attention plots: the soft alignment as a heat map with the hard monotonic path over it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

FIGSIZE = (10.0, 6.0)  # inches; with DPI a fixed 1000 x 600 pixel image
DPI = 100


def plot_alignment(
    weights: np.ndarray,
    labels: Sequence[str],
    hard_path: Sequence[tuple[int, int]],
    out: str | Path,
    title: str = "",
    seconds_per_state: float = 0.04,
) -> Path:
    """Save a PNG of ``weights`` [outputs, states] with ``hard_path`` (output index, state) drawn on it.

    Rows are labelled with the reference units (teacher forcing); the hard
    path comes from free-running greedy decoding, so its rows are the
    hypothesis's outputs.
    """
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim != 2:
        raise ValueError(f"weights must be [outputs, states], got shape {weights.shape}")
    fig, ax = plt.subplots(figsize=FIGSIZE, dpi=DPI)
    image = ax.imshow(
        weights,
        aspect="auto",
        origin="lower",
        cmap="viridis",
        interpolation="nearest",
        vmin=0.0,
        vmax=max(1e-6, float(weights.max(initial=0.0))),
    )
    fig.colorbar(image, ax=ax, label="soft monotonic attention (teacher forced)")
    if hard_path:
        rows, states = zip(*hard_path)
        ax.plot(states, rows, "o-", color="red", markersize=3, linewidth=1, label="hard path")
        ax.legend(loc="upper left")
    if len(labels) <= 60:
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
    ticks = ax.get_xticks()
    ticks = ticks[(ticks >= 0) & (ticks < weights.shape[1])]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t * seconds_per_state:.1f}" for t in ticks])
    ax.set_xlabel("time (s) of encoder state")
    ax.set_ylabel("output step")
    ax.set_title(title, fontsize=9)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out
