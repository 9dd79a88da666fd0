"""Whisper's audio encoder in torch: full attention (the teacher) and chunk-causal attention
with a key/value cache (the streaming student), from the same weights.

Layout, as in Whisper: two convolutions (kernel 3; the second with stride 2, so
one state per 20 ms), sinusoidal positions, pre-norm transformer layers, a final
layer norm. The streaming form keeps Whisper's convolutions, which look one
state (20 ms) ahead, and masks the attention: a state sees every state of its own
chunk and ``left_context`` states before the chunk, nothing later. A stream runs
chunk by chunk through :class:`EncoderStream`, and offline decoding is the same
stream fed at once, so the two agree bit for bit; :meth:`WhisperEncoder.forward`
runs whole padded batches under the same mask for training.

Positions: Whisper's sinusoids end at 30 s (1500 states). A stream numbers its
states modulo that table and keeps at most ``left_context`` states (fewer than
1500 - ``chunk``) in its cache, so memory stays bounded and no attention window
ever holds two states of one position; students learn the wrap by distilling
with random position offsets (``position_offset`` in :meth:`forward`).
"""

from __future__ import annotations

import copy
import itertools
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from torch import Tensor, nn

WEIGHTS_FILE = "encoder.safetensors"
LAYER_LINEARS = ("qkv", "out", "fc1", "fc2")  # each layer's linear layers


@dataclass(frozen=True)
class WhisperDims:
    """The encoder's shape, stored in the weights file's metadata."""

    n_mels: int = 80
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    n_ctx: int = 1500

    def to_metadata(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.__dict__.items()}

    @classmethod
    def from_metadata(cls, meta: dict[str, str], source: str) -> WhisperDims:
        try:
            return cls(**{k: int(meta[k]) for k in cls.__dataclass_fields__})
        except (KeyError, ValueError) as err:
            raise ValueError(f"{source}: metadata lacks the encoder's dimensions ({err})") from None


