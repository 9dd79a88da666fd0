"""Teach Whisper's decoder to wait: low-rank adapters trained on memories cut mid-speech.

Whisper's decoder learnt on whole 30 s windows, so a memory cut mid-speech reads to it as
a finished sentence: it guesses the words whose audio has not arrived, and the streaming
speller then builds on the guess (``asr/speller.py``). Here it learns, with low-rank
adapters on every linear of its layers (its own weights frozen: what it knows of English
stays), to read a cut memory as a prefix (prefix truncation, as CarelessWhisper, Krichli
et al. 2025, trains Whisper): for the bundle's streaming student's states up to a chunk
end b, then the teacher's encoded silence as the speller reads past a boundary, the target
is the tokens of the words that end by b, then "wait": the end of text, which the speller
never lets out while a segment is open, or (``--wait no-speech``) Whisper's no-speech
token, which it never writes at all. A share of examples read the whole memory with the
whole transcript and the end of text, so the decoder also adapts to the student's states,
where it read the teacher's. A "wait" of its own keeps a segment's close, which reads the
whole memory, from being taken for a cut (adapters that wait by the end dropped the last
words of clips that end in speech on one student), but it spells numbers while the
segment is open where waiting by the end held them for the close (research record).

Targets: Whisper's own greedy transcript of each English clip, read as the bundle's finals
read a segment (the full-attention teacher's states of the clip inside Whisper's padding to
``decode.whisper_finals.window_s``: read from the clip's states alone, short clips came out
twice as wrong, often said twice), and each token's word end from its alignment heads over
the clip's states (as the finals time tokens): no text is needed, so the real English of
the packages teaches it as well as the synthetic corpus. With ``--numbers words`` the
transcript spells numbers as said (its numerals suppressed), as the speller writes them
while a segment is open: a number then comes word by word in the targets too, where with
numerals it waited for its last digit.
Whisper misreads some clips, short ones most ("monday the sixteenth" as "on the other
side"), and its reading teaches the misreading; ``--spoken`` names the manifests whose text
is what their clips say (the synthetic speech's), whose targets are then those words,
written as Whisper's reading writes the words it heard right and timed the same way.
The teacher's states and transcripts are those ``asr distill`` caches (``--teacher-cache``:
shared with it); the student's states and word ends are cached in ``--cache``. Raffel et
al.'s monotonic policy still decides when a token is spoken; the bundle's learnt policy
reads the decoder's state, so a new adapter wants a policy trained over it (``asr
train-speller`` on a bundle that carries it).

    asr tune-speller --model models/default --train data/mix3/real_en.jsonl \\
        data/mix3/synth-11k/manifest.jsonl --valid data/mix3/valid.jsonl \\
        --teacher-cache data/teacher --cache exp/speller-states --out exp/speller-adapter

writes ``OUT/speller_adapter.safetensors`` (the adapters of the best held-out loss, or with
``--average N`` the mean of those at the run's last N validations; copied into a bundle,
its streaming pass reads with them) and ``OUT/last.pt`` (``--resume`` continues a stopped
run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from safetensors.torch import save_file
from torch import Tensor
from tqdm import tqdm

from asr.adapters import adapter_weights, add_adapters, averaged_adapters, restore_adapters
from asr.config import WhisperConfig
from asr.speller import ADAPTER_FILE, CHUNK_STATES, WAIT_KEY, states_of, student_sha1
from asr.whisper_decoder import LINEARS, WhisperTextDecoder, load_decoder
from asr.whisper_features import SAMPLE_RATE
from asr.whisper_finals import STATES_PER_WINDOW, WhisperFinals, silent_states
from asr.whisper_text import NO_SPEECH, WhisperVocabulary
from training.distill import Cached, cache_teacher, cache_words, english
from training.speller import (
    add_numbers_option,
    add_spoken_option,
    reference_tokens,
    spoken_ids,
    word_ends,
)
from training.train import StopSignals, configure_cpu, lr_factor

WAITS = ("end", "no-speech")  # --wait: the token a cut memory's target ends with

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from asr.recognizer import Recognizer
    from training.manifest import Entry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, default=Path("models/default"), help="bundle")
    parser.add_argument("--train", type=Path, nargs="+", required=True, help="manifests")
    parser.add_argument("--valid", type=Path, required=True, help="held-out manifest")
    parser.add_argument("--limit", type=int, default=0, help="N random clips of each manifest")
    parser.add_argument(
        "--teacher-cache", type=Path, required=True, help="teacher states (asr distill's cache)"
    )
    parser.add_argument("--cache", type=Path, required=True, help="student states, word ends")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--rank", type=int, default=8, help="adapters' rank")
    parser.add_argument("--whole-share", type=float, default=0.3, help="examples read whole")
    parser.add_argument(
        "--wait",
        choices=WAITS,
        default="end",
        help="what the decoder learns to say at a cut: the end of text, or Whisper's "
        "no-speech token (never written)",
    )
    add_numbers_option(parser, "the targets")
    add_spoken_option(parser, "the targets")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--warmup", type=int, default=50, help="steps")
    parser.add_argument("--batch", type=int, default=8, help="clips per step")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="longer clips skipped")
    parser.add_argument("--valid-every", type=int, default=100, help="steps")
    parser.add_argument(
        "--average",
        type=int,
        default=0,
        metavar="N",
        help="write the mean of the adapters at the last N validations (the run's end among "
        "them) instead of those of the best held-out loss (default 0: the best)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from asr.bundle import load_model
    from training.manifest import read_manifest

    if not 0 <= args.whole_share <= 1 or args.rank < 1 or args.batch < 1 or args.epochs < 1:
        raise ValueError("--whole-share must be 0 to 1, --rank, --batch and --epochs at least 1")
    if args.average < 0:
        raise ValueError(
            f"--average must be 0 (off) or a number of validations, got {args.average}"
        )
    configure_cpu(args.threads)
    recognizer = load_model(args.model)
    finals = float32_finals(recognizer)

    def clips(manifests: list[Path]) -> list[Entry]:
        found = []
        for manifest in manifests:
            rows = read_manifest(manifest, require_text=False)[0]  # Whisper's text is the target
            rows = [e for e in rows if english(e) and (e.duration or 0) <= args.max_seconds]
            random.Random(args.seed).shuffle(rows)
            found += rows[: args.limit or None]
        return found

    valid_entries = clips([args.valid])
    held_out = {e.audio for e in valid_entries}
    train_entries = [e for e in clips(args.train) if e.audio not in held_out]
    spoken = spoken_ids(args.spoken, train_entries + valid_entries)
    cfg = WhisperConfig(
        teacher=str(args.model / "whisper_teacher.safetensors"),
        floor=recognizer.config.model.whisper.floor,
    )
    window = recognizer.config.decode.whisper_finals.window_s  # read as the finals read
    sets = []
    for name, entries in (("train", train_entries), ("valid", valid_entries)):
        cached = cache_teacher(
            entries, finals.teacher, cfg, args.teacher_cache, f"teacher ({name})"
        )
        cache_words(cached, finals, 16, f"teacher transcripts ({name})", args.numbers, window)
        by_id = {e.id: e for e in entries}
        heard = [c for c in cached if c.words is not None]
        sets.append(
            cache_examples(heard, by_id, recognizer, finals, args.cache, args.model, name, spoken)
        )
    train, valid = sets
    if not train or not valid:
        raise ValueError(
            "no clip with a sure transcript to train or validate on (English clips of at most "
            f"--max-seconds {args.max_seconds:g} that Whisper's decoder reads as words)"
        )
    tuner = AdapterTuner(finals, train, valid, args)
    tuner.meta = {
        "student_sha1": student_sha1(args.model),
        "rank": str(args.rank),
        "numbers": args.numbers,
        "spoken": " ".join(map(str, args.spoken)),
        "whole_share": str(args.whole_share),
        "epochs": str(args.epochs),
    }
    if args.average:
        tuner.meta["average"] = str(args.average)
    if args.wait == "no-speech":
        tuner.meta[WAIT_KEY] = NO_SPEECH
    stopped_by = tuner.fit(resume=args.resume)
    return 128 + stopped_by if stopped_by else 0


def float32_finals(recognizer: Recognizer) -> WhisperFinals:
    """The bundle's teacher and Whisper's decoder in float32 (gradients go through it)."""
    if recognizer.whisper_files is None or recognizer.frontend is None:
        raise ValueError("the bundle has no Whisper decoder and teacher to tune")
    decoder_file, tokenizer_file = recognizer.whisper_files
    decoder, rules = load_decoder(decoder_file)
    vocabulary = WhisperVocabulary.load(tokenizer_file)
    teacher = recognizer.frontend.full_attention()
    return WhisperFinals(teacher, decoder, rules, vocabulary, "float32")


# -- examples -----------------------------------------------------------------------------


@dataclass
class Example:
    """One clip: the served student's states [S, d], Whisper's transcript of it (the teacher
    read) and, per token, the end of its word, in states."""

    states: Tensor
    tokens: list[int]
    word_ends: list[int]


def example_name(item: Cached, student: str, spoken: bool = False) -> str:
    """The cache file of ``item``'s example under the student of SHA-1 ``student``, for the
    transcript it has (its numbers as Whisper writes them, or spelled; ``spoken``: its own
    text's words instead)."""
    assert item.words is not None
    key = json.dumps([item.words.name, student] + (["spoken"] if spoken else []))
    return hashlib.sha1(key.encode()).hexdigest()[:24] + ".npz"


def cache_examples(
    items: list[Cached],
    entries: dict[str, Entry],
    recognizer: Recognizer,
    finals: WhisperFinals,
    cache: Path,
    bundle: Path,
    desc: str,
    spoken: AbstractSet[str] = frozenset(),
) -> list[Example]:
    """Each transcribed clip's example, computed once: the student's states as a session
    gets them, the targets (Whisper's transcript, or for a clip whose id is ``spoken`` its
    own text styled as it: ``training.speller.reference_tokens``), and their word ends
    from the alignment heads over the teacher's states."""
    from training.dataset import entry_audio

    assert recognizer.frontend is not None
    cache.mkdir(parents=True, exist_ok=True)
    # hashed once: the file is tens of MB
    student = states_of(student_sha1(bundle), recognizer.config.model.whisper.prime)
    paths = [cache / example_name(item, student, item.id in spoken) for item in items]
    todo = [(i, p) for i, p in zip(items, paths) if not p.is_file()]
    for item, path in tqdm(todo, desc=f"student states ({desc})", unit="utt", leave=False):
        assert item.words is not None
        with np.load(item.words) as data:
            tokens = data["tokens"].tolist()
        if item.id in spoken:
            tokens = reference_tokens(finals.vocabulary, tokens, entries[item.id].text)
        with np.load(item.path) as data:
            teacher = torch.from_numpy(data["teacher"].astype(np.float32))
        stream = recognizer.frontend.stream()
        samples = entry_audio(entries[item.id], SAMPLE_RATE)
        states = np.concatenate([stream.accept(samples), stream.finish()])
        ends = finals.align(teacher, tokens)
        pieces = finals.vocabulary.pieces(tokens)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.savez(
                f,
                states=states.astype(np.float16),
                tokens=np.asarray(tokens, np.int32),
                word_ends=np.asarray(word_ends(pieces, ends), np.int32),
            )
        os.replace(tmp, path)
    examples = []
    for path in paths:
        with np.load(path) as data:
            states = torch.from_numpy(data["states"])  # float16: a few GB of clips
            if 2 <= len(states) <= STATES_PER_WINDOW:
                tokens, ends = data["tokens"].tolist(), data["word_ends"].tolist()
                examples.append(Example(states, tokens, ends))
    print(f"{desc}: {len(examples)} clips with the student's states and word ends in {cache}")
    return examples


def prefix_target(example: Example, cut: int | None, end: int, wait: int) -> list[int]:
    """What the decoder should say reading the memory up to ``cut`` states: the tokens of
    the words that end by then, and ``wait``; read whole (None), every token and ``end``."""
    if cut is None:
        return [*example.tokens, end]
    said = 0
    while said < len(example.tokens) and example.word_ends[said] <= cut:
        said += 1
    return [*example.tokens[:said], wait]


def random_cut(example: Example, whole_share: float, rng: random.Random) -> int | None:
    """A chunk end before the clip's last state (where the speller asks), or None (whole)."""
    cuts = range(CHUNK_STATES, len(example.states), CHUNK_STATES)
    if not cuts or rng.random() < whole_share:
        return None
    return rng.choice(cuts)


# -- training -----------------------------------------------------------------------------


class AdapterTuner:
    def __init__(
        self,
        finals: WhisperFinals,
        train: list[Example],
        valid: list[Example],
        args: argparse.Namespace,
    ) -> None:
        self.decoder = finals.decoder.train()
        self.prompt = list(finals.vocabulary.prompt)
        self.end = finals.vocabulary.end
        self.wait = finals.vocabulary.no_speech if args.wait == "no-speech" else self.end
        self.train, self.valid, self.args = train, valid, args
        add_adapters(self.decoder, self.decoder.layers, LINEARS, args.rank)
        # what the speller reads past a boundary, through the adapted cross-attention
        self.silent_states = silent_states(finals.teacher)
        self.params = [p for p in self.decoder.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=args.lr, weight_decay=0.0)
        self.out: Path = args.out
        self.meta: dict[str, str] = {}
        # fixed held-out cuts: every validation reads the same memories
        rng = random.Random(args.seed + 1)
        self.valid_cuts = [random_cut(e, 0.0, rng) for e in valid]

    def loss(self, examples: list[Example], cuts: list[int | None]) -> tuple[Tensor, Tensor, int]:
        """Summed cross-entropy over the targets' tokens, the number of waits (at a cut)
        read right, and the number of tokens."""
        targets = [prefix_target(e, c, self.end, self.wait) for e, c in zip(examples, cuts)]
        width = max(len(t) for t in targets)
        inputs = torch.tensor(
            [[*self.prompt, *t[:-1]] + [self.end] * (width - len(t)) for t in targets]
        )
        labels = torch.tensor([t + [-1] * (width - len(t)) for t in targets])
        states = torch.nn.utils.rnn.pad_sequence(
            [e.states.float() for e in examples], batch_first=True
        )
        reads = torch.tensor([len(e.states) if c is None else c for e, c in zip(examples, cuts)])
        silence = self.decoder.memory(self.silent_states)
        memory = WhisperTextDecoder.cut(self.decoder.memory(states), silence, reads)
        logp = self.decoder(inputs, memory)[:, len(self.prompt) - 1 :]
        valid = labels >= 0
        picked = logp.gather(-1, labels.clamp(min=0)[..., None])[..., 0]
        last = valid.sum(1) - 1
        rows = torch.arange(len(targets))
        waits = [c is not None for c in cuts]
        said_wait = (logp[rows, last].argmax(-1) == self.wait) & torch.tensor(waits)
        return -(picked[valid].sum()), said_wait.sum(), int(valid.sum())

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        self.decoder.eval()
        total, waited, tokens = 0.0, 0, 0
        for start in range(0, len(self.valid), self.args.batch):
            batch = self.valid[start : start + self.args.batch]
            cuts = self.valid_cuts[start : start + self.args.batch]
            loss, right, count = self.loss(batch, cuts)
            total, waited, tokens = total + float(loss), waited + int(right), tokens + count
        self.decoder.train()
        cut = sum(c is not None for c in self.valid_cuts)
        return {"loss": total / max(tokens, 1), "waits_right": waited / max(cut, 1)}

    def fit(self, resume: bool = False) -> int:
        """Train to the end of ``--epochs``; the signal's number where a stop was asked."""
        args = self.args
        self.out.mkdir(parents=True, exist_ok=True)
        state = {"step": 0, "epoch": 0, "batch": 0, "best": math.inf, "history": []}
        if resume:
            state = self._restore()
        per_epoch = math.ceil(len(self.train) / args.batch)
        total = per_epoch * args.epochs
        rng = random.Random(args.seed + state["step"])
        if state["step"] == 0:
            figures = self.validate()
            print(
                f"step 0 (Whisper's decoder as it is): held-out loss {figures['loss']:.4f}, "
                f"waits right {figures['waits_right']:.1%}"
            )
            state["history"].append({"step": 0, **figures})
        with StopSignals() as stop, tqdm(total=total, initial=state["step"], desc="tune") as bar:
            while state["epoch"] < args.epochs:
                order = list(range(len(self.train)))
                random.Random(args.seed + state["epoch"]).shuffle(order)
                while state["batch"] < per_epoch:
                    if stop.received:
                        self._save(state)
                        return stop.received
                    start = state["batch"] * args.batch
                    batch = [self.train[i] for i in order[start : start + args.batch]]
                    cuts = [random_cut(e, args.whole_share, rng) for e in batch]
                    factor = lr_factor(state["step"], args.warmup, total, 0.1)
                    for group in self.optimizer.param_groups:
                        group["lr"] = args.lr * factor
                    loss, _, count = self.loss(batch, cuts)
                    self.optimizer.zero_grad()
                    (loss / count).backward()
                    torch.nn.utils.clip_grad_norm_(self.params, 1.0)
                    self.optimizer.step()
                    state["step"] += 1
                    state["batch"] += 1
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss.item() / count:.3f}")
                    if state["step"] % args.valid_every == 0 or state["step"] == total:
                        self._validate_and_keep(state)
                state["epoch"] += 1
                state["batch"] = 0
        if args.average and "averaged" not in state:
            self._keep_average(state)
        self._save(state)
        return 0

    def _validate_and_keep(self, state: dict) -> None:
        figures = self.validate()
        state["history"].append({"step": state["step"], **figures})
        best = figures["loss"] < state["best"]
        keeps_best = best and not self.args.average
        tqdm.write(
            f"step {state['step']}: held-out loss {figures['loss']:.4f}, waits right "
            f"{figures['waits_right']:.1%}" + (" (best: saved)" if keeps_best else "")
        )
        if best:
            state["best"] = figures["loss"]
        if keeps_best:
            self.save_adapter(self.out / ADAPTER_FILE)
        if self.args.average:
            recent = state.setdefault("recent", [])
            recent.append(self._snapshot())
            del recent[: -self.args.average]
        self._save(state)

    def _keep_average(self, state: dict) -> None:
        """Write the mean of the adapters kept at the last ``--average`` validations, with
        its held-out figures in the history (``averaged``: how many it is the mean of)."""
        last = self._snapshot()
        averaged = averaged_adapters(state["recent"])
        restore_adapters(self.decoder.layers, LINEARS, averaged)
        figures = self.validate()
        self.save_adapter(self.out / ADAPTER_FILE)
        restore_adapters(self.decoder.layers, LINEARS, last)
        state["averaged"] = len(state["recent"])
        state["history"].append({"step": state["step"], "averaged": state["averaged"], **figures})
        steps = [h["step"] for h in state["history"] if "averaged" not in h][-state["averaged"] :]
        tqdm.write(
            f"the mean of steps {', '.join(map(str, steps))}: held-out loss "
            f"{figures['loss']:.4f}, waits right {figures['waits_right']:.1%} (saved)"
        )

    def _snapshot(self) -> dict[str, Tensor]:
        """The adapters as they are now, apart from the parameters training goes on to change."""
        return {k: v.clone() for k, v in adapter_weights(self.decoder.layers, LINEARS).items()}

    def save_adapter(self, path: Path) -> None:
        weights = {k: v.half() for k, v in adapter_weights(self.decoder.layers, LINEARS).items()}
        tmp = path.with_name(f".{path.name}.tmp")
        save_file(weights, str(tmp), metadata=self.meta)
        tmp.chmod(0o644)
        os.replace(tmp, path)

    def _save(self, state: dict) -> None:
        adapters = adapter_weights(self.decoder.layers, LINEARS)
        checkpoint = {
            "state": state,
            "adapters": adapters,
            "optimizer": self.optimizer.state_dict(),
        }
        tmp = self.out / ".last.pt.tmp"
        torch.save(checkpoint, tmp)
        os.replace(tmp, self.out / "last.pt")
        (self.out / "history.json").write_text(json.dumps(state["history"], indent=1) + "\n")

    def _restore(self) -> dict:
        path = self.out / "last.pt"
        if not path.is_file():
            raise FileNotFoundError(f"--resume: no {path} to continue from")
        checkpoint = torch.load(path, weights_only=False)
        restore_adapters(self.decoder.layers, LINEARS, checkpoint["adapters"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        print(f"resumed at step {checkpoint['state']['step']}")
        return checkpoint["state"]
