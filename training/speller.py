"""Train the streaming speller's learnt policy: when Whisper's frozen decoder may speak.

Raffel et al.'s monotonic attention over *boundaries* (the student's chunk ends, every 16
states, then the segment's close) decides when token i is spoken; Whisper's decoder, frozen,
decides which (``asr/speller.py``). Training is in expectation, in two stages:

1. Grids (once per utterance, no gradient, cached as ``<cache>/<hash>.npz``). Target y:
   Whisper's greedy transcript of the clip (the bundle's teacher and decoder, as its
   finals write it, in Whisper's padding to ``decode.whisper_finals.window_s``; with
   ``--numbers words``, numbers spelled as said, as the speller writes them while its
   segment is open: a numeral waits for its number's end, a spelled number's words each
   for their own), with each token's end from the alignment heads over the whole memory
   (``asr.whisper_finals.token_ends``, as the finals time tokens); for a clip of a
   ``--spoken`` manifest, its own text's words instead (:func:`styled_reference`), timed
   by the same heads teacher-forced on them (``WhisperFinals.align``). Reference
   boundaries: r_k = the first boundary at or after token k's end. Memory: the bundle's streaming
   student's states, then encoded silence, as the speller reads them. For every token i
   and boundary b_j: the decoder's final-layer state s(i, j) at the position that predicts
   y_i and log P(y_i | y_<i, memory < b_j), the earlier positions read at their own
   reference boundaries (as the speller keeps them: each position read at the boundary of
   the token it predicted, the prompt at the first token's). With ``--prefix-policy``
   (DAgger, Ross et al. 2011), each clip also gets a grid whose earlier positions are read
   where that policy, teacher-forced, let their tokens out (``policy_boundaries``): as the
   speller serving it reads them, often several tokens at one boundary, which reference
   boundaries (one per word end) never show the energy.
2. The energy (:class:`asr.speller.PolicyEnergy`, eq. 16, r from -4, unit pre-sigmoid
   noise) on the cached grids: p(i, j) = sigmoid(energy(s(i, j), h(b_j))), p at the close
   forced to 1, alpha(i, j) by the exact scan of ``asr.attention``, and per token

       loss = -log sum_j alpha(i, j) min(P(y_i | j), c)
              + lambda sum_j alpha(i, j) max(0, t(b_j) - e_i)

   with t(b_j) when the boundary's states have arrived, e_i the end of y_i's word and c
   the likelihood cap (``--likelihood-cap``, 1: none). Past c >= 0.5 the token is the
   decoder's likeliest, as greedy reading says it: uncapped, the energy is paid to wait
   while P climbs on from there with the next word's audio.

    asr train-speller --train data/mix2/synth-11k/manifest.jsonl data/mix2/real_en.jsonl \\
        --limit 400 --cache exp/speller-grids --out exp/speller-policy --latency-weight 0.25 \\
        --epochs 50 --numbers words --likelihood-cap 0.5

writes ``OUT/speller_policy.safetensors`` (and ``OUT/last.pt``; ``--resume`` continues).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import time
import typing
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from asr.attention import soft_monotonic_alignment
from asr.config import Numbers, WhisperFinalsConfig
from asr.frontend import STATE_SECONDS
from asr.speller import (
    CHUNK_STATES,
    POLICY_FILE,
    AtEnd,
    Hypothesis,
    Learnt,
    NextToken,
    Policy,
    PolicyEnergy,
    Speller,
    SpellerModel,
    bundle_adapter,
    check_count,
    check_optional_probability,
    file_sha1,
    learnt_on,
    states_of,
)
from asr.whisper_decoder import DecoderLayer, Memory, WhisperTextDecoder
from asr.whisper_features import SAMPLE_RATE
from asr.whisper_finals import silent_states
from asr.whisper_text import WhisperVocabulary
from training.recipes.textnorm import letter_runs, normalize

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from asr.recognizer import Recognizer
    from training.manifest import Entry

WORD_STARTS = (" ",)  # a Whisper token that starts a word
LETTERS = frozenset("bcdefghijklmnopqrstuvwxyz")  # one-letter words written upper case


def add_numbers_option(parser: argparse.ArgumentParser, targets: str) -> None:
    """``--numbers``, as both of the speller's trainings take it."""
    parser.add_argument(
        "--numbers",
        choices=typing.get_args(Numbers),
        default="digits",
        help=f"how {targets} write numbers: as Whisper does, or spelled as said (as the "
        "speller writes them while a segment is open)",
    )


