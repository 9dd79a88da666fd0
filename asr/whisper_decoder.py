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

import copy
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

LINEARS = ("self_qkv", "self_out", "cross_q", "cross_kv", "cross_out", "fc1", "fc2")
Memory = list[tuple[Tensor, Tensor]]  # per layer: keys, values [B, heads, S, d / heads]
DECODER_FILE = "whisper_decoder.safetensors"


@dataclass(frozen=True)
class TokenRules:
    """Whisper's own rules for its tokens, shipped with its weights (the CTranslate2 model's
    config): tokens never written (symbols of non-speech such as music notes, and special
    tokens), tokens never written first (a blank, the end), and the cross-attention heads
    whose attention follows the audio (for token times)."""

    suppress: tuple[int, ...]
    suppress_begin: tuple[int, ...]
    alignment_heads: tuple[tuple[int, int], ...]

    def to_metadata(self) -> dict[str, str]:
        return {
            "suppress": json.dumps(self.suppress),
            "suppress_begin": json.dumps(self.suppress_begin),
            "alignment_heads": json.dumps(self.alignment_heads),
        }

    @classmethod
    def from_metadata(cls, meta: Mapping[str, str]) -> TokenRules:
        heads = json.loads(meta["alignment_heads"])
        return cls(
            tuple(json.loads(meta["suppress"])),
            tuple(json.loads(meta["suppress_begin"])),
            tuple((int(layer), int(head)) for layer, head in heads),
        )

    def masks(self, size: int, text_tokens: int) -> tuple[Tensor, Tensor]:
        """The tokens never written, and those never written first, as masks [size] (True:
        suppressed) that a search applies to a step's log-probabilities in one go. Besides
        the rules' own, every token after the end (``text_tokens``: its id) is suppressed."""
        suppress = torch.zeros(size, dtype=torch.bool)
        suppress[list(self.suppress)] = True
        suppress[text_tokens + 1 :] = True  # specials and timestamps
        suppress_begin = suppress.clone()
        suppress_begin[list(self.suppress_begin)] = True
        return suppress, suppress_begin


class PackedLinear(nn.Module):
    """A linear layer in bfloat16 for oneDNN: weights rounded to bfloat16 and packed once in
    oneDNN's blocked layout, activations rounded on every call, products summed in float32
    and the output rounded to bfloat16. A decoder step reads every weight once, from memory
    rather than cache, so its time is the weights' bytes: half of float32's."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        # oneDNN's opaque tensor: no storage, so neither a parameter nor a buffer
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().bfloat16(), None)
        self.register_buffer("bias", None if bias is None else bias.detach().bfloat16())

    @classmethod
    def of(cls, linear: nn.Linear) -> PackedLinear:
        return cls(linear.weight, linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = x.to(torch.bfloat16)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


class ShortlistProjection(nn.Module):
    """The output projection over the vocabulary (the token embedding) in two passes: every
    token's logit from the weights in 4 bits (groups of ``group`` weights along the model
    dimension, each with its own scale and offset), then the ``exact`` tokens with the
    highest of those again from the float32 weights.

    The search reads the most likely tokens, so those are float32's; the 4-bit logits of
    the others only add their small share to the softmax's sum. Measured on held-out
    speech: the float32 best token always among the 4-bit top 16, log-probabilities within
    0.013 of float32's (0.14 with the whole projection in bfloat16, which rounds logits
    above 32 to a quarter and more), a quarter of the bfloat16 projection's bytes."""

    def __init__(self, weight: Tensor, exact: int = 64, group: int = 32) -> None:
        super().__init__()
        # float32 [vocab, d]: the embedding's own tensor, not a parameter of this module
        self.weight = weight.detach()
        self.exact, self.group = exact, group
        vocab, d = weight.shape
        padded = torch.cat([self.weight, weight.new_zeros(-vocab % 16, d)])  # as packed
        groups = padded.view(len(padded), d // group, group)
        low, high = groups.amin(-1), groups.amax(-1)
        scale = ((high - low) / 15).clamp(min=1e-8)
        levels = ((groups - low[..., None]) / scale[..., None]).round().clamp(0, 15)
        self.packed = torch._convert_weight_to_int4pack_for_cpu(levels.view(-1, d).int(), 1)
        # the kernel's weight is (level - 8) * scale + offset: [d / group, padded vocab, 2]
        offset = low + 8 * scale
        self.scales = torch.stack([scale, offset], -1).transpose(0, 1).bfloat16().contiguous()

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, x.shape[-1]).float()
        rough = torch._weight_int4pack_mm_for_cpu(
            rows.bfloat16(), self.packed, self.group, self.scales
        )
        logits = rough[:, : len(self.weight)].float()
        top = logits.topk(self.exact, dim=-1).indices
        exact = torch.bmm(self.weight[top], rows.unsqueeze(-1)).squeeze(-1)
        return logits.scatter_(-1, top, exact).view(*x.shape[:-1], -1)


