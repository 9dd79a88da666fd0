"""training.widen: a widened model computes exactly what the small one did, and learns."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from asr.config import Config, DecodeConfig
from asr.decoding import search_states
from asr.model import Seq2Seq
from training.widen import widened_state

TINY = Path(__file__).resolve().parents[1] / "training" / "configs" / "tiny.yaml"
WIDER = [
    "model.encoder.units=200",
    "model.decoder.units=160",
    "model.decoder.embed_dim=96",
    "model.attention.dim=80",
]
VOCAB = 20


def models(settings: list[str], wider: list[str] = WIDER) -> tuple[Seq2Seq, Seq2Seq]:
    """A small model (random, as trained weights would be) and the same settings widened;
    a positive init_r makes the monotonic scans fire, so searches emit tokens."""
    base = ["model.attention.noise_std=0", "model.attention.init_r=2.0", *settings]
    torch.manual_seed(0)
    small = Seq2Seq(Config.load(TINY, base).model, VOCAB).eval()
    wide = Seq2Seq(Config.load(TINY, base + wider).model, VOCAB).eval()
    return small, wide


@pytest.mark.parametrize(
    "settings",
    [
        ["model.decoder.context_feedback=true"],
        ["model.decoder.context_feedback=false"],
        ["model.attention.kind=chunkwise", "model.decoder.layers=2"],
        ["model.attention.kind=softmax", "model.encoder.reductions=[2,1]"],
    ],
)
def test_widened_model_computes_what_the_small_one_did(settings: list[str]) -> None:
    small, wide = models(settings)
    wide.load_state_dict(widened_state(small, wide))
    assert wide.num_parameters() > 1.5 * small.num_parameters()
    feats = torch.randn(2, 64, small.encoder.input_dim)
    lengths = torch.tensor([64, 48])
    targets = torch.randint(3, VOCAB, (2, 7))
    target_lengths = torch.tensor([7, 5])
    with torch.no_grad():
        a = small.forward_teacher(feats, lengths, targets, target_lengths)
        b = wide.forward_teacher(feats, lengths, targets, target_lengths)
        small_loss, _ = small.compute_loss(feats, lengths, targets, target_lengths)
        wide_loss, _ = wide.compute_loss(feats, lengths, targets, target_lengths)
    assert torch.allclose(a.logits, b.logits, atol=1e-5)
    assert torch.allclose(a.alignments, b.alignments, atol=1e-6)
    # the old units' states are the first of the wide encoder's, unchanged
    assert torch.allclose(a.memory, b.memory[..., : small.cfg.encoder.units], atol=1e-6)
    assert abs(float(small_loss) - float(wide_loss)) < 1e-5
    for utterance in range(2):
        found = [
            search_states(
                model, out.memory[utterance, : int(out.memory_lengths[utterance])], DecodeConfig()
            )
            for model, out in ((small, a), (wide, b))
        ]
        tokens = [[s.tokens for s in segments] for segments in found]
        assert tokens[0] == tokens[1] and any(tokens[0])


def test_the_new_units_receive_gradients() -> None:
    small, wide = models(["model.decoder.context_feedback=false"])
    wide.load_state_dict(widened_state(small, wide))
    wide.train()
    feats = torch.randn(2, 64, small.encoder.input_dim)
    loss, _ = wide.compute_loss(
        feats, torch.tensor([64, 48]), torch.randint(3, VOCAB, (2, 7)), torch.tensor([7, 5])
    )
    loss.backward()
    units = small.cfg.encoder.units
    # weights out of new units into old outputs start at zero and are what training grows
    assert float(wide.ctc.weight.detach()[:, units:].abs().max()) == 0.0
    assert float(wide.ctc.weight.grad[:, units:].abs().sum()) > 0
    energy = wide.decoder.attention.energy
    assert float(energy.v.grad[small.cfg.attention.dim :].abs().sum()) > 0
    embed = small.cfg.decoder.embed_dim
    assert float(wide.decoder.out.weight.grad[:, embed:].abs().sum()) > 0


@pytest.mark.parametrize(
    ("wider", "message"),
    [
        (["model.encoder.units=64"], "model.encoder.units is smaller (64 against 128)"),
        (["model.encoder.layers=3", "model.encoder.reductions=[2,2,1]"], "model.encoder.layers"),
        (["model.attention.kind=softmax"], "model.attention.kind"),
    ],
)
def test_what_widening_cannot_do_is_refused_by_name(wider: list[str], message: str) -> None:
    small, wide = models([], wider)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        widened_state(small, wide)