def add_spoken_option(parser: argparse.ArgumentParser, targets: str) -> None:
    """``--spoken``, as both of the speller's trainings take it."""
    parser.add_argument(
        "--spoken",
        type=Path,
        nargs="+",
        default=[],
        metavar="MANIFEST",
        help=f"manifests (of --train, or within one) whose text is what their clips say, "
        f"word for word (the synthetic speech's: what its voices were given): {targets} say "
        "those words, written as Whisper's reading writes the words it heard right; every "
        "other clip's are Whisper's reading (a package's script is not always what its "
        "actors said)",
    )


def spoken_ids(spoken: list[Path], entries: list[Entry]) -> set[str]:
    """The ids of the clips of the ``--spoken`` manifests: their targets are their own text.
    Each manifest must hold clips of the run's ``entries`` (itself, or a part of a merged
    one: a dev split inside a validation set), else naming it did nothing."""
    from training.manifest import read_manifest

    ids = {entry.id for entry in entries}
    found = set()
    for manifest in spoken:
        own = {entry.id for entry in read_manifest(manifest)[0]}
        if not own & ids:
            raise ValueError(f"--spoken {manifest}: none of its clips is among this run's")
        found |= own
    return found & ids


def styled_reference(transcript: str, reference: str) -> str:
    """``reference``'s words written as Whisper's ``transcript`` of the same clip writes
    them where the two agree (case, marks, numerals), so that a target taught from the
    reference differs from Whisper's own style only in the words Whisper got wrong: those
    are the reference's, lower case, letters upper case and spelled ones joined ("l w" ->
    "LW", as Whisper writes them), the first word capitalised and Whisper's closing mark at the
    end. Words are compared as they are scored: normalised, spelled letters joined."""
    surface = transcript.split()
    mark = surface[-1][-1] if surface and surface[-1][-1] in ".?!" else ""
    if mark:  # the closing mark goes where the text ends, whichever word ends it
        surface[-1] = surface[-1][:-1]
    heard = _keys([(key, i) for i, word in enumerate(surface) for key in normalize(word).split()])
    said = _keys([(key, j) for j, key in enumerate(normalize(reference).split())])
    matcher = SequenceMatcher(None, [k for k, _ in heard], [k for k, _ in said], autojunk=False)
    match = {}
    for block in matcher.get_matching_blocks():
        match.update({block.b + t: block.a + t for t in range(block.size)})
    matched = set(match.values())
    owned = [0] * len(surface)  # per surface word: its keys, and those matched
    kept = [0] * len(surface)
    for k, (_, words) in enumerate(heard):
        for w in words:
            owned[w] += 1
            kept[w] += k in matched
    out: list[str] = []
    written: set[int] = set()
    for j, (key, spelled) in enumerate(said):
        words = heard[match[j]][1] if j in match else ()
        if words and all(owned[w] == kept[w] for w in words):
            out += [surface[w] for w in sorted(words) if w not in written and surface[w]]
            written.update(words)
        else:
            out.append(key.upper() if len(spelled) > 1 or key in LETTERS else key)
    if not out:
        return ""
    out[0] = out[0][0].upper() + out[0][1:]
    return " ".join(out).rstrip(",;:") + mark


