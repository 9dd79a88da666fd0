"""A prototype: hard monotonic attention that decides *when* Whisper's decoder speaks.

``bench/decoder_ceiling.py`` shows Whisper-base's decoder reading the streaming student's
states of the voices it was distilled on better than the LSTM decoder learnt from
synthetic speech (25.84% against 35.94% WER on seen voices). Whisper's decoder
reads a whole window, though; this prototype makes it stream with the method of Raffel et
al. (2017). A monotonic energy over LAS-style LSTM states (one per 40 ms, from the
student's states) and a query LSTM over the tokens said so far is scanned from a persistent
pointer: the first state j with p > 0.5 emits the next token, which Whisper's decoder picks
from the states up to j (the memory cut there, the encoded silence after it, as
``WhisperTextDecoder.cut`` gives). Running off the end of the audio waits; at the end of
the utterance the rest is read from the whole memory.

Training is the soft (expected) form of that process and needs no alignments: with
``P[i, j]`` Whisper's probability of token i given the tokens before it and the memory cut
after state j (computed once per utterance, the decoder frozen), the loss of token i is

    -log( sum_j alpha(i, j) P[i, j] + (1 - sum_j alpha(i, j)) P[i, end] )
      + latency * (sum_j alpha(i, j) j + (1 - sum_j alpha(i, j)) J) / J

where alpha is the soft monotonic alignment (``asr.attention.soft_monotonic_alignment``)
and the missing mass emits at the end. The tokens are Whisper's own transcript of the
student's states (what the decoder will say), ending with end-of-text.

It prints, per held-out manifest: Whisper's decoder on the whole memory (offline, the
ceiling), the streaming prototype, the share of tokens emitted before the audio ended,
and how many states after the first state from which Whisper would pick the token it
emitted each one was emitted (median and p95, in ms).

    python bench/monotonic_speller.py --train data/live/train.jsonl --train-limit 600 \\
        --test data/live/test_seen_voices.jsonl --test-limit 100 --minutes 10

With ``--confidence P ...`` instead of ``--train`` nothing is learnt: Whisper's certainty
alone decides when (:func:`confident_stream`), the baseline a learnt policy must beat.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import math
import pickle
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.attention import MonotonicEnergy, soft_monotonic_alignment  # noqa: E402
from asr.bundle import load_model  # noqa: E402
from asr.speller import CHUNK_STATES, NextToken, metadata_for  # noqa: E402
from asr.whisper_decoder import WhisperTextDecoder, loop_start  # noqa: E402
from asr.whisper_features import SAMPLE_RATE  # noqa: E402
from bench.decoder_ceiling import Encode, WhisperDecoder, encoders, wer  # noqa: E402
from bench.real_speech import DEFAULT_CACHE, WHEEL_CACHE, whisper_ct2_dir  # noqa: E402
from training.dataset import entry_audio  # noqa: E402
from training.manifest import read_manifest  # noqa: E402

STRIDE = 2  # student states (20 ms) per policy state (40 ms)
STATE_MS = 20 * STRIDE
CUTS_PER_BATCH = 16


@dataclass
class Utterance:
    """One utterance's student states, Whisper's tokens of them and their P matrix."""

    text: str
    states: np.ndarray  # [T, 512] student states of the speech
    tokens: list[int]  # Whisper's transcript of the whole memory (no end-of-text)
    log_p: np.ndarray  # [L + 1, J + 1]: log P(token i | cut after policy state j); last: end


class Speller:
    """Whisper's decoder over one utterance's memory, cut where the policy says, at the
    ends of the student's streaming chunks (``chunk`` states each)."""

    def __init__(self, whisper: WhisperDecoder, silence: np.ndarray, chunk: int) -> None:
        self.whisper = whisper
        self.decoder = whisper.decoder
        self.silence_states = silence
        self.silence = self.decoder.memory(torch.from_numpy(silence)[None])
        self.chunk = chunk

    @classmethod
    def of_bundle(cls, whisper: WhisperDecoder, model: Path) -> tuple[Speller, dict[str, Encode]]:
        """The speller over a bundle's student, and the bundle's encoders
        (``decoder_ceiling.encoders``)."""
        recognizer = load_model(model)
        encode = encoders(model, recognizer)
        assert recognizer.frontend is not None
        silence = encode["teacher"](np.zeros(0, dtype=np.float32))
        return cls(whisper, silence, recognizer.frontend.cfg.whisper.chunk), encode

    def chunk_ends(self, states: int) -> list[int]:
        """For each policy state, the student states available once its chunk has arrived."""
        count = math.ceil(states / STRIDE)
        step = self.chunk
        return [min(math.ceil(STRIDE * (j + 1) / step) * step, states) for j in range(count)]

    def memory(self, states: np.ndarray) -> list[tuple[Tensor, Tensor]]:
        window = self.silence_states.copy()
        window[: len(states)] = states[: len(window)]
        return self.decoder.memory(torch.from_numpy(window)[None])

    @torch.no_grad()
    def read(
        self, memory, tokens: list[int], ends: list[int], pick: Callable[[Tensor], Tensor]
    ) -> np.ndarray:
        """``pick`` of Whisper's log-probabilities [N, len(tokens) + 1, vocab] (after the
        prompt and after each of ``tokens``) under memories cut at each of ``ends``, a batch
        of cuts at a time: [..., len(ends)]."""
        sequence = torch.tensor([self.whisper.prompt + tokens])
        rows = []
        for first in range(0, len(ends), CUTS_PER_BATCH):
            batch = torch.tensor(ends[first : first + CUTS_PER_BATCH])
            cut = WhisperTextDecoder.cut(memory, self.silence, batch)
            out = self.decoder(sequence.expand(len(batch), -1), cut)
            rows.append(pick(out[:, len(self.whisper.prompt) - 1 :]))
        return torch.cat(rows).T.numpy()

    def log_p(self, memory, tokens: list[int], ends: list[int]) -> np.ndarray:
        """log P of each of ``tokens`` + end-of-text under memories cut at ``ends``:
        [len(tokens) + 1, len(ends)]."""
        targets = torch.tensor(tokens + [self.whisper.end])

        def target_log_p(out: Tensor) -> Tensor:
            return out.gather(2, targets.expand(len(out), -1).unsqueeze(2))[..., 0]

        return self.read(memory, tokens, ends, target_log_p)

    @torch.no_grad()
    def next_log_p(self, memory, tokens: list[int], end: int) -> Tensor:
        """Whisper's log-probabilities [vocab] of the token after ``tokens``, the memory cut
        at ``end``."""
        cut = WhisperTextDecoder.cut(memory, self.silence, torch.tensor([end]))
        return self.decoder(torch.tensor([self.whisper.prompt + tokens]), cut)[0, -1]

    def next_token(self, memory, tokens: list[int], end: int) -> int:
        return int(self.next_log_p(memory, tokens, end).argmax())


