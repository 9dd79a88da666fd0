"""Whisper's text decoder in torch, reading any encoder's states, whole or cut short.

Whisper-base's decoder learnt English from 680,000 hours of transcribed speech; the
LSTM decoder here learns it from a few hours of synthetic speech. ``bench/decoder_ceiling.py``
measures what that costs by having Whisper's decoder read a bundle's encoder states (the
full-attention teacher's and the streaming student's) beside the bundle's own decoder.

Layout, as in Whisper (and as CTranslate2 stores it): token embeddings and learnt
positions (448), pre-norm layers of self-attention (q, k, v fused), cross-attention over
the encoder states (q alone, k and v fused) and a GELU feed-forward block, a final layer
norm, and an output projection over the 51,865 tokens.

A *memory* is the cross-attention's keys and values of each layer, computed once per set
of encoder states. Whisper reads a 30 s window, and learnt to read the padding after the
speech as its own encoder encodes silence; :meth:`WhisperTextDecoder.cut` gives the memory
of states that end at a given state and the encoded silence after it, which is what a
decoder that may read only the audio that has arrived sees.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

Memory = list[tuple[Tensor, Tensor]]  # per layer: keys, values [B, heads, S, d / heads]


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.self_norm = nn.LayerNorm(d_model)
        self.self_qkv = nn.Linear(d_model, 3 * d_model)
        self.self_out = nn.Linear(d_model, d_model)
        self.cross_norm = nn.LayerNorm(d_model)
        self.cross_q = nn.Linear(d_model, d_model)
        self.cross_kv = nn.Linear(d_model, 2 * d_model)
        self.cross_out = nn.Linear(d_model, d_model)
        self.ffn_norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def heads_of(self, x: Tensor, parts: int) -> Tensor:
        """[B, T, parts * d] -> [parts, B, heads, T, d / heads]."""
        b, t, _ = x.shape
        return x.view(b, t, parts, self.heads, -1).permute(2, 0, 3, 1, 4)

    def memory(self, states: Tensor) -> tuple[Tensor, Tensor]:
        k, v = self.heads_of(self.cross_kv(states), 2)
        return k, v

    def joined(self, x: Tensor) -> Tensor:
        """[B, heads, T, dh] -> [B, T, d]."""
        b, _, t, _ = x.shape
        return x.transpose(1, 2).reshape(b, t, -1)

    def forward(self, x: Tensor, memory: tuple[Tensor, Tensor]) -> Tensor:
        q, k, v = self.heads_of(self.self_qkv(self.self_norm(x)), 3)
        x = x + self.self_out(self.joined(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
        (q,) = self.heads_of(self.cross_q(self.cross_norm(x)), 1)
        x = x + self.cross_out(self.joined(F.scaled_dot_product_attention(q, *memory)))
        return x + self.fc2(F.gelu(self.fc1(self.ffn_norm(x))))


class WhisperTextDecoder(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, n_ctx: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("positions", torch.zeros(n_ctx, d_model))
        self.layers = nn.ModuleList(DecoderLayer(d_model, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)

    @classmethod
    def from_ctranslate2(cls, variables: Mapping[str, np.ndarray]) -> WhisperTextDecoder:
        """The decoder of a parsed CTranslate2 Whisper model (float32); its output
        projection is the token embedding, as in Whisper."""

        def get(name: str) -> Tensor:
            if name not in variables:
                raise ValueError(f"the Whisper model has no variable {name}")
            return torch.from_numpy(np.asarray(variables[name], dtype=np.float32))

        embed = get("decoder/embeddings/weight")
        if not torch.equal(embed, get("decoder/projection/weight")):
            raise ValueError("the Whisper model's output projection is not its embedding")
        layers = sum(
            n.startswith("decoder/") and n.endswith("/self_attention/linear_0/weight")
            for n in variables
        )
        positions = get("decoder/position_encodings/encodings")
        heads = int(np.asarray(variables["decoder/num_heads"]))
        decoder = cls(len(embed), embed.shape[1], heads, layers, len(positions))
        parts = {
            "self_norm": "self_attention/layer_norm",
            "self_qkv": "self_attention/linear_0",
            "self_out": "self_attention/linear_1",
            "cross_norm": "attention/layer_norm",
            "cross_q": "attention/linear_0",
            "cross_kv": "attention/linear_1",
            "cross_out": "attention/linear_2",
            "ffn_norm": "ffn/layer_norm",
            "fc1": "ffn/linear_0",
            "fc2": "ffn/linear_1",
        }
        weights = {"embed.weight": embed, "positions": positions}
        weights |= {"norm.weight": get("decoder/layer_norm/gamma")}
        weights |= {"norm.bias": get("decoder/layer_norm/beta")}
        for i in range(layers):
            for ours, theirs in parts.items():
                norm = ours.endswith("norm")
                prefix = f"decoder/layer_{i}/{theirs}/"
                weights[f"layers.{i}.{ours}.weight"] = get(prefix + ("gamma" if norm else "weight"))
                weights[f"layers.{i}.{ours}.bias"] = get(prefix + ("beta" if norm else "bias"))
        decoder.load_state_dict(weights)
        return decoder.eval()

    def memory(self, states: Tensor) -> Memory:
        """Each layer's cross-attention keys and values of encoder states [B, S, d]."""
        return [layer.memory(states) for layer in self.layers]

    @staticmethod
    def cut(memory: Memory, silence: Memory, ends: Tensor) -> Memory:
        """Memories of one utterance's states [1, S, ...] read up to each of ``ends`` [N]
        (states before it) with the encoded silence's from there on: [N, S, ...]."""
        kept = (torch.arange(memory[0][0].shape[2]) < ends.unsqueeze(1))[:, None, :, None]
        return [
            (torch.where(kept, k, silent_k), torch.where(kept, v, silent_v))
            for (k, v), (silent_k, silent_v) in zip(memory, silence, strict=True)
        ]

    def forward(self, tokens: Tensor, memory: Memory) -> Tensor:
        """Log-probabilities [B, L, vocab] of each next token after ``tokens`` [B, L]."""
        x = self.embed(tokens) + self.positions[: tokens.shape[1]]
        for layer, layer_memory in zip(self.layers, memory, strict=True):
            x = layer(x, layer_memory)
        return F.log_softmax(self.norm(x) @ self.embed.weight.t(), dim=-1)

    @torch.no_grad()
    def greedy(self, memory: Memory, prompt: list[int], end: int, limit: int = 224) -> list[int]:
        """The most likely token at each step after ``prompt`` until ``end`` (at most
        ``limit`` tokens, and a loop kept once: :func:`loop_start`), reading one memory
        [1, S, ...]; the whole prefix is read again at each step (no self-attention cache: a
        memory cut anew reads every token anew)."""
        tokens: list[int] = []
        while len(tokens) < limit:
            best = int(self(torch.tensor([prompt + tokens]), memory)[0, -1].argmax())
            if best == end:
                break
            tokens.append(best)
            start = loop_start(tokens)
            if start is not None:
                return tokens[:start]
        return tokens


def loop_start(tokens: list[int], repeats: int = 4, longest: int = 30) -> int | None:
    """Where the repeats after the first copy of a loop begin, if ``tokens`` ends with
    one run of up to ``longest`` tokens said ``repeats`` times over; else None.

    Greedy decoding of Whisper's decoder can fall into saying a phrase again and again
    ("he learned to learn to learn to learn ..."), above all from states it was not
    trained on; Whisper itself then decodes again at a higher temperature. Four times
    in a row is rare in speech ("no no no" is three); a looping sentence runs to 14
    tokens and more ("you're not going to be able to be in the same place.")."""
    for n in range(1, longest + 1):
        if len(tokens) < repeats * n:
            break
        tail = tokens[-n:]
        if all(tokens[-k * n : len(tokens) - (k - 1) * n] == tail for k in range(2, repeats + 1)):
            return len(tokens) - (repeats - 1) * n
    return None