def reference_tokens(vocabulary: WhisperVocabulary, tokens: list[int], reference: str) -> list[int]:
    """The targets of a clip Whisper's decoder read as ``tokens``: its ``reference`` styled
    as that reading (:func:`styled_reference`), or the reading itself without one."""
    styled = styled_reference(vocabulary.decode(tokens), reference) if reference.strip() else ""
    return vocabulary.encode(styled) if styled else tokens


def _keys(words: list[tuple[str, int]]) -> list[tuple[str, tuple[int, ...]]]:
    """Normalised words with the indices they came from, each spelled-letter run joined
    into one word that came from all of its letters'."""
    keys = [(key, (i,)) for key, i in words]
    for start, end in reversed(letter_runs([key for key, _ in words])):
        joined = "".join(key for key, _ in keys[start:end])
        keys[start:end] = [(joined, tuple(i for _, (i,) in keys[start:end]))]
    return keys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, default=Path("models/default"), help="bundle")
    parser.add_argument("--train", type=Path, nargs="+", required=True, help="manifests")
    parser.add_argument("--limit", type=int, default=0, help="N random clips of each manifest")
    parser.add_argument("--cache", type=Path, required=True, help="grids, computed once")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--latency-weight", type=float, default=0.5, help="lambda, per second")
    parser.add_argument(
        "--likelihood-cap",
        type=float,
        default=1.0,
        help="c in (0, 1]: a boundary where the decoder gives the token probability c or more "
        "is as good as any later one (1: no cap)",
    )
    parser.add_argument(
        "--agreement",
        type=int,
        default=0,
        help="serving: also let a token out that the decoder read alike at this many chunk "
        "ends in a row (0: the energy alone)",
    )
    parser.add_argument(
        "--patience",
        type=int,
        default=0,
        help="serving: agreement lets a token out only once the pointer has waited this many "
        "states (20 ms each), and never a segment's first (0: at once)",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=0.0,
        help="serving: also let a token out where the decoder's likeliest token has at least "
        "this probability (0: the energy alone)",
    )
    parser.add_argument(
        "--first-threshold",
        type=float,
        default=0.0,
        help="serving: a segment's first token needs p above this instead of the threshold "
        "(0: the threshold)",
    )
    add_numbers_option(parser, "the grids' targets")
    add_spoken_option(parser, "the grids' targets")
    parser.add_argument(
        "--prefix-policy",
        type=Path,
        help="a policy file (the bundle's, say): also train on grids whose earlier tokens are "
        "read where it lets them out, teacher-forced, as the speller reads them when it "
        "serves (DAgger), beside the grids read at reference boundaries",
    )
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch", type=int, default=16, help="utterances per step")
    parser.add_argument("--max-seconds", type=float, default=15.0, help="longer clips skipped")
    parser.add_argument("--grids-only", action="store_true", help="stop after the grids")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    from asr.bundle import load_model
    from training.manifest import read_manifest

    check_count(args.agreement, "agreement")
    check_count(args.patience, "patience", " states")
    check_optional_probability(args.confidence, "confidence")
    check_optional_probability(args.first_threshold, "first token's threshold")
    if not 0 < args.likelihood_cap <= 1:
        raise ValueError(f"--likelihood-cap must be in (0, 1], got {args.likelihood_cap}")
    entries = []
    for manifest in args.train:
        # the grids read Whisper's own transcript: a clip needs no text (but --spoken's)
        rows = read_manifest(manifest, require_text=False)[0]
        found = [e for e in rows if (e.duration or 0) <= args.max_seconds]
        random.Random(args.seed).shuffle(found)
        entries += found[: args.limit or None]
    recognizer = load_model(args.model)
    finals = recognizer.whisper_finals()
    if finals is None or recognizer.frontend is None:
        raise ValueError(f"{args.model}: no Whisper decoder or front end")
    assert recognizer.whisper_files is not None
    model = SpellerModel.load(
        *recognizer.whisper_files, silent_states(finals.teacher), bundle_adapter(args.model)
    )
    prefix = None
    if args.prefix_policy is not None:
        policy = Learnt.load(args.prefix_policy, learnt_on=learnt_on(args.model))
        prefix = (policy, file_sha1(args.prefix_policy))
    paths = cache_grids(
        entries,
        recognizer,
        model,
        args.cache,
        args.model,
        prefix,
        args.numbers,
        spoken_ids(args.spoken, entries),
    )
    if args.grids_only:
        return 0
    grids = [g for g in map(load_grid, paths) if g is not None]
    if not grids:
        raise ValueError(
            f"no clip of {', '.join(map(str, args.train))} gave a grid (each needs audio of "
            f"at most --max-seconds {args.max_seconds:g} that Whisper's decoder reads as words)"
        )
    trainer = PolicyTrainer(grids, args.out, args.latency_weight, args.lr, args.batch, args.seed)
    trainer.cap = args.likelihood_cap
    trainer.meta = learnt_on(args.model) | {
        "agreement": str(args.agreement),
        "patience": str(args.patience),
        "confidence": str(args.confidence),
        "first_threshold": str(args.first_threshold),
        "likelihood_cap": str(args.likelihood_cap),
        "numbers": args.numbers,
        "spoken": " ".join(map(str, args.spoken)),
    }
    trainer.fit(args.epochs, resume=args.resume)
    return 0