def per_chunk(ends: list[int], rows: Callable[[list[int]], np.ndarray]) -> np.ndarray:
    """``rows(memory cut at e)`` for each distinct end, spread back over ``ends``: one
    decoder pass per chunk, not per policy state."""
    distinct = sorted(set(ends))
    columns = rows(distinct)
    where = {end: k for k, end in enumerate(distinct)}
    return columns[:, [where[end] for end in ends]]


def prepare(
    entries, encode, speller: Speller, with_p: bool = True, limit_tokens: int = 120
) -> list[Utterance]:
    """Student states, Whisper's transcript and (``with_p``) P for each entry (runaway
    transcripts left out)."""
    out = []
    for entry in tqdm(entries, unit="utt", file=sys.stderr, desc="P matrices"):
        samples = entry_audio(entry, SAMPLE_RATE)[: 30 * SAMPLE_RATE]
        states = encode(samples)[: math.ceil(len(samples) / 320)]
        memory = speller.memory(states)
        tokens = speller.decoder.greedy(memory, speller.whisper.prompt, speller.whisper.end)
        if not tokens or len(tokens) > min(limit_tokens, 3 * len(entry.text.split()) + 10):
            continue
        ends = [*speller.chunk_ends(len(states)), len(states)]
        log_p = (
            per_chunk(ends, functools.partial(speller.log_p, memory, tokens))
            if with_p
            else np.zeros(0)
        )
        out.append(Utterance(entry.text, states, tokens, log_p))
    return out