class Layer(nn.Module):
    """Pre-norm transformer layer; q, k and v in one fused projection (as CTranslate2 stores it)."""

    def __init__(self, dims: WhisperDims) -> None:
        super().__init__()
        d = dims.d_model
        self.heads = dims.n_heads
        self.attn_norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ffn_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def split(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """[B, T, d] -> q, k, v, each [B, heads, T, d / heads]."""
        b, t, _ = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        return q, k, v

    def finish(self, x: Tensor, attended: Tensor) -> Tensor:
        """Residual of the attention output [B, heads, T, dh], then the feed-forward block."""
        b, _, t, _ = attended.shape
        x = x + self.out(attended.transpose(1, 2).reshape(b, t, -1))
        return x + self.fc2(F.gelu(self.fc1(self.ffn_norm(x))))

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        q, k, v = self.split(x)
        return self.finish(x, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@dataclass(frozen=True)
class Streaming:
    """The streaming mask: ``chunk`` states (20 ms each) decided together, ``left_context``
    states before each chunk visible to it; and ``prime``, states of silence (log-mel frames
    of value ``silence``) a stream is encoded from before its first audio, then dropped.

    Why the prime: without a past, a stream's first chunk attends to its own speech alone,
    and the student reads it far worse than the same speech after a chunk of silence
    (Whisper's decoder over the student: real dev 54.9% -> 44.6%, research record "A
    stream primed with silence"); attention that has somewhere quiet to rest, as a
    language model's attention sinks (Xiao et al., ICLR 2024)."""

    chunk: int = 8
    left_context: int = 500
    prime: int = 0
    silence: float = 0.0

    def check(self, n_ctx: int) -> None:
        if self.chunk < 1 or self.left_context < 0:
            raise ValueError(f"need chunk >= 1 and left_context >= 0, got {self}")
        if self.prime < 0 or self.prime % self.chunk:
            raise ValueError(f"the prime must be a whole number of chunks, got {self}")
        if self.chunk + self.left_context > n_ctx:
            raise ValueError(
                f"chunk + left_context must be at most {n_ctx} states (the position table), "
                f"got {self.chunk} + {self.left_context}"
            )

    def primed(self, mel: Tensor) -> Tensor:
        """Log-mel frames [..., T, n_mels] after the prime's 2 ``prime`` frames of silence."""
        silence = mel.new_full((*mel.shape[:-2], 2 * self.prime, mel.shape[-1]), self.silence)
        return torch.cat([silence, mel], dim=-2)

    def mask(self, length: int, device: torch.device | None = None) -> Tensor:
        """[length, length] bool, True where query i may attend key j."""
        index = torch.arange(length, device=device)
        start = index // self.chunk * self.chunk
        keys = index.unsqueeze(0)
        return (keys < (start + self.chunk).unsqueeze(1)) & (
            keys >= (start - self.left_context).unsqueeze(1)
        )


class WhisperEncoder(nn.Module):
    def __init__(self, dims: WhisperDims) -> None:
        super().__init__()
        self.dims = dims
        self.conv1 = nn.Conv1d(dims.n_mels, dims.d_model, 3, padding=1)
        self.conv2 = nn.Conv1d(dims.d_model, dims.d_model, 3, stride=2, padding=1)
        self.register_buffer("positions", torch.zeros(dims.n_ctx, dims.d_model))
        self.layers = nn.ModuleList(Layer(dims) for _ in range(dims.n_layers))
        self.norm = nn.LayerNorm(dims.d_model)

    @staticmethod
    def output_lengths(mel_lengths: Tensor) -> Tensor:
        """States per utterance: one per two mel frames, rounded up (the strided convolution)."""
        return torch.div(mel_lengths + 1, 2, rounding_mode="floor")

    def forward(
        self,
        mel: Tensor,
        lengths: Tensor | None = None,
        streaming: Streaming | None = None,
        position_offset: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Log-mel [B, T, n_mels] -> (states [B, ceil(T / 2), d_model], lengths).

        Full attention without ``streaming`` (at most 30 s, Whisper's table);
        with it, the streaming mask and its prime (encoded first, its states dropped), and
        positions are taken modulo the table, shifted by ``position_offset`` [B] (0 by default).
        """
        prime = 0
        if streaming is not None and streaming.prime:
            prime, mel = streaming.prime, streaming.primed(mel)
            lengths = None if lengths is None else lengths + 2 * prime
        batch, frames, _ = mel.shape
        if lengths is None:
            lengths = torch.full((batch,), frames, device=mel.device)
        out_lengths = self.output_lengths(lengths)
        steps = (frames + 1) // 2
        if streaming is None and steps > self.dims.n_ctx:
            raise ValueError(
                f"full attention covers at most {self.dims.n_ctx} states (30 s), got {steps}"
            )
        time = torch.arange(frames, device=mel.device)
        valid = (time.unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(1)
        x = F.gelu(self.conv1(mel.transpose(1, 2) * valid)) * valid  # conv2's zero padding
        x = F.gelu(self.conv2(x)).transpose(1, 2)
        index = torch.arange(steps, device=mel.device).unsqueeze(0)
        if position_offset is not None:
            index = index + position_offset.unsqueeze(1)
        x = x + self.positions[index % self.dims.n_ctx]
        states = torch.arange(steps, device=mel.device)
        mask = (states.unsqueeze(0) < out_lengths.unsqueeze(1))[:, None, None, :]
        if streaming is not None:
            streaming.check(self.dims.n_ctx)
            mask = mask & streaming.mask(steps, mel.device)
        # a padding state may see no valid key: let it see itself, so no row is empty (NaN)
        mask = mask | torch.eye(steps, dtype=torch.bool, device=mel.device)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)[:, prime:], out_lengths - prime

    def stream(self, streaming: Streaming) -> EncoderStream:
        return EncoderStream(self, streaming)

    @torch.no_grad()
    def encode_whole(self, mel: Tensor, streaming: Streaming | None) -> Tensor:
        """States [ceil(T / 2), d_model] of one whole utterance's log-mel [T, n_mels].

        Under the streaming mask and within 30 s, one masked pass gives the states the
        stream gives (to float rounding) at a third of its cost; longer audio streams.
        Full attention reads long audio in 30 s windows, as Whisper does.
        """
        limit = 2 * self.dims.n_ctx
        if streaming is None:
            return torch.cat([self(w[None])[0][0] for w in torch.split(mel, limit)])
        if len(mel) + 2 * streaming.prime <= limit:
            return self(mel[None], streaming=streaming)[0][0]
        stream = self.stream(streaming)
        return torch.cat([stream.accept(mel), stream.finish()])


class EncoderStream:
    """One stream through the chunk-causal encoder: log-mel frames in, states out.

    A chunk is encoded once its last state's convolution has its input (mel
    frame 2 j + 2 for state j), so the encoder adds one state (20 ms) of lookahead
    to the chunk. What it holds: at most ``2 chunk + 3`` mel frames and, per
    layer, a preallocated ring of ``left_context + chunk`` keys and values: a chunk
    writes over the oldest slots and attends to every slot its mask allows (the
    order of keys does not matter to attention, their positions are in them).

    ``restart``, when set, is asked before each chunk of states [start, end) whether
    the stream starts afresh at the chunk's first state: it then forgets every
    earlier state and counts positions from there, as an utterance of its own would
    (the caller decides from the audio, e.g. after a pause, so any chunking gives
    the same).
    """

    def __init__(self, encoder: WhisperEncoder, streaming: Streaming) -> None:
        streaming.check(encoder.dims.n_ctx)
        self.encoder = encoder
        self.streaming = streaming
        param = encoder.positions  # float, on the encoder's device
        self._mel = param.new_zeros(0, encoder.dims.n_mels)  # frames from self._mel_start on
        self._mel_start = 0
        self._mel_count = 0
        self.states = 0  # states produced
        dims = encoder.dims
        slots = streaming.left_context + streaming.chunk
        ring = (dims.n_layers, 1, dims.n_heads, slots, dims.d_model // dims.n_heads)
        self._keys, self._values = param.new_zeros(ring), param.new_zeros(ring)
        self._slot_state = torch.full((slots,), -1, dtype=torch.long)  # -1: empty
        self._write = 0  # the oldest slot
        self._finished = False
        self.restart: Callable[[int, int], bool] | None = None
        self.origin = 0  # the state positions and context count from (the last restart)
        self.restarts: list[int] = []  # where it restarted, until the caller takes them
        # the prime's states come first and are dropped: ``states`` counts them, while the
        # caller's states (returned, and asked of ``restart``) count from the audio's first
        if streaming.prime:
            self._add(streaming.primed(self._mel), False)

    def accept(self, mel: Tensor) -> Tensor:
        """Add frames [n, n_mels]; return the states [m, d_model] of every chunk now complete."""
        return encode_streams([self], [mel], [False])[0]

    def finish(self) -> Tensor:
        """The states still owed (the last chunk may be short); the end is zero-padded."""
        return encode_streams([self], [self._mel[:0]], [True])[0]

    def _add(self, mel: Tensor, finish: bool) -> None:
        if self._finished:
            raise ValueError("finish() called twice" if finish else "accept() after finish()")
        self._mel = torch.cat([self._mel, mel.to(self._mel.dtype)])
        self._mel_count += len(mel)
        self._finished = finish

    def _next_chunk(self) -> int:
        """States in the next chunk that can be encoded now (0: none)."""
        chunk = self.streaming.chunk
        if 2 * (self.states + chunk) < self._mel_count:  # mel frame 2 j + 2 of its last state
            return chunk
        if self._finished:
            return min(chunk, (self._mel_count + 1) // 2 - self.states)
        return 0

    def _window(self, n: int) -> tuple[Tensor, Tensor]:
        """The next chunk's mel frames 2 first - 2 .. 2 (first + n), zero outside the audio (the
        convolutions' padding), and which of conv1's outputs lie inside the audio."""
        first = self.states
        lo, hi = 2 * first - 2, 2 * (first + n) + 1
        window = self._mel.new_zeros(hi - lo, self.encoder.dims.n_mels)
        have_lo, have_hi = max(lo, 0), min(hi, self._mel_count)
        window[have_lo - lo : have_hi - lo] = self._mel[
            have_lo - self._mel_start : have_hi - self._mel_start
        ]
        conv_time = torch.arange(lo + 1, hi - 1)  # conv1 outputs 2 first - 1 .. 2 (first + n) - 1
        return window, (conv_time >= 0) & (conv_time < self._mel_count)

    def _store(self, n: int) -> tuple[Tensor, Tensor]:
        """Claim the ring's slots for the next chunk of n states -> (their indices, the additive
        attention mask [1, 1, 1, filled] over the slots filled so far), shared by every layer.

        The ring fills from slot 0, so until it wraps only its first ``filled`` slots hold
        keys; attending to just those costs a short stream what its length needs."""
        capacity = len(self._slot_state)
        slots = (self._write + torch.arange(n)) % capacity
        self._slot_state[slots] = torch.arange(self.states, self.states + n)
        filled = min(self.states + n, capacity)
        oldest = max(self.origin, self.states - self.streaming.left_context)
        hidden = self._slot_state[:filled] < oldest
        mask = torch.zeros(filled, dtype=self._keys.dtype).masked_fill_(hidden, float("-inf"))
        return slots, mask.view(1, 1, 1, -1)

    def _attend(
        self, i: int, q: Tensor, k: Tensor, v: Tensor, slots: Tensor, mask: Tensor
    ) -> Tensor:
        """Layer i's attention for this stream's chunk: store its keys and values in the ring,
        then attend over the filled slots within the left context."""
        self._keys[i][:, :, slots] = k
        self._values[i][:, :, slots] = v
        filled = mask.shape[-1]
        return F.scaled_dot_product_attention(
            q, self._keys[i][:, :, :filled], self._values[i][:, :, :filled], attn_mask=mask
        )

    def _advance(self, n: int) -> None:
        self._write = (self._write + n) % len(self._slot_state)
        self.states += n
        # keep mel frames from 2 states - 2 on: the next chunk's window starts there
        drop = max(0, 2 * self.states - 2 - self._mel_start)
        self._mel = self._mel[drop:]
        self._mel_start += drop


@torch.no_grad()
def encode_streams(
    streams: Sequence[EncoderStream], mels: Sequence[Tensor], finish: Sequence[bool]
) -> list[Tensor]:
    """New log-mel frames [n, n_mels] for several streams of one encoder (``finish``: and
    that stream ends there) -> each stream's new states [m, d_model].

    Chunks are encoded in rounds: each round takes the next chunk of every stream that
    has one, and chunks of one size go through the convolutions and the linear layers
    as one batch (the weights are read once for all streams: what lets a server's
    throughput grow with its sessions); attention runs per stream, over its own ring.
    One stream alone goes through the same code with a batch of one, so a stream fed
    in any chunking gives the same states bit for bit.
    """
    for stream, mel, last in zip(streams, mels, finish):
        stream._add(mel, last)
    before = [stream.states for stream in streams]
    out: list[list[Tensor]] = [[] for _ in streams]
    while True:
        sizes: dict[int, list[int]] = {}
        for k, stream in enumerate(streams):
            n = stream._next_chunk()
            if n > 0:
                sizes.setdefault(n, []).append(k)
        if not sizes:
            break
        for n, members in sizes.items():
            states = _encode_chunks([streams[k] for k in members], n)
            for row, k in enumerate(members):
                out[k].append(states[row])
    empty = streams[0]._mel.new_zeros(0, streams[0].encoder.dims.d_model)
    # a prime's states (the stream's first) are the stream's own
    return [
        torch.cat(o)[max(0, stream.streaming.prime - start) :] if o else empty
        for o, stream, start in zip(out, streams, before)
    ]


def _encode_chunks(streams: list[EncoderStream], n: int) -> Tensor:
    """The next chunk of n states of each stream, as one batch -> [B, n, d_model]."""
    enc = streams[0].encoder
    windows, inside = zip(*(s._window(n) for s in streams))
    x = F.gelu(_conv_as_linear(torch.stack(windows), enc.conv1, 1))
    x = x * torch.stack(inside).unsqueeze(2)  # conv2's zero padding
    x = F.gelu(_conv_as_linear(x, enc.conv2, 2))
    for s in streams:
        first = s.states - s.streaming.prime  # restarts speak of the audio's states
        fresh = s.states > max(s.origin, s.streaming.prime)
        if s.restart is not None and fresh and s.restart(first, first + n):
            s.origin = s.states
            s.restarts.append(first)
    index = torch.stack([torch.arange(n) + (s.states - s.origin) for s in streams])
    x = x + enc.positions[index % enc.dims.n_ctx]
    slots, masks = zip(*(s._store(n) for s in streams))
    for i, layer in enumerate(enc.layers):
        q, k, v = layer.split(x)
        attended = torch.cat(
            [
                s._attend(i, q[b : b + 1], k[b : b + 1], v[b : b + 1], slots[b], masks[b])
                for b, s in enumerate(streams)
            ]
        )
        x = layer.finish(x, attended)
    for s in streams:
        s._advance(n)
    return enc.norm(x)


def _conv_as_linear(x: Tensor, conv: nn.Module, stride: int) -> Tensor:
    """``conv`` (no padding) over x [B, T, C_in] -> [B, T', C_out], as one matrix product of
    the stacked input windows: on a chunk's few frames about three times faster on a CPU
    thread than torch's convolution, which takes its slow general path there."""
    windows = x.unfold(1, conv.kernel_size[0], stride)  # [B, T', C_in, kernel]: weight layout
    windows = windows.reshape(*windows.shape[:2], -1)
    if isinstance(conv, Int8Conv):
        return conv.linear(windows)
    assert isinstance(conv, nn.Conv1d)
    weight = conv.weight.view(conv.out_channels, -1)
    return per_stream(lambda item: F.linear(item, weight, conv.bias), windows)


def per_stream(product: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """``product`` over each item of the batch x [B, ...] alone, for the reason PerItem gives."""
    if len(x) == 1:
        return product(x)
    return torch.cat([product(item) for item in x.split(1)])


class PerItem(nn.Module):
    """A linear layer (float, or torch's dynamic int8) applied to each item of the batch
    alone, so that every stream's states are the same whatever it is batched with: the
    rounding of a float matrix product can depend on how many rows it has (oneDNN's AVX-512
    and AMX kernels), dynamic int8 scales a call's activations by their largest value (a
    loud session would set a quiet one's precision), and one part in a thousand is enough to
    change a transcript. Products of one chunk's few rows cost about what a shared call's
    share does, while norms and the rest stay batched."""

    def __init__(self, linear: nn.Module) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, x: Tensor) -> Tensor:
        return per_stream(self.linear, x)


class Int8Product:
    """The integer product ``x[M, K] @ rows[N, K].T`` of :class:`Int8Linear`, as floats.

    Two kernels give the same exact sums: oneDNN's int8 matmul on weights packed once, and
    ``torch._int_mm``, which packs them on every call. Which is faster depends on the CPU,
    by two orders of magnitude: on Intel's AVX-512 and AMX machines oneDNN's packed kernel
    saved a third of ``_int_mm``'s time on a chunk's rows, while on an AMD EPYC (AVX-512
    VNNI) oneDNN falls back to its reference kernel (133 ms against ``_int_mm``'s 0.07 ms
    for 8 x 512 x 2048, a stream 8x slower than real time). So each process times both
    once, on a chunk-sized product, and keeps the faster (:func:`packed_int8_is_faster`)."""

    def __init__(self, rows: Tensor, packed: bool | None = None) -> None:
        """``packed``: oneDNN's kernel (True) or ``_int_mm`` (False); None: the faster here."""
        if packed is None:
            packed = packed_int8_is_faster()
        # only the chosen kernel's layout is kept: opaque packed [out, in], or [in, out]
        self.weights = (
            torch.ops.onednn.qlinear_prepack(rows, None) if packed else rows.t().contiguous()
        )
        self.packed = packed
        out = len(rows)
        self._unit = torch.ones(out), torch.zeros(out, dtype=torch.long)

    def __call__(self, quantised: Tensor) -> Tensor:
        if not self.packed:
            return torch._int_mm(quantised, self.weights).float()
        ones, zeros = self._unit
        return torch.ops.onednn.qlinear_pointwise(
            quantised,
            1.0,
            0,
            self.weights,
            ones,
            zeros,
            None,
            1.0,
            0,
            torch.float32,
            "none",
            [],
            "",
        )


_PACKED_INT8_IS_FASTER: bool | None = None


def packed_int8_is_faster() -> bool:
    """Whether oneDNN's packed int8 matmul beats ``torch._int_mm`` on this CPU: the median
    of three calls each on one chunk's states through a 512 x 2048 layer, once a process."""
    global _PACKED_INT8_IS_FASTER
    if _PACKED_INT8_IS_FASTER is None:
        generator = torch.Generator().manual_seed(0)
        rows = torch.randint(-127, 128, (2048, 512), dtype=torch.int8, generator=generator)
        x = torch.randint(-127, 128, (8, 512), dtype=torch.int8, generator=generator)
        onednn, int_mm = Int8Product(rows, packed=True), Int8Product(rows, packed=False)
        _PACKED_INT8_IS_FASTER = _median_seconds(lambda: onednn(x)) < _median_seconds(
            lambda: int_mm(x)
        )
    return _PACKED_INT8_IS_FASTER


def _median_seconds(call: Callable[[], Tensor], repeats: int = 3) -> float:
    """Median wall time of ``call`` after one warm-up call."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


class Int8Linear(nn.Module):
    """A linear layer in int8: weights quantised per output row once, activations per row
    (per state) on every call, one integer matrix product, scales and bias applied after.

    Integer products are exact and everything else is element by element, so a row's
    output never depends on the rows it is computed with: streams batch together into one
    product, whose weights are read once for all of them, and each still gets its states
    alone bit for bit. Per-row scales also keep a quiet state's precision whatever is loud
    next to it. The product is :class:`Int8Product`, whichever kernel is fast here."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        weight = weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127
        self.product = Int8Product(torch.round(weight / scale.unsqueeze(1)).to(torch.int8))
        self.register_buffer("scale", scale)
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())

    @classmethod
    def of(cls, linear: nn.Linear) -> Int8Linear:
        return cls(linear.weight, linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, x.shape[-1])
        x_scale = rows.abs().amax(dim=1, keepdim=True).clamp_(min=1e-12).div_(127)
        quantised = torch.div(rows, x_scale).round_().to(torch.int8)
        y = self.product(quantised).mul_(x_scale).mul_(self.scale)
        if self.bias is not None:
            y = y.add_(self.bias)
        return y.view(*x.shape[:-1], -1)


class Int8Conv(nn.Module):
    """A convolution of the encoder in int8: its windows' product (see ``_conv_as_linear``)
    through :class:`Int8Linear`."""

    def __init__(self, conv: nn.Conv1d) -> None:
        super().__init__()
        self.kernel_size = conv.kernel_size
        self.stride = conv.stride[0]
        self.padding = int(conv.padding[0])  # type: ignore[index]
        self.linear = Int8Linear(conv.weight.view(conv.out_channels, -1), conv.bias)

    def forward(self, x: Tensor) -> Tensor:
        """[B, C_in, T] -> [B, C_out, T'], as the float convolution (whole-utterance passes)."""
        padded = F.pad(x, (self.padding, self.padding)).transpose(1, 2)
        return _conv_as_linear(padded, self, self.stride).transpose(1, 2)


def per_item(encoder: WhisperEncoder) -> WhisperEncoder:
    """The encoder with each layer's linear layers applied stream by stream (:class:`PerItem`),
    as streams batched together need (in place)."""
    for layer in encoder.layers:
        for name in LAYER_LINEARS:
            setattr(layer, name, PerItem(getattr(layer, name)))
    return encoder


def int8_linears(encoder: WhisperEncoder, names: Sequence[str] = LAYER_LINEARS) -> WhisperEncoder:
    """A copy whose layers' ``names`` linear layers are :class:`Int8Linear`; every other
    tensor is the original's own, not copied (a copy for inference costs its int8 weights)."""
    shared = {id(t): t for t in itertools.chain(encoder.parameters(), encoder.buffers())}
    copied = copy.deepcopy(encoder, shared).eval()
    for layer in copied.layers:
        for name in names:
            setattr(layer, name, Int8Linear.of(getattr(layer, name)))
    return copied


def quantized(encoder: WhisperEncoder, rows: bool = True) -> WhisperEncoder:
    """A copy in int8 for streaming (chunks go through ``encode_streams``); attention and
    norms stay float. ``rows``: convolutions and linear layers as :class:`Int8Linear`, a
    batch of streams at about a third of the float time on one CPU thread. Otherwise the
    linear layers alone, through torch's dynamic quantisation per stream (:class:`PerItem`),
    as the frames of models trained before ``rows`` were made."""
    if not rows:
        with warnings.catch_warnings():
            # torch announces the quantisation API's deprecation on every load; a command
            # that prints transcripts must not print that too
            warnings.simplefilter("ignore", (UserWarning, DeprecationWarning))
            dynamic = torch.ao.quantization.quantize_dynamic(
                copy.deepcopy(encoder).eval(), {nn.Linear}, dtype=torch.qint8
            )
        return per_item(dynamic)
    copied = int8_linears(encoder)
    copied.conv1 = Int8Conv(encoder.conv1)  # type: ignore[assignment]
    copied.conv2 = Int8Conv(encoder.conv2)  # type: ignore[assignment]
    return copied


def weights_file(path: str | Path) -> Path:
    """The weights file ``path`` names: a directory's ``encoder.safetensors``, or the file."""
    path = Path(path)
    return path / WEIGHTS_FILE if path.is_dir() or not path.suffix else path


def weights_metadata(path: str | Path) -> dict[str, str]:
    """A safetensors file's metadata (what a student was distilled as, what it was learnt
    on), a ValueError if the file cannot be read as one."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except SafetensorError as err:
        raise ValueError(f"{path}: unreadable weights ({err})") from None


def load_encoder(path: str | Path) -> WhisperEncoder:
    """Load weights written by ``asr import-whisper`` or ``asr distill`` (a directory holding
    ``encoder.safetensors``, or the file itself) in float32."""
    path = weights_file(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing (`asr import-whisper` writes the teacher, `asr distill` students)"
        )
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            weights = {k: f.get_tensor(k).float() for k in f.keys()}
    except SafetensorError as err:
        raise ValueError(f"{path}: unreadable weights ({err})") from None
    dims = WhisperDims.from_metadata(metadata, str(path))
    encoder = WhisperEncoder(dims)
    try:
        encoder.load_state_dict(weights)
    except RuntimeError as err:
        raise ValueError(
            f"{path}: weights do not fit the encoder: {str(err).splitlines()[0]}"
        ) from None
    return encoder.eval()