# -- grids -------------------------------------------------------------------------------


def grid_name(
    entry_audio: str,
    offset: float | None,
    end: float | None,
    bundle: dict[str, str],
    prefix: str = "",
    numbers: Numbers = "digits",
    spoken: bool = False,
    window_s: float = 0.0,
) -> str:
    """The cache file of an entry's grid under ``bundle`` (:func:`learnt_on`: its student's
    and adapters' hashes, so that a bundle whose student or adapters changed in place does
    not read the grids of the old ones), for its targets so written (``spoken``: its own
    text's words; ``window_s``: read in Whisper's padding to that length)."""
    fields: list[object] = [
        entry_audio,
        offset,
        end,
        bundle["student_sha1"],
        bundle["adapter_sha1"],
    ]
    fields += ["numbers=words"] if numbers == "words" else []
    fields += ["spoken"] if spoken else []
    fields += [f"window={window_s:g}"] if window_s else []
    key = json.dumps(fields + [prefix] if prefix else fields)
    return hashlib.sha1(key.encode()).hexdigest()[:24] + ".npz"


def cache_grids(
    entries: list[Entry],
    recognizer: Recognizer,
    model: SpellerModel,
    cache: Path,
    bundle: Path,
    prefix: tuple[Policy, str] | None = None,
    numbers: Numbers = "digits",
    spoken: AbstractSet[str] = frozenset(),
) -> list[Path]:
    """Each entry's grid (an empty file: no sure transcript), computed where missing, its
    targets' ``numbers`` so written, and for the entries whose ids are ``spoken`` their own
    text's words (:func:`reference_tokens`, timed by the alignment heads as the decoder's
    own reading is); with ``prefix`` (a policy and its file's hash), each
    entry's on-policy grid too, its earlier tokens read where that policy lets them out
    (:func:`policy_boundaries`): both from one pass of the student and one teacher's
    transcript per clip."""
    from training.dataset import entry_audio

    cache.mkdir(parents=True, exist_ok=True)
    kinds = [None] if prefix is None else [None, prefix]  # reference, then on-policy
    keys = ["" if kind is None else kind[1] for kind in kinds]
    hashes = learnt_on(bundle)
    prime = recognizer.config.model.whisper.prime
    hashes["student_sha1"] = states_of(hashes["student_sha1"], prime)
    window = recognizer.config.decode.whisper_finals.window_s  # read as the finals read
    paths = [
        [
            cache / grid_name(e.audio, e.offset, e.end, hashes, k, numbers, e.id in spoken, window)
            for k in keys
        ]
        for e in entries
    ]
    todo = [(e, ps) for e, ps in zip(entries, paths) if not all(p.is_file() for p in ps)]
    options = WhisperFinalsConfig(beam_size=1, window_s=window, numbers=numbers)
    finals = recognizer.whisper_finals()
    assert finals is not None and recognizer.frontend is not None
    for entry, clip_paths in tqdm(todo, desc="speller grids", unit="utt"):
        try:
            samples = entry_audio(entry, SAMPLE_RATE)
        except ValueError as err:
            tqdm.write(f"skipping {entry.id}: {err}")
            samples = np.zeros(0, np.float32)
        found = None  # the targets and their ends, where the teacher's reading is sure
        if len(samples) > SAMPLE_RATE // 4:
            stream = recognizer.frontend.stream()
            stream.keep = True  # the log-mel frames, for the teacher's transcript
            states = torch.from_numpy(np.concatenate([stream.accept(samples), stream.finish()]))
            mel = stream.mel_between(0, 1 << 30)
            teacher, lengths, own = finals.encode([mel], options.window_s)
            text = finals.decode(teacher, lengths, options, own)[0]
            if text.tokens and not text.fallback and len(states) >= 2:
                found = text.tokens, text.ends
                if entry.id in spoken:
                    tokens = reference_tokens(finals.vocabulary, text.tokens, entry.text)
                    found = tokens, finals.align(teacher[0, : int(own[0])], tokens)
        for kind, path in zip(kinds, clip_paths):
            if path.is_file():
                continue
            fields = {}
            if found is not None:
                tokens, ends = found
                duration = len(samples) / SAMPLE_RATE
                refs = None
                if kind is not None:
                    refs = policy_boundaries(model, kind[0], states, tokens)
                fields = grid(model, states, tokens, ends, duration, refs)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            with open(tmp, "wb") as f:
                np.savez(f, **fields)
            os.replace(tmp, path)
    return [path for clip_paths in paths for path in clip_paths]