class Policy(nn.Module):
    """Keys: an LSTM over pairs of student states; queries: an LSTM over Whisper's token
    embeddings (frozen) of the tokens said so far; Raffel's monotonic energy between them."""

    def __init__(self, embeddings: Tensor, units: int = 256, dim: int = 128) -> None:
        super().__init__()
        width = embeddings.shape[1]
        self.units, self.dim = units, dim
        self.embed = nn.Embedding.from_pretrained(embeddings, freeze=True)
        self.listen = nn.LSTM(STRIDE * width, units, batch_first=True)
        self.speak = nn.LSTM(width, units, batch_first=True)
        self.energy = MonotonicEnergy(units, units, dim, init_r=-4.0, init_g=None)

    def keys(self, states: Tensor) -> Tensor:
        """[T, 512] student states -> [J, dim] projected keys."""
        pad = (-len(states)) % STRIDE
        states = torch.cat([states, states[-1:].expand(pad, -1)]) if pad else states
        listened, _ = self.listen(states.reshape(1, -1, STRIDE * states.shape[1]))
        return self.energy.keys(listened[0])

    def queries(self, tokens: Tensor) -> Tensor:
        """[U] tokens (the last prompt token first) -> [U, units] query states."""
        spoken, _ = self.speak(self.embed(tokens)[None])
        return spoken[0]

    def save(self, path: Path) -> None:
        """Its learnt weights (not Whisper's frozen embeddings) and sizes, as safetensors."""
        weights = {
            k: v.detach().contiguous()
            for k, v in self.state_dict().items()
            if not k.startswith("embed.")
        }
        save_file(weights, str(path), metadata={"units": str(self.units), "dim": str(self.dim)})

    @classmethod
    def load(cls, path: Path, embeddings: Tensor) -> Policy:
        """A policy :meth:`save` wrote, over ``embeddings`` (Whisper's token embeddings);
        an OSError or ValueError names a file that is not one."""
        try:
            meta = metadata_for(path, {}, "")
            weights = load_file(str(path))
        except SafetensorError as err:
            raise ValueError(f"{path}: unreadable weights ({err})") from None
        if not {"units", "dim"} <= meta.keys():
            raise ValueError(f"{path}: not a prototype policy (bench/monotonic_speller.py --save)")
        policy = cls(embeddings, int(meta["units"]), int(meta["dim"]))
        missing, unexpected = policy.load_state_dict(weights, strict=False)
        if missing != ["embed.weight"] or unexpected:
            raise ValueError(f"{path}: weights do not fit a prototype policy")
        return policy.eval()