def bfloat16_kernels() -> bool:
    """Whether oneDNN runs bfloat16 here (AVX-512 or newer); elsewhere it would fall back
    to reference kernels, far slower than float32."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


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
        """Keys and values of ``states`` [B, S, d], each [B, heads, S, d / heads] and
        contiguous: every step reads them, and read in the product's layout rather than
        the projection's they take a tenth of the time (:func:`attention`)."""
        k, v = self.heads_of(self.cross_kv(states), 2)
        return k.contiguous(), v.contiguous()

    def joined(self, x: Tensor) -> Tensor:
        """[B, heads, T, dh] -> [B, T, d]."""
        b, _, t, _ = x.shape
        return x.transpose(1, 2).reshape(b, t, -1)

    def forward(
        self,
        x: Tensor,
        past: tuple[Tensor, Tensor] | None,
        cross: Callable[[Tensor], tuple[Tensor, Tensor | None]],
    ) -> tuple[Tensor, tuple[Tensor, Tensor], Tensor | None]:
        """New tokens' activations x [B, n, d] after ``past`` tokens' self-attention keys and
        values -> (output, keys and values of past and new tokens, and what ``cross`` scored
        besides: token alignment). ``cross`` attends the queries [B, heads, n, dh] over the
        memory."""
        q, k, v = self.heads_of(self.self_qkv(self.self_norm(x)), 3)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        n, total = q.shape[2], k.shape[2]
        causal = None  # one new token sees every key; several see those up to their own
        if n > 1:
            causal = torch.arange(total) <= torch.arange(total - n, total).unsqueeze(1)
        attended = attention(q, k, v, causal)
        x = x + self.self_out(self.joined(attended))
        (q,) = self.heads_of(self.cross_q(self.cross_norm(x)), 1)
        attended, scores = cross(q)
        x = x + self.cross_out(self.joined(attended))
        return x + self.fc2(F.gelu(self.fc1(self.ffn_norm(x)))), (k, v), scores


@dataclass
class DecoderCache:
    """What the decoder has read for each row of a batch (a hypothesis of a segment): every
    layer's self-attention keys and values of the tokens so far [B, heads, L, d / heads], and
    the memory it reads with its mask [M, S] (None: every state). Memory rows are shared:
    ``owner`` [B] names the memory row of each hypothesis (None: row i reads memory row i),
    so a beam's hypotheses read their segment's memory without copies of it. A beam keeps
    the rows of its survivors with :meth:`select`, without knowing the layout."""

    past: list[tuple[Tensor, Tensor]]
    memory: Memory
    mask: Tensor | None = None
    owner: Tensor | None = None
    # per layer, the memory keys of the heads asked for scores, transposed [M, h, dh, S]:
    # taken once per memory, as the cache goes from step to step
    aligned: dict[int, Tensor] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return self.past[0][0].shape[2] if self.past else 0

    def select(self, rows: Tensor) -> DecoderCache:
        """The cache of ``rows`` [R] (indices into the batch, repeats allowed). A cache is a
        value (a step writes new tensors), so keeping every row in order copies nothing."""
        if self.past and torch.equal(rows, torch.arange(len(self.past[0][0]))):
            return self
        past = [(k[rows], v[rows]) for k, v in self.past]
        owner = rows if self.owner is None else self.owner[rows]
        if torch.equal(owner, torch.arange(len(self.memory[0][0]))):
            owner = None
        return DecoderCache(past, self.memory, self.mask, owner, self.aligned)

    def keys_of(self, layer: int, heads: list[int]) -> Tensor:
        """The memory keys of ``heads`` in ``layer``, transposed [M, h, dh, S] (kept)."""
        if layer not in self.aligned:
            keys = self.memory[layer][0][:, heads]
            self.aligned[layer] = keys.transpose(-1, -2).contiguous()
        return self.aligned[layer]

    def attend(self, q: Tensor, layer: int, heads: list[int]) -> tuple[Tensor, Tensor | None]:
        """Cross-attention of queries q [B, heads, n, dh] over each row's memory, and the
        scores [B, len(heads), n, S] (before the softmax) of ``heads`` if any: one call for
        a batch that reads memory row by row, else one per memory row, its hypotheses'
        queries side by side."""
        k, v = self.memory[layer]
        mask = None if self.mask is None else self.mask[:, None, None, :]
        keys = self.keys_of(layer, heads) if heads else None
        if self.owner is None:
            return attention(q, k, v, mask), _scores(q, keys, heads)
        out = torch.empty_like(q)
        scores = None
        if heads:
            scores = q.new_empty(q.shape[0], len(heads), q.shape[2], k.shape[2])
        for row in self.owner.unique().tolist():
            mine = (self.owner == row).nonzero().squeeze(1)
            c, count, n, dh = q[mine].shape
            folded = q[mine].transpose(0, 1).reshape(1, count, c * n, dh)
            one_mask = None if mask is None else mask[row : row + 1]
            got = attention(folded, k[row : row + 1], v[row : row + 1], one_mask)
            out[mine] = got.reshape(count, c, n, dh).transpose(0, 1)
            if scores is not None and keys is not None:
                scores[mine] = _scores(q[mine], keys[row : row + 1], heads)
        return out, scores


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Scaled dot-product attention of queries q [B, H, n, dh] over keys and values
    [B, H, S, dh]; ``mask`` (True: attended) broadcasts to [B, H, n, S].

    In bfloat16 (a decoder by :meth:`WhisperTextDecoder.in_bfloat16`) it is two products
    with the softmax in float32 between them: torch's fused kernel for the CPU took 8 times
    as long for a step's one query over Whisper's 1,500 states (950 against 120 us a layer,
    one thread), and 10 times for 5 queries of 5 rows, half of a step's time (research
    record). In float32 the fused kernel is as fast, and it also runs training's long
    queries without the scores' memory."""
    if q.dtype != torch.bfloat16:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, -torch.inf)
    return scores.float().softmax(-1).to(q.dtype) @ v