@torch.inference_mode()
def policy_boundaries(
    model: SpellerModel, policy: Policy, states: Tensor, tokens: list[int]
) -> list[int]:
    """Where ``policy`` lets each of ``tokens`` out, teacher-forced: as the speller scans,
    each token at the first candidate boundary from the previous one's at which the policy
    says yes (the close if none), read there whatever the decoder's likeliest token."""
    reader = Speller(model, AtEnd())  # the memory of every state, nothing said
    reader.accept(states)
    bounds = boundaries_of(len(states))
    hyp = Hypothesis(list(model.vocabulary.prompt))
    out = []
    for token in tokens:
        view = NextToken(reader, hyp)
        asked = (b for b in bounds if b >= hyp.pointer and policy.emits(view, b))
        boundary = next(asked, bounds[-1])
        hyp = hyp.then(view.read(boundary), token, 0.0)
        out.append(boundary)
    return out


def boundaries_of(length: int) -> list[int]:
    """Candidate boundaries of a segment of ``length`` states: chunk ends before the close,
    then the close."""
    return [*range(CHUNK_STATES, length, CHUNK_STATES), length]


def word_ends(pieces: list[str], ends: list[int]) -> list[int]:
    """Per token, the end of the last token of its word."""
    out = list(ends)
    for k in range(len(pieces) - 2, -1, -1):
        if not pieces[k + 1].startswith(WORD_STARTS):
            out[k] = out[k + 1]
    return out


