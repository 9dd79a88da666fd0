"""Widening a trained model without changing what it computes (``train.init`` into a wider run).

The bundled model's LAS layers underfit: greedy, they read the first 200 of their own
training utterances at 33.1% WER and unseen sentences of the same voices at 34.7%, so more
passes over the same data buy little and the layers need more units. A wider model
trained from scratch would throw away the hours the small one has had; instead each of its
weights takes the small model's value where both have one, and the rest is arranged so
that the new units cannot yet change any old unit (Net2Net's "wider" growth, here with
zero fan-out):

- a weight from an old input into an old output keeps its value;
- a weight from a new input into an old output is zero, so old units read only old ones;
- a new output's weights (from every input) and biases keep the wide model's random
  initialisation, so its units compute something and receive gradients from the start.

The wide model then gives the small one's outputs exactly (its extra units are computed
but read by nothing yet), and training spreads the work onto them. The sizes that may grow
are the encoder's and the decoder's LSTM units, the embedding (and the output layer's
hidden layer, which has its width) and the attention energy's dimension; the number of
layers, the pyramid, the attention kind, the vocabulary and the front end must stay.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from asr.model import Seq2Seq

Segments = list[tuple[int, int]]  # an axis as consecutive blocks: (old size, new size)


def widened_state(small: Seq2Seq, wide: Seq2Seq) -> dict[str, Tensor]:
    """``wide``'s state dict with ``small``'s weights placed in it (module docstring); a
    ValueError names what differs when ``wide`` is not ``small`` widened."""
    check_widening(small, wide)
    old_state = small.state_dict()
    new_state = wide.state_dict()
    if old_state.keys() != new_state.keys():
        missing = sorted(old_state.keys() ^ new_state.keys())
        raise ValueError(f"the models differ in their parameters: {', '.join(missing[:4])}")
    axes = _axes(small, wide)
    state = {}
    for name, new in new_state.items():
        old = old_state[name]
        layout = _layout(name, axes, wide)
        if layout is None:  # sizes no widening changes: the old value whole
            if old.shape != new.shape:
                raise ValueError(
                    f"{name}: shape {tuple(old.shape)} cannot become {tuple(new.shape)}"
                )
            state[name] = old.clone()
            continue
        outputs, inputs, transposed = layout
        if transposed:  # an embedding: its rows are its inputs
            state[name] = _place(old.t(), new.t(), outputs, inputs).t().contiguous()
        else:
            state[name] = _place(old, new, outputs, inputs)
    return state


def check_widening(small: Seq2Seq, wide: Seq2Seq) -> None:
    """Refuse a pair that widening cannot join, naming the first setting that differs."""
    a, b = small.cfg, wide.cfg
    fixed = {
        "model.frontend": (a.frontend, b.frontend),
        "model.encoder.layers": (a.encoder.layers, b.encoder.layers),
        "model.encoder.reductions": (list(a.encoder.reductions), list(b.encoder.reductions)),
        "model.decoder.layers": (a.decoder.layers, b.decoder.layers),
        "model.decoder.context_feedback": (a.decoder.context_feedback, b.decoder.context_feedback),
        "model.attention.kind": (a.attention.kind, b.attention.kind),
        "vocabulary": (small.vocab_size, wide.vocab_size),
        "CTC head": (small.ctc is None, wide.ctc is None),
    }
    for name, (old, new) in fixed.items():
        if old != new:
            raise ValueError(f"{name} differs ({old} against {new}): widening cannot change it")
    for name, (old, new) in _sizes(small, wide).items():
        if new < old:
            raise ValueError(f"{name} is smaller ({new} against {old}): widening only grows")


def _sizes(small: Seq2Seq, wide: Seq2Seq) -> dict[str, tuple[int, int]]:
    a, b = small.cfg, wide.cfg
    return {
        "model.encoder.units": (a.encoder.units, b.encoder.units),
        "model.decoder.units": (a.decoder.units, b.decoder.units),
        "model.decoder.embed_dim": (a.decoder.embed_dim, b.decoder.embed_dim),
        "model.attention.dim": (a.attention.dim, b.attention.dim),
    }


def _axes(small: Seq2Seq, wide: Seq2Seq) -> dict[str, tuple[int, int]]:
    sizes = _sizes(small, wide)
    return {
        "E": sizes["model.encoder.units"],
        "D": sizes["model.decoder.units"],
        "M": sizes["model.decoder.embed_dim"],
        "A": sizes["model.attention.dim"],
        "V": (small.vocab_size, wide.vocab_size),
        "F": (small.encoder.input_dim, wide.encoder.input_dim),
        "1": (1, 1),
    }


def _layout(
    name: str, axes: dict[str, tuple[int, int]], wide: Seq2Seq
) -> tuple[Segments, Segments | None, bool] | None:
    """(output blocks, input blocks or None for a vector, whether rows are inputs) of a
    parameter; None for one that widening leaves as it is."""

    def blocks(spec: str) -> Segments:
        return [axes[a] for a in spec]

    gates_e, gates_d = blocks("EEEE"), blocks("DDDD")  # an LSTM's four gates, each a block
    if m := re.fullmatch(r"encoder\.lstms\.(\d+)\.(weight|bias)_(ih|hh)_l0", name):
        layer, kind, which = int(m[1]), m[2], m[3]
        if kind == "bias":
            return gates_e, None, False
        if which == "hh":
            return gates_e, blocks("E"), False
        stacked = wide.cfg.encoder.reductions[layer]
        return gates_e, blocks("F" if layer == 0 else "E") * stacked, False
    if m := re.fullmatch(r"decoder\.cells\.(\d+)\.(weight|bias)_(ih|hh)", name):
        layer, kind, which = int(m[1]), m[2], m[3]
        if kind == "bias":
            return gates_d, None, False
        if which == "hh" or layer > 0:
            return gates_d, blocks("D"), False
        feedback = wide.cfg.decoder.context_feedback
        return gates_d, blocks("ME" if feedback else "M"), False
    table: dict[str, tuple[str, str | None, bool]] = {
        "ctc.weight": ("V", "E", False),
        "ctc.bias": ("V", None, False),
        "decoder.embed.weight": ("M", "V", True),
        "decoder.hidden.weight": ("M", "DE", False),
        "decoder.hidden.bias": ("M", None, False),
        "decoder.out.weight": ("V", "M", False),
        "decoder.out.bias": ("V", None, False),
    }
    if name in table:
        outputs, inputs, transposed = table[name]
        return blocks(outputs), None if inputs is None else blocks(inputs), transposed
    if m := re.fullmatch(r"decoder\.attention\.\w+\.(query_proj|key_proj)\.(weight|bias)", name):
        source = "D" if m[1] == "query_proj" else "E"
        return blocks("A"), None if m[2] == "bias" else blocks(source), False
    if re.fullmatch(r"decoder\.attention\.\w+\.v", name):  # the energy's one output reads A
        return blocks("1"), blocks("A"), False
    return None


def _old_positions(segments: Segments) -> Tensor:
    """Where the old entries of an axis of consecutive blocks sit in the widened axis."""
    positions, offset = [], 0
    for old, new in segments:
        positions.append(torch.arange(offset, offset + old))
        offset += new
    return torch.cat(positions)


def _place(old: Tensor, new: Tensor, outputs: Segments, inputs: Segments | None) -> Tensor:
    """``new`` with ``old`` in its old rows (and columns); old rows read nothing new."""
    if inputs is not None and old.dim() == 1:  # a vector read by one output: a row
        return _place(old[None], new[None], outputs, inputs)[0]
    axes = [outputs] if inputs is None else [outputs, inputs]
    shape = tuple(sum(o for o, _ in axis) for axis in axes)
    wide_shape = tuple(sum(n for _, n in axis) for axis in axes)
    if tuple(old.shape) != shape or tuple(new.shape) != wide_shape:
        raise ValueError(
            f"a weight of shape {tuple(old.shape)} cannot become {tuple(new.shape)} by widening"
        )
    rows = _old_positions(outputs)
    result = new.detach().clone()
    if inputs is None:
        result[rows] = old
        return result
    columns = _old_positions(inputs)
    result[rows] = 0.0
    result[rows[:, None], columns[None, :]] = old
    return result