@dataclass(eq=False)
class Prototype:
    """This prototype's learnt policy as the served speller asks one (``asr.speller.Policy``:
    ``bench/streaming_speller.py``'s ``prototype:PATH`` row, over Whisper's unadapted
    decoder): at a chunk's end, yes where the energy between the query of the tokens said
    so far and any of that chunk's 40 ms states is positive. Its pointer moves by chunks,
    where :func:`stream`'s moves by states: a second token of a chunk may fire at a state
    before the first one's. The decoder reads the chunk either way."""

    policy: Policy
    first: int  # the prompt's last token: the query LSTM's first input
    stride: int = CHUNK_STATES
    reads_attention: ClassVar[bool] = False
    # the last states and their keys, the last tokens and their query: computed once each
    _keys: tuple[Tensor, Tensor] | None = field(default=None, init=False, repr=False)
    _query: tuple[list[int], Tensor] | None = field(default=None, init=False, repr=False)

    @torch.no_grad()
    def emits(self, next_token: NextToken, boundary: int) -> bool:
        states = next_token.states
        if self._keys is None or self._keys[0] is not states:  # more states came
            self._keys = (states, self.policy.keys(states))
        tokens = next_token.tokens
        if self._query is None or self._query[0] != tokens:
            spoken = self.policy.queries(torch.tensor([self.first, *tokens]))
            self._query = (list(tokens), self.policy.energy.query(spoken[-1]))
        window = slice((boundary - self.stride) // STRIDE, math.ceil(boundary / STRIDE))
        energies = self.policy.energy.score(self._query[1], self._keys[1][window])
        return bool((energies > 0).any())


def loss_of(policy: Policy, utt: Utterance, first: int, latency: float, noise: float) -> Tensor:
    keys = policy.keys(torch.from_numpy(utt.states))
    queries = policy.queries(torch.tensor([first, *utt.tokens]))
    energies = policy.energy.grid(queries[None], keys[None])[0]  # [L + 1, J]
    if noise > 0:
        energies = energies + noise * torch.randn_like(energies)
    log_p = torch.from_numpy(utt.log_p)
    count = keys.shape[0]
    previous = torch.zeros(1, count)
    previous[0, 0] = 1.0
    total = torch.zeros(())
    positions = torch.arange(count, dtype=torch.float32)
    for i in range(len(energies)):
        alpha = soft_monotonic_alignment(energies[i : i + 1], previous)[0]
        left = (1 - alpha.sum()).clamp(min=1e-6)
        terms = torch.cat(
            [torch.log(alpha.clamp(min=1e-30)) + log_p[i, :count], left.log()[None] + log_p[i, -1:]]
        )
        delay = (alpha * positions).sum() + left * count
        total = total - torch.logsumexp(terms, 0) + latency * delay / count
        previous = alpha[None]
    return total / len(energies)


def stream(
    policy: Policy, speller: Speller, utt: Utterance, first: int
) -> tuple[list[int], list[int], int]:
    """The hard monotonic scan: (tokens, the policy state each was emitted at (-1: at the
    end), policy states in all)."""
    with torch.no_grad():
        keys = policy.keys(torch.from_numpy(utt.states))
        direction, r = policy.energy.direction(), policy.energy.r
        memory = speller.memory(utt.states)
        ends = speller.chunk_ends(len(utt.states))
        count, pointer = keys.shape[0], 0
        tokens: list[int] = []
        at: list[int] = []
        state = None
        query_in = torch.tensor([[first]])
        while len(tokens) < 224:
            spoken, new_state = policy.speak(policy.embed(query_in), state)
            query = policy.energy.query(spoken[0, -1])
            chosen = -1
            while pointer < count:
                if float(torch.tanh(query + keys[pointer]) @ direction + r) > 0:
                    token = speller.next_token(memory, tokens, ends[pointer])
                    if token != speller.whisper.end:
                        chosen = token
                        break
                pointer += 1  # nothing there yet (or Whisper would end here): read on
            if chosen < 0:  # the audio ended: the rest from the whole memory
                chosen = speller.next_token(memory, tokens, len(utt.states))
                if chosen == speller.whisper.end:
                    break
                at.append(-1)
            else:
                at.append(pointer)
            tokens.append(chosen)
            start = loop_start(tokens)
            if start is not None:  # a phrase said over and over: keep it once and stop
                del tokens[start:], at[start:]
                break
            state, query_in = new_state, torch.tensor([[chosen]])
        return tokens, at, count


def confident_stream(
    speller: Speller, utt: Utterance, threshold: float
) -> tuple[list[int], list[int], int]:
    """No policy at all: at each chunk's arrival Whisper's decoder says its next tokens
    for as long as it gives its top choice at least ``threshold`` of probability (and it
    is not end-of-text); the rest comes from the whole memory when the audio ends. The
    baseline that tells whether Whisper's own certainty knows *when* a token is ready, the
    signal the learnt energy lacks. Same return as :func:`stream`."""
    memory = speller.memory(utt.states)
    ends = speller.chunk_ends(len(utt.states))
    firsts = [j for j, end in enumerate(ends) if j == 0 or end != ends[j - 1]]
    tokens: list[int] = []
    at: list[int] = []
    for j in [*firsts, -1]:
        end = len(utt.states) if j < 0 else ends[j]
        while len(tokens) < 224:
            log_p, token = speller.next_log_p(memory, tokens, end).max(-1)
            if int(token) == speller.whisper.end or (j >= 0 and float(log_p) < math.log(threshold)):
                break
            tokens.append(int(token))
            at.append(j)
            start = loop_start(tokens)
            if start is not None:
                del tokens[start:], at[start:]
                return tokens, at, len(ends)
    return tokens, at, len(ends)


def ready_at(utt: Utterance, speller: Speller, tokens: list[int]) -> list[int]:
    """For each emitted token, the first policy state from whose chunk on Whisper's argmax
    would be that token (given the emitted prefix): when it could have been said."""
    memory = speller.memory(utt.states)
    ends = speller.chunk_ends(len(utt.states))

    def argmax(out: Tensor) -> Tensor:
        return out[:, :-1].argmax(-1)  # the token Whisper would say at each place

    best = per_chunk(ends, lambda cut_ends: speller.read(memory, tokens, cut_ends, argmax))
    ready = []
    for i, token in enumerate(tokens):
        hits = np.flatnonzero(best[i] == token)
        ready.append(int(hits[0]) if len(hits) else len(ends))
    return ready


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "default")
    parser.add_argument("--train", type=Path, help="manifest the policy learns from")
    parser.add_argument("--train-limit", type=int, default=600)
    parser.add_argument("--test", type=Path, nargs="+", required=True)
    parser.add_argument("--test-limit", type=int, default=100)
    parser.add_argument("--minutes", type=float, default=10.0, help="training time")
    parser.add_argument("--latency", type=float, default=1.0, help="weight of the delay term")
    parser.add_argument("--noise", type=float, default=1.0, help="energy noise in training")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--save",
        type=Path,
        help="write the learnt policy here (bench/streaming_speller.py's prototype:PATH)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--work", type=Path, help="keeps each manifest's prepared utterances for later runs"
    )
    parser.add_argument(
        "--confidence",
        type=float,
        nargs="+",
        metavar="P",
        help="no training: stream with Whisper's certainty alone, saying a token once its "
        "probability reaches P (one row per P)",
    )
    args = parser.parse_args(argv)
    if (args.train is None) == (args.confidence is None):
        parser.error("give --train (learn the policy) or --confidence (no policy)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    whisper = WhisperDecoder(whisper_ct2_dir(DEFAULT_CACHE, WHEEL_CACHE))
    speller, encode = Speller.of_bundle(whisper, args.model)

    def prepared(manifest: Path, limit: int, with_p: bool) -> list[Utterance]:
        entries = read_manifest(manifest)[0][:limit]
        if args.work is None:
            return prepare(entries, encode["student"], speller, with_p)
        key = hashlib.sha1(f"{manifest.resolve()} {limit} {with_p}".encode()).hexdigest()[:12]
        path = args.work / f"{manifest.stem}-{key}.pkl"
        if not path.is_file():
            args.work.mkdir(parents=True, exist_ok=True)
            path.write_bytes(pickle.dumps(prepare(entries, encode["student"], speller, with_p)))
        return pickle.loads(path.read_bytes())

    first = whisper.prompt[-1]
    if args.confidence:
        streams = {
            f"certainty >= {p:g}": functools.partial(confident_stream, threshold=p)
            for p in args.confidence
        }
    else:
        policy = train_policy(args, prepared(args.train, args.train_limit, True), whisper)
        if args.save:
            policy.save(args.save)
        streams = {"policy": lambda speller, utt: stream(policy, speller, utt, first)}
    print(
        "| manifest | utterances | streams | Whisper offline | streaming | streamed share "
        "| lag p50 | lag p95 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for manifest in args.test:
        test = prepared(manifest, args.test_limit, False)
        refs = [u.text for u in test]
        offline = [whisper.tokenizer.decode(u.tokens) for u in test]
        for name, streamer in streams.items():
            streamed, lags, early, total = [], [], 0, 0
            for utt in tqdm(test, unit="utt", file=sys.stderr, desc=name):
                tokens, at, count = streamer(speller, utt)
                streamed.append(whisper.tokenizer.decode(tokens))
                ready = ready_at(utt, speller, tokens)
                for emitted, could in zip(at, ready):
                    total += 1
                    if emitted >= 0:
                        early += 1
                    lags.append(((emitted if emitted >= 0 else count) - could) * STATE_MS)
            print(
                f"| {manifest} | {len(test)} | {name} | {100 * wer(refs, offline):.2f}% "
                f"| {100 * wer(refs, streamed):.2f}% | {100 * early / max(total, 1):.1f}% "
                f"| {np.percentile(lags, 50):.0f} ms | {np.percentile(lags, 95):.0f} ms |",
                flush=True,
            )
    return 0


def train_policy(
    args: argparse.Namespace, train: list[Utterance], whisper: WhisperDecoder
) -> Policy:
    """The soft monotonic policy, learnt for ``args.minutes`` on ``train``."""
    policy = Policy(whisper.decoder.embed.weight.detach().clone())
    trainable = [p for p in policy.parameters() if p.requires_grad]
    optimiser = torch.optim.Adam(trainable, lr=1e-3)
    first = whisper.prompt[-1]
    started, step, recent = time.monotonic(), 0, []
    rng = np.random.default_rng(args.seed)
    while time.monotonic() - started < 60 * args.minutes:
        policy.train()
        utt = train[int(rng.integers(len(train)))]
        loss = loss_of(policy, utt, first, args.latency, args.noise)
        optimiser.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(trainable, 5.0)
        optimiser.step()
        recent = [*recent[-199:], loss.item()]
        step += 1
        if step % 200 == 0:
            print(f"step {step}: loss {np.mean(recent):.3f}", file=sys.stderr, flush=True)
    policy.eval()
    print(f"trained {step} steps on {len(train)} utterances ({args.minutes} min)")
    return policy


if __name__ == "__main__":
    raise SystemExit(main())