@torch.inference_mode()
def grid(
    model: SpellerModel,
    states: Tensor,
    tokens: list[int],
    ends: list[int],
    duration: float,
    refs: list[int] | None = None,
) -> dict[str, np.ndarray]:
    """One utterance's grid (the module's docstring, stage 1) as arrays to save; ``refs``:
    the boundaries its earlier tokens are read at (default: the reference boundaries)."""
    length = len(states)
    bounds = boundaries_of(length)
    if refs is None:
        refs = [next(b for b in bounds if b >= min(max(e, 1), length)) for e in ends]
    s, logp = decoder_grid(model, states, tokens, refs, bounds)
    times = [b * STATE_SECONDS for b in bounds[:-1]] + [duration]
    ends_s = np.asarray(word_ends(model.vocabulary.pieces(tokens), ends)) * STATE_SECONDS
    return {
        "s": s.numpy().astype(np.float16),  # [N, J, d]
        "logp": logp.numpy(),  # [N, J]
        "h": states[torch.tensor(bounds) - 1].numpy().astype(np.float16),  # [J, d]
        "times": np.asarray(times, np.float32),
        "ends": ends_s.astype(np.float32),
        "tokens": np.asarray(tokens, np.int32),
        "refs": np.asarray(refs, np.int32),
    }


def decoder_grid(
    model: SpellerModel, states: Tensor, tokens: list[int], refs: list[int], bounds: list[int]
) -> tuple[Tensor, Tensor]:
    """s [N, J, d] and log P(y_i | y_<i, memory < b_j) [N, J] of tokens y (N) at boundaries
    b (J), earlier positions read at the reference boundaries ``refs`` (one per token)."""
    decoder, prompt = model.decoder, list(model.vocabulary.prompt)
    memory = _joined(decoder.memory(states[None]), model.silence)
    slots = memory[0][0].shape[2]
    silence = slots - len(states)

    def cut(boundary: Tensor) -> Tensor:  # [n] boundaries -> [n, slots] readable slots
        index = torch.arange(slots)
        return torch.where(
            index < silence, index >= boundary[:, None], index - silence < boundary[:, None]
        )

    # reference pass: the prompt and y_1..y_{N-1}, each position read at the boundary of
    # the token it predicts (the prompt's at the first token's), causally
    fed = [*prompt, *tokens[:-1]]
    at = torch.tensor([refs[0]] * len(prompt) + refs[1:])
    causal = torch.ones(len(fed), len(fed), dtype=torch.bool).tril()
    _, past = _run(
        decoder, torch.tensor([fed]), torch.arange(len(fed)), memory, causal, cut(at)[None]
    )
    # grid pass, one row per boundary: the prompt again (read at the boundary: the speller
    # feeds it with the first token), then each token's predicting position after the
    # reference positions before it
    p, n = len(prompt), len(tokens)
    queries = torch.tensor([*prompt, *tokens[:-1]])
    positions = torch.arange(p + n - 1)
    own = torch.zeros(p + n - 1, len(fed), dtype=torch.bool)  # reference keys seen
    for i in range(1, n):
        own[p - 1 + i, : p - 1 + i] = True
    new = torch.zeros(p + n - 1, p + n - 1, dtype=torch.bool)
    new[:p, :p] = causal[:p, :p]  # the prompt, causally (token 1's position is its last)
    new[p:, p:] = torch.eye(n - 1, dtype=torch.bool)
    mask = torch.cat([own, new], 1)
    rows = len(bounds)
    readable = cut(torch.tensor(bounds))[:, None].expand(rows, p + n - 1, slots)
    x, _ = _run(decoder, queries.expand(rows, -1), positions, memory, mask, readable, past)
    s = x[:, p - 1 :].transpose(0, 1)  # [N, J, d]
    logp = (
        decoder.project(s)
        .log_softmax(-1)
        .gather(-1, torch.tensor(tokens)[:, None, None].expand(-1, rows, 1))
    )
    return s, logp[..., 0]


def _joined(memory: Memory, silence: Memory) -> Memory:
    """The encoded silence's slots, then the segment's (as ``GrowingMemory`` keeps them)."""
    return [
        (torch.cat([sk, k], 2), torch.cat([sv, v], 2)) for (k, v), (sk, sv) in zip(memory, silence)
    ]