def _scores(q: Tensor, keys: Tensor | None, heads: list[int]) -> Tensor | None:
    """Scaled dot products [B, len(heads), n, S] of queries [B, H, n, dh] with the keys of
    ``heads``, transposed [B or 1, len(heads), dh, S] (None: no heads asked for)."""
    if keys is None:
        return None
    return q[:, heads] @ keys / math.sqrt(q.shape[-1])


class WhisperTextDecoder(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, n_ctx: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("positions", torch.zeros(n_ctx, d_model))
        self.layers = nn.ModuleList(DecoderLayer(d_model, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        # the output projection as its own layer (an int8 copy of the embedding), if set
        self.projection: nn.Module | None = None

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

    def save(self, path: Path, rules: TokenRules, provenance: Mapping[str, str]) -> None:
        """Weights in float16, as published, with the shape and ``rules`` as metadata."""
        weights = {k: v.half().contiguous() for k, v in self.state_dict().items()}
        shape = {"heads": self.layers[0].heads, "n_ctx": len(self.positions)}
        metadata = {**{k: str(v) for k, v in shape.items()}, **rules.to_metadata(), **provenance}
        tmp = path.with_name(f".{path.name}.tmp")
        save_file(weights, str(tmp), metadata=metadata)
        tmp.chmod(0o644)  # save_file's file is private to its owner; a bundle is to share
        tmp.replace(path)

    def memory(self, states: Tensor) -> Memory:
        """Each layer's cross-attention keys and values of encoder states [B, S, d]."""
        return [layer.memory(states) for layer in self.layers]

    @staticmethod
    def cut(memory: Memory, silence: Memory, ends: Tensor) -> Memory:
        """Memories of one utterance's states [1, S, ...] read up to each of ``ends`` [N]
        (states before it), or of N utterances' [N, S, ...] each up to its own end, with
        the encoded silence's [1, W, ...] from there on: [N, W, ...]. States may stop short
        of the window (S < W: a segment read at its own length); its rest is silence."""
        width = memory[0][0].shape[2]
        beyond = (torch.arange(width) >= ends.unsqueeze(1))[:, None, :, None]

        def cut_one(own: Tensor, silent: Tensor) -> Tensor:
            head = torch.where(beyond, silent[:, :, :width], own)
            if silent.shape[2] == width:
                return head
            return torch.cat([head, silent[:, :, width:].expand(len(head), -1, -1, -1)], dim=2)

        return [
            (cut_one(k, silent_k), cut_one(v, silent_v))
            for (k, v), (silent_k, silent_v) in zip(memory, silence, strict=True)
        ]

    def forward(self, tokens: Tensor, memory: Memory) -> Tensor:
        """Log-probabilities [B, L, vocab] of each next token after ``tokens`` [B, L]."""
        return self.step(tokens, DecoderCache([], memory))[0]

    def in_bfloat16(self) -> WhisperTextDecoder:
        """A copy whose linear layers, memories and key/value caches are in bfloat16
        (:class:`PackedLinear`) and whose output projection is :class:`ShortlistProjection`;
        embeddings, norms, the residual stream and the log-probabilities stay float32."""
        copied = copy.deepcopy(self)
        for layer in copied.layers:
            for name in LINEARS:
                setattr(layer, name, PackedLinear.of(getattr(layer, name)))
        copied.projection = ShortlistProjection(copied.embed.weight)
        return copied

    def step(
        self, tokens: Tensor, cache: DecoderCache, scores_of: Sequence[tuple[int, int]] = ()
    ) -> tuple[Tensor, DecoderCache, Tensor | None]:
        """Read new ``tokens`` [B, n] after those in ``cache``: (log-probabilities [B, n, vocab]
        of each next token, the cache with them, and if ``scores_of`` names (layer, head)
        pairs, their cross-attention scores [B, pairs, n, S] before the softmax)."""
        start = cache.length
        x = self.embed(tokens) + self.positions[start : start + tokens.shape[1]]
        past: list[tuple[Tensor, Tensor]] = []
        scores: list[Tensor] = []
        for i, layer in enumerate(self.layers):
            heads = [h for layer_index, h in scores_of if layer_index == i]
            layer_past = cache.past[i] if cache.past else None
            x, kv, got = layer(x, layer_past, partial(cache.attend, layer=i, heads=heads))
            past.append(kv)
            if got is not None:
                scores.append(got)
        logits = self.project(self.norm(x)).float()
        new_cache = DecoderCache(past, cache.memory, cache.mask, cache.owner, cache.aligned)
        scored = torch.cat(scores, 1).float() if scores else None
        return F.log_softmax(logits, dim=-1), new_cache, scored

    def project(self, x: Tensor) -> Tensor:
        """Logits over the vocabulary: the output projection is the token embedding."""
        if self.projection is not None:
            return self.projection(x)
        return x @ self.embed.weight.t()

    @torch.no_grad()
    def greedy(self, memory: Memory, prompt: list[int], end: int, limit: int = 224) -> list[int]:
        """The most likely token at each step after ``prompt`` until ``end`` (at most
        ``limit`` tokens, and a loop kept once: :func:`loop_start`), reading one memory
        [1, S, ...], each step from the cache of the tokens before it."""
        tokens: list[int] = []
        logprobs, cache, _ = self.step(torch.tensor([prompt]), DecoderCache([], memory))
        while len(tokens) < limit:
            best = int(logprobs[0, -1].argmax())
            if best == end:
                break
            tokens.append(best)
            start = loop_start(tokens)
            if start is not None:
                return tokens[:start]
            logprobs, cache, _ = self.step(torch.tensor([[best]]), cache)
        return tokens


def load_decoder(path: Path) -> tuple[WhisperTextDecoder, TokenRules]:
    """The decoder (float32) and its token rules from a file :meth:`WhisperTextDecoder.save`
    wrote; a missing or unreadable file fails naming it."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing (`asr import-whisper --bundle DIR` writes Whisper's decoder)"
        )
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            weights = {k: f.get_tensor(k).float() for k in f.keys()}
        embed = weights["embed.weight"]
        layers = 1 + max(int(k.split(".")[1]) for k in weights if k.startswith("layers."))
        n_ctx, heads = int(meta["n_ctx"]), int(meta["heads"])
        decoder = WhisperTextDecoder(len(embed), embed.shape[1], heads, layers, n_ctx)
        decoder.load_state_dict(weights)
        rules = TokenRules.from_metadata(meta)
    except (SafetensorError, KeyError, ValueError, RuntimeError) as err:
        raise ValueError(f"{path}: not Whisper's decoder ({str(err).splitlines()[0]})") from None
    return decoder.eval(), rules


def loop_start(
    tokens: list[int], repeats: int = 4, longest: int = 30, shortest_span: int = 0
) -> int | None:
    """Where the repeats after the first copy of a loop begin, if ``tokens`` ends with
    one run of up to ``longest`` tokens said ``repeats`` times over (and more, until the
    copies span at least ``shortest_span`` tokens); else None.

    Greedy decoding of Whisper's decoder can fall into saying a phrase again and again
    ("he learned to learn to learn to learn ..."), above all from states it was not
    trained on; Whisper itself then decodes again at a higher temperature. Four times
    in a row is rare in speech ("no no no" is three); a looping sentence runs to 14
    tokens and more ("you're not going to be able to be in the same place."). But a word
    said four times is speech too ("words words words words"): ``shortest_span`` asks a
    short run for more copies before it counts as a loop."""
    for n in range(1, longest + 1):
        copies = max(repeats, -(-shortest_span // n))
        if len(tokens) < copies * n:
            continue
        tail = tokens[-n:]
        if all(tokens[-k * n : len(tokens) - (k - 1) * n] == tail for k in range(2, copies + 1)):
            return len(tokens) - (copies - 1) * n
    return None
