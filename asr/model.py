"""The Listen-Attend-Spell model with a unidirectional encoder, so that it can run online.

The encoder keeps its LSTM states and the frames still waiting to be stacked
by the pyramid between calls, so running it chunk by chunk gives exactly the
states of one whole-utterance call. Training runs the same modules over whole
padded batches with teacher forcing and soft attention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from asr.attention import build_attention, initial_alignment
from asr.config import DecoderConfig, EncoderConfig, ModelConfig
from asr.ctc_alignment import ctc_token_positions
from asr.frontend import frontend_dim
from asr.tokenizer import BLANK_ID, EOS_ID


@dataclass
class EncoderState:
    """What one stream carries between encoder calls: per layer, pending frames and (h, c)."""

    pending: list[Tensor]
    lstm: list[tuple[Tensor, Tensor] | None]


class Encoder(nn.Module):
    """Unidirectional LSTM stack; before layer i, ``reductions[i]`` frames are stacked (LAS pyramid)."""

    def __init__(self, cfg: EncoderConfig, input_dim: int) -> None:
        super().__init__()
        if not cfg.reductions or len(cfg.reductions) != cfg.layers:
            raise ValueError(
                f"encoder.reductions needs one factor per layer ({cfg.layers}), got {cfg.reductions}"
            )
        self.cfg = cfg
        self.input_dim = input_dim
        self.register_buffer("cmvn_mean", torch.zeros(input_dim))
        self.register_buffer("cmvn_std", torch.ones(input_dim))
        dims = [input_dim] + [cfg.units] * (cfg.layers - 1)
        self.lstms = nn.ModuleList(
            nn.LSTM(d * r, cfg.units, batch_first=True) for d, r in zip(dims, cfg.reductions)
        )
        self.dropout = nn.Dropout(cfg.dropout)

    @property
    def reduction(self) -> int:
        """Input frames per encoder state."""
        total = 1
        for r in self.cfg.reductions:
            total *= r
        return total

    def normalize(self, feats: Tensor) -> Tensor:
        return (feats - self.cmvn_mean) / self.cmvn_std

    def output_lengths(self, lengths: Tensor) -> Tensor:
        return torch.div(lengths, self.reduction, rounding_mode="floor")

    def initial_state(self, batch: int = 1) -> EncoderState:
        return EncoderState(
            pending=[
                torch.zeros(batch, 0, d, device=self.cmvn_mean.device) for d in self._layer_inputs()
            ],
            lstm=[None] * self.cfg.layers,
        )

    def _layer_inputs(self) -> list[int]:
        return [self.input_dim] + [self.cfg.units] * (self.cfg.layers - 1)

    def forward(
        self, feats: Tensor, state: EncoderState | None = None
    ) -> tuple[Tensor, EncoderState]:
        """Normalised features [B, T, F] -> states [B, T // reduction, units] (chunk-invariant)."""
        if state is None:
            state = self.initial_state(feats.shape[0])
        pending: list[Tensor] = []
        lstm_states: list[tuple[Tensor, Tensor] | None] = []
        x = feats
        for i, (lstm, r) in enumerate(zip(self.lstms, self.cfg.reductions)):
            x, rest = _stack(state.pending[i], x, r)
            pending.append(rest)
            if i > 0:
                x = self.dropout(x)
            if x.shape[1] > 0:
                x, hc = lstm(x, state.lstm[i])
                lstm_states.append(hc)
            else:
                x = x.new_zeros(x.shape[0], 0, self.cfg.units)
                lstm_states.append(state.lstm[i])
        return x, EncoderState(pending, lstm_states)

    def forward_streams(
        self, feats: list[Tensor], states: list[EncoderState]
    ) -> tuple[list[Tensor], list[EncoderState]]:
        """Chunks of many streams in one call: normalised features [1, T_i, F] and each stream's
        state -> its new states [1, n_i, units] and state. Each layer runs once for all streams
        that have input for it (a packed batch), so the weights are read once, not per stream:
        that is what lets a server's throughput grow with its number of sessions."""
        if len(feats) == 1:
            out, state = self(feats[0], states[0])
            return [out], [state]
        xs = list(feats)
        pending: list[list[Tensor]] = [[] for _ in feats]
        lstm_states: list[list[tuple[Tensor, Tensor] | None]] = [[] for _ in feats]
        for i, (lstm, r) in enumerate(zip(self.lstms, self.cfg.reductions)):
            for k, x in enumerate(xs):
                xs[k], rest = _stack(states[k].pending[i], x, r)
                pending[k].append(rest)
            active = [k for k, x in enumerate(xs) if x.shape[1] > 0]
            for k, x in enumerate(xs):
                if x.shape[1] == 0:
                    lstm_states[k].append(states[k].lstm[i])
                    xs[k] = x.new_zeros(1, 0, self.cfg.units)
            if not active:
                continue
            lengths = torch.tensor([xs[k].shape[1] for k in active])
            padded = nn.utils.rnn.pad_sequence([xs[k][0] for k in active], batch_first=True)
            if i > 0:
                padded = self.dropout(padded)
            zeros = padded.new_zeros(1, 1, self.cfg.units)
            h0, c0 = (
                torch.cat([(states[k].lstm[i] or (zeros, zeros))[j] for k in active], dim=1)
                for j in (0, 1)
            )
            packed = nn.utils.rnn.pack_padded_sequence(
                padded, lengths, batch_first=True, enforce_sorted=False
            )
            out, (h, c) = lstm(packed, (h0, c0))
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
            for row, k in enumerate(active):
                xs[k] = out[row : row + 1, : int(lengths[row])]
                lstm_states[k].append((h[:, row : row + 1], c[:, row : row + 1]))
        return xs, [EncoderState(p, hc) for p, hc in zip(pending, lstm_states)]


def _stack(pending: Tensor, x: Tensor, r: int) -> tuple[Tensor, Tensor]:
    """The pyramid: frames left from the last call, then ``x`` [B, T, D], stacked r at a time ->
    ([B, T' // r, D * r], the frames that do not fill a group yet)."""
    x = torch.cat([pending, x], dim=1)
    usable = x.shape[1] // r * r
    return x[:, :usable].reshape(x.shape[0], usable // r, x.shape[2] * r), x[:, usable:]


def _lstm_update(gates: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """nn.LSTMCell's update from its gate pre-activations [N, 4H] (input, forget, cell,
    output): the new (h, c)."""
    i, f, g, o = gates.chunk(4, 1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


@dataclass
class DecoderState:
    """Recurrent state of N hypotheses: per-layer (h, c), last token, last context."""

    h: list[Tensor]
    c: list[Tensor]
    token: Tensor
    context: Tensor

    def select(self, index: Tensor) -> DecoderState:
        return DecoderState(
            [h[index] for h in self.h],
            [c[index] for c in self.c],
            self.token[index],
            self.context[index],
        )


class Decoder(nn.Module):
    """LSTM decoder: s(i) = LSTM([embed(y(i-1)); c(i-1)], s(i-1)) (without c(i-1) when
    ``context_feedback`` is off); attention with query s(i)."""

    def __init__(
        self, cfg: DecoderConfig, model_cfg: ModelConfig, vocab_size: int, memory_dim: int
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.memory_dim = memory_dim
        input_dim = cfg.embed_dim + (memory_dim if cfg.context_feedback else 0)
        self.embed = nn.Embedding(vocab_size, cfg.embed_dim)
        self.cells = nn.ModuleList(
            nn.LSTMCell(cfg.units if i else input_dim, cfg.units) for i in range(cfg.layers)
        )
        self.attention = build_attention(cfg.units, memory_dim, model_cfg.attention)
        self.hidden = nn.Linear(cfg.units + memory_dim, cfg.embed_dim)
        self.out = nn.Linear(cfg.embed_dim, vocab_size)
        self.dropout = nn.Dropout(cfg.dropout)
        self._gate_table = torch.empty(0)  # see _token_gates
        self._gate_table_key: tuple[tuple[int, int], ...] = ()

    def initial_state(self, batch: int) -> DecoderState:
        device = self.embed.weight.device
        zeros = torch.zeros(batch, self.cfg.units, device=device)
        return DecoderState(
            [zeros] * self.cfg.layers,
            [zeros] * self.cfg.layers,
            torch.full((batch,), EOS_ID, dtype=torch.long, device=device),
            torch.zeros(batch, self.memory_dim, device=device),
        )

    def query(self, state: DecoderState) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """Advance the LSTM by the previous token (and context, with feedback): (query, new h, new c)."""
        hs, cs = [], []
        for i, cell in enumerate(self.cells):
            if i == 0:
                gates = self._token_gates(state.token)
                if self.cfg.context_feedback:
                    feedback = cell.weight_ih[:, self.cfg.embed_dim :]
                    gates = gates + F.linear(state.context, feedback)
                gates = gates + F.linear(state.h[0], cell.weight_hh)
            else:
                gates = F.linear(self.dropout(hs[-1]), cell.weight_ih, cell.bias_ih)
                gates = gates + F.linear(state.h[i], cell.weight_hh, cell.bias_hh)
            h, c = _lstm_update(gates, state.c[i])
            hs.append(h)
            cs.append(c)
        return hs[-1], hs, cs

    def _token_gates(self, token: Tensor) -> Tensor:
        """The first cell's gate inputs from the previous token, both biases included [N, 4H].

        Outside autograd they are rows of a table over the vocabulary, kept while the
        weights stay the same (their version counters tell): a search step then multiplies
        only the recurrent weights, half the first cell's product and most of its time
        for the one to four hypotheses of a step."""
        cell = self.cells[0]
        params = (self.embed.weight, cell.weight_ih, cell.bias_ih, cell.bias_hh)
        weight = cell.weight_ih[:, : self.cfg.embed_dim]
        if torch.is_grad_enabled():
            return F.linear(self.embed(token), weight, cell.bias_ih + cell.bias_hh)
        key = tuple((p.data_ptr(), p._version) for p in params)
        if self._gate_table_key != key:
            self._gate_table = F.linear(self.embed.weight, weight, cell.bias_ih + cell.bias_hh)
            self._gate_table_key = key
        return self._gate_table[token]

    def logits(self, query: Tensor, context: Tensor) -> Tensor:
        hidden = torch.tanh(self.hidden(self.dropout(torch.cat([query, context], dim=-1))))
        return self.out(self.dropout(hidden))

    def teacher_forced(
        self, memory: Tensor, mask: Tensor, tokens_in: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Soft attention: logits [B, U, V], attention weights and alignments alpha [B, U, T].

        The weights are what the context averages; the alignment is the expected
        monotonic boundary (the same tensor except for MoChA, whose weights
        spread each boundary over its chunk).
        """
        batch, steps = tokens_in.shape
        # Attention runs in float32 under mixed precision too: its energies and recurrence
        # are elementwise work that bfloat16 would only add casts to (and round).
        memory = memory.float()
        full_precision = torch.autocast(memory.device.type, enabled=False)
        with full_precision:
            keys = self.attention.keys(memory)
        if not self.cfg.context_feedback:
            queries = self._sequence_queries(tokens_in)
            with full_precision:
                contexts, alignments, weights = self.attention.soft_steps(
                    queries.float(), memory, keys, mask, initial_alignment(mask)
                )
            return self.logits(queries, contexts), weights, alignments
        state = self.initial_state(batch)
        alignment = initial_alignment(mask)
        all_logits, all_weights, all_alignments = [], [], []
        for i in range(steps):
            state = DecoderState(state.h, state.c, tokens_in[:, i], state.context)
            query, hs, cs = self.query(state)
            with full_precision:
                context, alignment, weights = self.attention.soft(
                    query.float(), memory, keys, mask, alignment
                )
            all_logits.append(self.logits(query, context))
            all_weights.append(weights)
            all_alignments.append(alignment)
            state = DecoderState(hs, cs, state.token, context)
        return (
            torch.stack(all_logits, 1),
            torch.stack(all_weights, 1),
            torch.stack(all_alignments, 1),
        )

    def _sequence_queries(self, tokens_in: Tensor) -> Tensor:
        """Queries [B, U, H] for all steps at once: the cells' own weights, run as one
        sequence LSTM per layer (the same recurrence ``query`` steps through)."""
        x = self.embed(tokens_in)
        zeros = x.new_zeros(1, x.shape[0], self.cfg.units)
        for i, cell in enumerate(self.cells):
            weights = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
            x, _, _ = torch.lstm(
                self.dropout(x) if i > 0 else x,
                (zeros, zeros),
                weights,
                True,  # has biases
                1,  # layers
                0.0,  # dropout
                self.training,
                False,  # bidirectional
                True,  # batch first
            )
        return x


@dataclass
class TeacherForced:
    """One teacher-forced pass: logits [B, U+1, V], attention weights and alignments
    [B, U+1, T'], the targets with EOS, and the encoder memory with its lengths."""

    logits: Tensor
    weights: Tensor
    alignments: Tensor
    tokens_out: Tensor
    memory: Tensor
    memory_lengths: Tensor


class Seq2Seq(nn.Module):
    """Encoder, attention decoder and an optional CTC head on the encoder."""

    def __init__(self, cfg: ModelConfig, vocab_size: int) -> None:
        super().__init__()
        if vocab_size < 4:
            raise ValueError(f"vocab_size must be at least 4 (3 specials + 1), got {vocab_size}")
        if cfg.alignment_weight > 0 and cfg.ctc_weight <= 0:
            raise ValueError(
                "model.alignment_weight needs the CTC head for its targets: set model.ctc_weight > 0"
            )
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.encoder = Encoder(cfg.encoder, frontend_dim(cfg))
        self.decoder = Decoder(cfg.decoder, cfg, vocab_size, cfg.encoder.units)
        self.ctc = nn.Linear(cfg.encoder.units, vocab_size) if cfg.ctc_weight > 0 else None

    @property
    def aligns_to_ctc(self) -> bool:
        """Whether the loss has the CTC-synchronous term (monotonic kinds with alignment_weight)."""
        return self.cfg.alignment_weight > 0 and self.decoder.attention.monotonic

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def set_cmvn(self, mean: Tensor, std: Tensor) -> None:
        self.encoder.cmvn_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.encoder.cmvn_std.copy_(torch.as_tensor(std, dtype=torch.float32))

    def encode(
        self,
        feats: Tensor,
        feat_lens: Tensor,
        feature_transform: Callable[[Tensor, Tensor], Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Raw features -> (memory [B, T', D], lengths [B]); ``feature_transform`` (e.g. SpecAugment) sees normalised features."""
        x = self.encoder.normalize(feats)
        if feature_transform is not None:
            x = feature_transform(x, feat_lens)
        memory, _ = self.encoder(x)
        return memory, self.encoder.output_lengths(feat_lens)

    def forward_teacher(
        self,
        feats: Tensor,
        feat_lens: Tensor,
        targets: Tensor,
        target_lens: Tensor,
        feature_transform: Callable[[Tensor, Tensor], Tensor] | None = None,
    ) -> TeacherForced:
        """Encoder and teacher-forced decoder on padded targets (without EOS)."""
        memory, mem_lens = self.encode(feats, feat_lens, feature_transform)
        if int(mem_lens.min()) < 1:
            raise ValueError(
                f"an utterance is shorter than one encoder state ({self.encoder.reduction} frames)"
            )
        states = torch.arange(memory.shape[1], device=memory.device)
        mask = states.unsqueeze(0) < mem_lens.unsqueeze(1)
        batch = targets.shape[0]
        eos = torch.full((batch, 1), EOS_ID, dtype=torch.long, device=targets.device)
        tokens_in = torch.cat([eos, targets], dim=1)
        tokens_out = torch.cat([targets, torch.zeros_like(eos)], dim=1)
        tokens_out[torch.arange(batch, device=targets.device), target_lens] = EOS_ID
        logits, weights, alignments = self.decoder.teacher_forced(memory, mask, tokens_in)
        return TeacherForced(logits, weights, alignments, tokens_out, memory, mem_lens)

    def compute_loss(
        self,
        feats: Tensor,
        feat_lens: Tensor,
        targets: Tensor,
        target_lens: Tensor,
        feature_transform: Callable[[Tensor, Tensor], Tensor] | None = None,
        label_smoothing: float = 0.0,
        normalizer: tuple[float, float] | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """Per-token cross entropy (plus ctc_weight x per-token CTC); targets 0-padded, without EOS.

        Both losses are sums divided by token counts: by default this batch's
        (attention tokens including EOS, CTC target tokens). Data-parallel
        training passes the global batch's counts as ``normalizer``, so the
        ranks' gradients add up to the gradient of the whole batch. With
        ``alignment_weight`` the CTC-synchronous term is added (per CTC token).
        """
        out = self.forward_teacher(feats, feat_lens, targets, target_lens, feature_transform)
        logits, tokens_out = out.logits, out.tokens_out
        valid = tokens_out != BLANK_ID
        att_tokens, ctc_tokens = normalizer or (
            float(valid.sum()),
            float(target_lens.sum().clamp(min=1)),
        )
        att_loss = (
            F.cross_entropy(
                logits[valid], tokens_out[valid], label_smoothing=label_smoothing, reduction="sum"
            )
            / att_tokens
        )
        stats = {
            "att_loss": float(att_loss.detach()),
            "tokens": int(valid.sum()),
            "accuracy": float((logits[valid].argmax(-1) == tokens_out[valid]).float().mean()),
        }
        loss = att_loss
        if self.ctc is not None:
            log_probs = F.log_softmax(self.ctc(out.memory), dim=-1)
            ctc_loss = (
                F.ctc_loss(
                    log_probs.transpose(0, 1),
                    targets,
                    out.memory_lengths,
                    target_lens,
                    blank=BLANK_ID,
                    reduction="sum",
                    zero_infinity=True,
                )
                / ctc_tokens
            )
            stats["ctc_loss"] = float(ctc_loss.detach())
            loss = (1 - self.cfg.ctc_weight) * att_loss + self.cfg.ctc_weight * ctc_loss
            if self.aligns_to_ctc:
                positions = self._confident(
                    ctc_token_positions(
                        log_probs.detach(), out.memory_lengths, targets, target_lens, BLANK_ID
                    ),
                    log_probs.detach(),
                    targets,
                )
                align_loss = (
                    self._alignment_loss(
                        out.alignments, self._delayed(positions, out.memory_lengths), target_lens
                    )
                    / ctc_tokens
                )
                stats["align_loss"] = float(align_loss.detach())
                loss = loss + self.cfg.alignment_weight * align_loss
        stats["loss"] = float(loss.detach())
        return loss, stats

    def _confident(self, positions: Tensor, log_probs: Tensor, targets: Tensor) -> Tensor:
        """Positions whose CTC posterior of the token is below alignment_min_posterior become -1."""
        frames = positions.clamp(min=0)
        rows = torch.arange(positions.shape[0], device=positions.device).unsqueeze(1)
        posterior = log_probs[rows, frames, targets].exp()
        keep = (positions >= 0) & (posterior >= self.cfg.alignment_min_posterior)
        return torch.where(keep, positions, -1)

    def _delayed(self, positions: Tensor, lengths: Tensor) -> Tensor:
        """Boundary targets alignment_delay states after the CTC spikes, within each utterance."""
        if self.cfg.alignment_delay == 0:
            return positions
        last = (lengths - 1).unsqueeze(1).to(positions.device)
        delayed = torch.minimum(positions + self.cfg.alignment_delay, last)
        return torch.where(positions >= 0, delayed, positions)

    def _alignment_loss(self, alignments: Tensor, positions: Tensor, target_lens: Tensor) -> Tensor:
        """CTC-synchronous loss, summed over tokens: -log of each token's boundary mass near its
        CTC frame, and -log(1 - mass) for the end-of-sentence step.

        The second term teaches what hard decoding needs at the end: after the last
        token no state fires, the scan runs off the memory and the decoder, given the
        zero context, emits EOS.
        """
        batch, units = positions.shape
        frames = torch.arange(alignments.shape[2], device=alignments.device)
        near = (frames.view(1, 1, -1) - positions.unsqueeze(2)).abs() <= self.cfg.alignment_window
        mass = (alignments[:, :units] * near).sum(2)
        aligned = positions >= 0
        loss = -torch.log(mass[aligned].clamp(min=1e-6)).sum()
        tokens = torch.arange(units, device=positions.device).unsqueeze(0) < target_lens.unsqueeze(
            1
        )
        ends = (aligned | ~tokens).all(1)  # CTC aligned every real token of the utterance
        eos_mass = alignments[torch.arange(batch, device=positions.device), target_lens].sum(1)[
            ends
        ]
        return loss - torch.log((1 - eos_mass).clamp(min=1e-6)).sum()

    @torch.no_grad()
    def attention_maps(
        self, feats: Tensor, feat_lens: Tensor, targets: Tensor, target_lens: Tensor
    ) -> Tensor:
        """Soft attention weights [B, U+1, T'] under teacher forcing (for plots)."""
        return self.forward_teacher(feats, feat_lens, targets, target_lens).weights