def _run(
    decoder: WhisperTextDecoder,
    tokens: Tensor,
    positions: Tensor,
    memory: Memory,
    self_mask: Tensor,
    cross_mask: Tensor,
    past: list[tuple[Tensor, Tensor]] | None = None,
) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
    """The decoder's final-layer states [B, n, d] of ``tokens`` [B, n] at ``positions`` [n]
    after ``past`` keys and values (shared by the rows), with any self-attention mask [n,
    past + n] and a cross-attention mask per row and query [B, n, slots]: the layers run
    through the decoder's public modules (its step takes one mask per row)."""
    x = decoder.embed(tokens) + decoder.positions[positions]
    kept = []
    for i, layer in enumerate(decoder.layers):
        x, kv = _layer(
            layer, x, None if past is None else past[i], memory[i], self_mask, cross_mask
        )
        kept.append(kv)
    return decoder.norm(x), kept


def _layer(
    layer: DecoderLayer,
    x: Tensor,
    past: tuple[Tensor, Tensor] | None,
    memory: tuple[Tensor, Tensor],
    self_mask: Tensor,
    cross_mask: Tensor,
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    q, k, v = layer.heads_of(layer.self_qkv(layer.self_norm(x)), 3)
    keys, values = k, v
    if past is not None:
        shape = (len(x), *past[0].shape[1:])
        keys = torch.cat([past[0].expand(shape), k], 2)
        values = torch.cat([past[1].expand(shape), v], 2)
    x = x + layer.self_out(layer.joined(F.scaled_dot_product_attention(q, keys, values, self_mask)))
    (q,) = layer.heads_of(layer.cross_q(layer.cross_norm(x)), 1)
    mk, mv = (m.expand(len(x), *m.shape[1:]) for m in memory)
    attended = F.scaled_dot_product_attention(q, mk, mv, cross_mask[:, None])
    x = x + layer.cross_out(layer.joined(attended))
    return x + layer.fc2(F.gelu(layer.fc1(layer.ffn_norm(x)))), (k, v)


# -- training ------------------------------------------------------------------------------


@dataclass
class Grid:
    s: Tensor  # [N, J, d]
    logp: Tensor  # [N, J]
    h: Tensor  # [J, d]
    late: Tensor  # [N, J]: max(0, t(b_j) - e_i), s


def load_grid(path: Path) -> Grid | None:
    with np.load(path) as data:
        if "s" not in data:
            return None
        late = np.maximum(0.0, data["times"][None, :] - data["ends"][:, None])
        return Grid(
            torch.from_numpy(data["s"].astype(np.float32)),
            torch.from_numpy(data["logp"]),
            torch.from_numpy(data["h"].astype(np.float32)),
            torch.from_numpy(late),
        )


def expected_boundary_loss(
    energy: Tensor,
    logp: Tensor,
    late: Tensor,
    tokens: Tensor,
    bounds: Tensor,
    weight: float,
    cap: float = 1.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """The loss of the module's docstring, per token on average, with the expected
    log-likelihood term and expected lateness (s) besides, from energies, log P(y_i | b_j)
    and lateness [B, N, J], token and boundary masks [B, N], [B, J] (each row's last valid
    boundary is its close, where p is 1), P capped at ``cap``."""
    close = bounds & ~F.pad(bounds[:, 1:], (0, 1), value=False)
    energy = torch.where(close[:, None], math.inf, energy)
    previous = torch.zeros_like(energy[:, 0])
    previous[:, 0] = 1.0  # the pointer starts at the first boundary
    alphas = []
    for i in range(energy.shape[1]):
        previous = soft_monotonic_alignment(energy[:, i], previous, bounds)
        alphas.append(previous)
    alpha = torch.stack(alphas, 1)
    logp = logp.clamp_max(math.log(cap)).masked_fill(~bounds[:, None], -math.inf)
    top = logp.max(-1, keepdim=True).values.detach().clamp_min(-1e4)
    likelihood = (alpha * (logp - top).exp()).sum(-1).clamp_min(1e-30).log() + top[..., 0]
    lateness = (alpha * late.masked_fill(~bounds[:, None], 0.0)).sum(-1)
    count = tokens.sum().clamp_min(1)
    mean_like = (likelihood * tokens).sum() / count
    mean_late = (lateness * tokens).sum() / count
    return -mean_like + weight * mean_late, mean_like, mean_late


def padded(grids: list[Grid]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """s [B, N, J, d], logp, late [B, N, J], h [B, J, d], token and boundary masks."""
    n = max(len(g.logp) for g in grids)
    j = max(g.logp.shape[1] for g in grids)
    b, d = len(grids), grids[0].s.shape[-1]
    s, h = torch.zeros(b, n, j, d), torch.zeros(b, j, d)
    logp, late = torch.zeros(b, n, j), torch.zeros(b, n, j)
    tokens, bounds = torch.zeros(b, n, dtype=torch.bool), torch.zeros(b, j, dtype=torch.bool)
    for k, g in enumerate(grids):
        gn, gj = g.logp.shape
        s[k, :gn, :gj], h[k, :gj], logp[k, :gn, :gj], late[k, :gn, :gj] = g.s, g.h, g.logp, g.late
        tokens[k, :gn], bounds[k, :gj] = True, True
    return s, logp, late, h, tokens, bounds


class PolicyTrainer:
    """The energy trained on cached grids, a checkpoint each epoch (``OUT/last.pt``)."""

    def __init__(
        self, grids: list[Grid], out: Path, weight: float, lr: float, batch: int, seed: int
    ) -> None:
        self.grids, self.out, self.weight, self.batch = grids, out, weight, batch
        torch.manual_seed(seed)
        self.seed = seed
        self.energy = PolicyEnergy(grids[0].s.shape[-1], grids[0].h.shape[-1])
        self.optimizer = torch.optim.Adam(self.energy.parameters(), lr=lr)
        self.meta: dict[str, str] = {}  # recorded in the policy file
        self.cap = 1.0  # the likelihood cap (1: none)
        out.mkdir(parents=True, exist_ok=True)

    def fit(self, epochs: int, resume: bool = False, noise: float = 1.0) -> PolicyEnergy:
        start = 0
        if resume:
            state = torch.load(self.out / "last.pt")
            self.energy.load_state_dict(state["energy"])
            self.optimizer.load_state_dict(state["optimizer"])
            start = state["epoch"]
        tokens = sum(len(g.logp) for g in self.grids)
        print(f"{len(self.grids)} utterances, {tokens} tokens; lambda {self.weight}/s")
        for epoch in range(start, epochs):
            started = time.perf_counter()
            order = list(range(len(self.grids)))
            random.Random(self.seed + epoch).shuffle(order)
            totals = np.zeros(3)
            for k in range(0, len(order), self.batch):
                batch = [self.grids[i] for i in order[k : k + self.batch]]
                totals += self.step(batch, noise) * len(batch)
            loss, like, late = totals / len(order)
            print(
                f"epoch {epoch + 1}/{epochs}: loss {loss:.4f}, log-likelihood {like:.4f}, "
                f"lateness {late:.3f} s ({time.perf_counter() - started:.1f} s)",
                flush=True,
            )
            torch.save(
                {"energy": self.energy.state_dict(), "optimizer": self.optimizer.state_dict()}
                | {"epoch": epoch + 1},
                self.out / "last.pt",
            )
            meta = self.meta | {"epochs": str(epoch + 1), "lambda": str(self.weight)}
            self.energy.save(self.out / POLICY_FILE, meta=meta)
        return self.energy

    def step(self, batch: list[Grid], noise: float) -> np.ndarray:
        s, logp, late, h, tokens, bounds = padded(batch)
        energy = self.energy(s, h[:, None])
        energy = energy + noise * torch.randn_like(energy)
        loss, like, lateness = expected_boundary_loss(
            energy, logp, late, tokens, bounds, self.weight, self.cap
        )
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return np.array([loss.item(), like.item(), lateness.item()])
