"""Distil a streaming Whisper encoder (the student) from the full-attention teacher.

The teacher is Whisper-base's encoder with full attention over each utterance
(model.whisper.teacher); the student is the same network under the streaming
mask (model.whisper.chunk, left_context), initialised from the teacher (or from
an earlier student, distill.init) and trained to reproduce the teacher's final states (relative squared error), on
unlabelled audio. Teacher states are computed once per utterance and cached
(distill.cache_dir, keyed by audio span and front-end settings), so an epoch
costs only the student. With ``distill.kl_weight``, Whisper's frozen decoder also reads the
student's states, teacher-forced on the teacher's own greedy transcript of each English
clip (written once into the cache with the teacher's top token log-probabilities), and the
student learns to make the decoder's token distributions match those it gives reading the
teacher (a KL over the teacher's likeliest tokens): it keeps what the decoder needs rather
than every detail of states that saw the future. Checkpoints (OUT/last.pt) carry everything needed to
continue where a killed run stopped; the student with the lowest held-out
distance (the start included, when it is an earlier student) is
OUT/student/encoder.safetensors, loadable like the teacher.

Examples:
  asr distill --config training/configs/distill.yaml --out exp/distill \\
      distill.train_manifests=[data/synth/train.jsonl] distill.valid_manifest=data/synth/dev.jsonl
  asr distill --config exp/distill/config.json --out exp/distill --resume
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import math
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from tqdm import tqdm

from asr.adapters import add_adapters, merge_adapters
from asr.config import Config, Numbers, WhisperConfig, WhisperFinalsConfig
from asr.speller import file_sha1
from asr.whisper_decoder import DECODER_FILE, load_decoder
from asr.whisper_encoder import (
    LAYER_LINEARS,
    WEIGHTS_FILE,
    WhisperEncoder,
    load_encoder,
    weights_file,
)
from asr.whisper_features import SAMPLE_RATE, log_mel
from asr.whisper_finals import WhisperFinals
from asr.whisper_text import TOKENIZER_FILE, WhisperVocabulary
from training.augment import augment
from training.dataset import entry_audio, make_batches
from training.manifest import Entry, read_manifest
from training.train import StopSignals, configure_cpu, lr_factor

MAX_TEACHER_FRAMES = 3000  # Whisper's 30 s of log-mel frames
TEACHER_BATCH_FRAMES = 6000  # padded log-mel frames per teacher batch (60 s)


@dataclass
class Cached:
    """One utterance's cached log-mel frames and teacher states, and, for the decoder-level
    loss, what Whisper's decoder read from the teacher's states (None: no English text)."""

    id: str
    path: Path
    frames: int
    words: Path | None = None


@dataclass
class Words:
    """Token inputs [B, L] (prompt, transcript; padded with the end token), and per row
    the teacher's top log-probabilities [B, N, k] with their token ids at each position
    from the prompt's last on (N: the transcript and the end), valid where ``valid``."""

    inputs: torch.Tensor
    ids: torch.Tensor
    logp: torch.Tensor
    valid: torch.Tensor


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="YAML or JSON config")
    parser.add_argument("overrides", nargs="*", help="section.key=value settings")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")


def run(args: argparse.Namespace) -> int:
    config = Config.load(args.config, args.overrides)
    d = config.distill
    if not d.train_manifests or not d.valid_manifest:
        raise ValueError("distill.train_manifests and distill.valid_manifest must be set")
    for manifest in [*d.train_manifests, d.valid_manifest]:
        if not Path(manifest).is_file():
            raise FileNotFoundError(f"manifest {manifest} does not exist")
    if d.init and not Path(d.init).exists():
        raise FileNotFoundError(f"distill.init {d.init} does not exist")
    if args.resume and not (args.out / "last.pt").is_file():
        raise FileNotFoundError(f"--resume: {args.out / 'last.pt'} does not exist")
    config.model.whisper.streaming().check(1500)
    stopped_by = Distiller(config, args.out).fit(resume=args.resume)
    return 128 + stopped_by if stopped_by else 0  # 130 for SIGINT, 143 for SIGTERM


def _cache_name(entry: Entry, teacher: str, floor: float) -> str:
    key = json.dumps([entry.audio, entry.offset, entry.end, teacher, floor])
    return hashlib.sha1(key.encode()).hexdigest()[:24] + ".npz"


@torch.no_grad()
def cache_teacher(
    entries: list[Entry], teacher: WhisperEncoder, cfg: WhisperConfig, cache_dir: Path, desc: str
) -> list[Cached]:
    """Log-mel frames and full-attention teacher states of each entry, computed once.

    Missing entries are encoded in length-sorted padded batches of about 60 s, which
    costs a third of one utterance at a time here.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    # keyed by the teacher's weights, not their path: a run from another bundle holding the
    # same teacher (a copy carrying a new student) finds the states already computed
    sha1 = file_sha1(weights_file(cfg.teacher))
    paths = {e.id: cache_dir / _cache_name(e, sha1, cfg.floor) for e in entries}
    # once each, though a manifest given twice (to weigh it) lists its entries twice
    todo = list({e.id: e for e in entries if not paths[e.id].is_file()}.values())
    skipped = 0
    audio_cache: dict[str, np.ndarray] = {}
    pending: list[tuple[Entry, np.ndarray]] = []
    with tqdm(total=len(todo), desc=desc, unit="utt", leave=False) as bar:
        for entry in sorted(todo, key=lambda e: e.duration or 0.0):
            try:
                mel = log_mel(entry_audio(entry, SAMPLE_RATE, audio_cache), cfg.floor)
            except ValueError as err:
                tqdm.write(f"skipping {entry.id}: {err}")
                mel = np.zeros((0, 80), np.float32)
            if not 2 <= len(mel) <= MAX_TEACHER_FRAMES:
                skipped += 1
                bar.update(1)
                continue
            pending.append((entry, mel))
            if len(pending) * len(mel) >= TEACHER_BATCH_FRAMES:
                _encode_and_save(pending, teacher, paths)
                bar.update(len(pending))
                pending = []
        if pending:
            _encode_and_save(pending, teacher, paths)
            bar.update(len(pending))
    found = []
    for entry in entries:
        if paths[entry.id].is_file():
            with np.load(paths[entry.id]) as data:
                found.append(Cached(entry.id, paths[entry.id], int(data["mel"].shape[0])))
    print(
        f"{desc}: {len(found)} utterances ({len(todo) - skipped} computed, {skipped} skipped: "
        f"undecodable, shorter than 20 ms or longer than 30 s) in {cache_dir}"
    )
    return found


def _encode_and_save(
    batch: list[tuple[Entry, np.ndarray]], teacher: WhisperEncoder, paths: dict[str, Path]
) -> None:
    mels = [torch.from_numpy(mel) for _, mel in batch]
    lengths = torch.tensor([len(m) for m in mels])
    states, out_lengths = teacher(torch.nn.utils.rnn.pad_sequence(mels, batch_first=True), lengths)
    for row, (entry, mel) in enumerate(batch):
        path = paths[entry.id]
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        target = states[row, : int(out_lengths[row])].numpy().astype(np.float16)
        with open(tmp, "wb") as f:
            np.savez(f, mel=mel, teacher=target)
        os.replace(tmp, path)


WORDS_BATCH = 16  # clips whose teacher states Whisper's decoder reads at once
MAX_TOKENS = 224  # Whisper's longest transcript of a window
TOKENS_PER_STATE = 0.2  # 10 tokens a second: twice and more what speech says


def english(entry: Entry) -> bool:
    """Whether a clip is English (synthetic corpora carry no language: they are)."""
    return str(entry.extra.get("language", "en")).lower().startswith("en")


@torch.no_grad()
def cache_words(
    items: list[Cached],
    finals: WhisperFinals,
    top: int,
    desc: str,
    numbers: Numbers = "digits",
    window_s: float = 0.0,
) -> None:
    """For each item: Whisper's greedy transcript of the teacher's cached states (with the
    finals' no-speech and loop checks; clips without a sure text get none) and the top
    ``top`` log-probabilities of the decoder teacher-forced on it, in ``<name>.words<top>.npz``
    beside the states (an empty file: no text); with ``numbers`` "words", numbers spelled as
    said (numerals suppressed), in ``<name>.spelled<top>.npz``. With ``window_s``, the
    transcript is read as the finals read a segment, the clip's frames encoded again inside
    Whisper's padding to that length (``<name>.<kind><top>-w<window_s>.npz``): read from the
    clip's own states alone, which distillation's targets are, real 1-3 word dev clips came
    out at 52.9% WER, often said twice ("no ways no ways"), and at 27.6% in a 10 s window
    (research record); the log-probabilities stay those over the clip's own states.
    Computed once, like the states."""
    vocabulary = finals.vocabulary
    kind = "words" if numbers == "digits" else "spelled"
    window = f"-w{window_s:g}" if window_s else ""
    for item in items:
        item.words = item.path.with_name(f"{item.path.stem}.{kind}{top}{window}.npz")
    missing = {i.path: i for i in items if not i.words.is_file()}  # a manifest given twice
    todo = sorted(missing.values(), key=lambda i: i.frames)
    for start in tqdm(range(0, len(todo), WORDS_BATCH), desc=desc, unit="batch", leave=False):
        batch = todo[start : start + WORDS_BATCH]
        states, mels = [], []
        for item in batch:
            with np.load(item.path) as data:
                states.append(torch.from_numpy(data["teacher"].astype(np.float32)))
                if window_s:
                    mels.append(torch.from_numpy(data["mel"]))
        lengths = torch.tensor([len(x) for x in states])
        padded = torch.nn.utils.rnn.pad_sequence(states, batch_first=True)
        # a looping row would hold its batch to 224 steps: speech says a few tokens a second
        limit = min(MAX_TOKENS, 8 + int(TOKENS_PER_STATE * int(lengths.max())))
        options = WhisperFinalsConfig(
            beam_size=1, max_tokens=limit, numbers=numbers, window_s=window_s
        )
        if window_s:
            texts = finals.transcribe(mels, options)
        else:
            texts = finals.decode(padded, lengths, options)
        sure = [i for i, t in enumerate(texts) if t.tokens and not t.fallback]
        if sure:
            rows = torch.tensor(sure)
            sequences = [[*vocabulary.prompt, *texts[i].tokens, vocabulary.end] for i in sure]
            inputs = _padded_inputs(sequences, vocabulary.end)
            memory, _ = finals.memory(padded[rows], lengths[rows], True)
            logp = finals.decoder(inputs, memory)[:, len(vocabulary.prompt) - 1 :]
            best = logp.topk(top, dim=-1)
        for i, item in enumerate(batch):
            tmp = item.words.with_name(f".{item.words.name}.{os.getpid()}.tmp")
            fields = {}
            if i in sure:
                row = sure.index(i)
                count = len(texts[i].tokens) + 1
                fields = {
                    "tokens": np.asarray(texts[i].tokens, np.int32),
                    "ids": best.indices[row, :count].numpy().astype(np.int32),
                    "logp": best.values[row, :count].numpy().astype(np.float16),
                }
            with open(tmp, "wb") as f:
                np.savez(f, **fields)
            os.replace(tmp, item.words)
    for item in items:
        with np.load(item.words) as data:
            if "tokens" not in data:
                item.words = None
    print(f"{desc}: {sum(i.words is not None for i in items)} of {len(items)} with a transcript")


def _padded_inputs(sequences: list[list[int]], end: int) -> torch.Tensor:
    """Each sequence but its last token, right-padded with ``end`` [B, L]."""
    width = max(len(s) for s in sequences) - 1
    return torch.tensor([s[:-1] + [end] * (width - len(s) + 1) for s in sequences])


def load_words(items: list[Cached], prompt: list[int], end: int) -> Words:
    """The cached transcripts and teacher log-probabilities of ``items`` (all with words)."""
    sequences, ids, logp = [], [], []
    for item in items:
        assert item.words is not None
        with np.load(item.words) as data:
            sequences.append([*prompt, *data["tokens"].tolist(), end])
            ids.append(torch.from_numpy(data["ids"].astype(np.int64)))
            logp.append(torch.from_numpy(data["logp"].astype(np.float32)))
    pad = torch.nn.utils.rnn.pad_sequence
    counts = torch.tensor([len(x) for x in ids])
    valid = torch.arange(int(counts.max())) < counts.unsqueeze(1)
    return Words(_padded_inputs(sequences, end), pad(ids, True), pad(logp, True), valid)


def decoder_kl(
    finals: WhisperFinals, states: torch.Tensor, lengths: torch.Tensor, words: Words
) -> tuple[torch.Tensor, int]:
    """Summed KL (over the teacher's top tokens) from the decoder's distributions reading
    the teacher's states to those reading ``states`` [B, S, d] (lengths [B] in states),
    teacher-forced on the teacher's transcript; and the number of positions summed."""
    memory, _ = finals.memory(states, lengths, True)
    first = len(finals.vocabulary.prompt) - 1
    ours = finals.decoder(words.inputs, memory)[:, first:].gather(-1, words.ids)
    theirs = words.logp
    kl = (theirs.exp() * (theirs - ours)).sum(-1)
    return kl[words.valid].sum(), int(words.valid.sum())


def load_batch(items: list[Cached]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded log-mel [B, T, 80], lengths [B] and teacher states [B, ceil(T / 2), D]."""
    mels, targets = [], []
    for item in items:
        with np.load(item.path) as data:
            mels.append(torch.from_numpy(data["mel"]))
            targets.append(torch.from_numpy(data["teacher"].astype(np.float32)))
    lengths = torch.tensor([len(m) for m in mels])
    pad = torch.nn.utils.rnn.pad_sequence
    return pad(mels, batch_first=True), lengths, pad(targets, batch_first=True)


def distance(
    student: torch.Tensor, teacher: torch.Tensor, lengths: torch.Tensor, delay: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Squared error, teacher energy and cosine sum over valid states, the student ``delay``
    states later: relative MSE = first / second, mean cosine = third / valid states."""
    steps = teacher.shape[1] - delay
    ours, theirs = student[:, delay : delay + steps], teacher[:, :steps]
    valid = torch.arange(steps).unsqueeze(0) < (lengths - delay).unsqueeze(1)
    ours, theirs = ours[valid], theirs[valid]
    cosine = torch.nn.functional.cosine_similarity(ours, theirs, dim=-1).sum()
    return ((ours - theirs) ** 2).sum(), (theirs**2).sum(), cosine


def save_encoder(encoder: WhisperEncoder, directory: Path, meta: dict[str, str]) -> Path:
    """Float16 weights in the teacher's format (``load_encoder`` reads both)."""
    directory.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().half().contiguous() for k, v in encoder.state_dict().items()}
    tmp = directory / f".{WEIGHTS_FILE}.tmp"
    save_file(weights, str(tmp), metadata={**encoder.dims.to_metadata(), **meta})
    os.replace(tmp, directory / WEIGHTS_FILE)
    return directory / WEIGHTS_FILE


class Distiller:
    def __init__(self, config: Config, out: Path) -> None:
        self.config = config
        self.cfg = config.distill
        self.whisper = config.model.whisper
        self.out = out
        self.streaming = self.whisper.streaming()
        configure_cpu(self.cfg.threads)

    def log(self, message: str) -> None:
        tqdm.write(message)
        with open(self.out / "distill.log", "a") as f:
            f.write(message + "\n")

    def prepare(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.config.save(self.out / "config.json")
        teacher = load_encoder(self.whisper.teacher)
        student = load_encoder(self.cfg.init) if self.cfg.init else teacher
        if student.dims != teacher.dims:
            raise ValueError(
                f"distill.init {self.cfg.init}: shape {student.dims} differs from the "
                f"teacher's {teacher.dims}"
            )
        cache = Path(self.cfg.cache_dir)
        # the teacher's states are the targets: text is unused, so unlabelled audio is welcome
        train = [
            e
            for m in self.cfg.train_manifests
            for e in read_manifest(Path(m), require_text=False)[0]
        ]
        valid = read_manifest(Path(self.cfg.valid_manifest), require_text=False)[0]
        held_out = {e.audio for e in valid}
        train = [e for e in train if e.audio not in held_out]
        self.train = cache_teacher(train, teacher, self.whisper, cache, "teacher states (train)")
        self.valid = cache_teacher(valid, teacher, self.whisper, cache, "teacher states (valid)")
        if not self.train or not self.valid:
            raise ValueError("no usable utterances to distil from (see the messages above)")
        self.finals: WhisperFinals | None = None
        if self.cfg.kl_weight > 0:
            self.finals = self._finals(teacher)
            for items, entries, name in (
                (self.train, train, "train"),
                (self.valid, valid, "valid"),
            ):
                spoken = {e.id for e in entries if english(e)}
                heard = [i for i in items if i.id in spoken]
                cache_words(heard, self.finals, self.cfg.kl_top, f"teacher transcripts ({name})")
        self.student = student.train()
        if self.cfg.adapter_rank > 0:
            add_adapters(self.student, self.student.layers, LAYER_LINEARS, self.cfg.adapter_rank)
        params = [p for p in self.student.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(params, lr=self.cfg.lr)
        self.max_frames = int(self.cfg.max_batch_seconds * 100)
        steps_per_epoch = len(make_batches([c.frames for c in self.train], self.max_frames, 0, 0))
        self.total_steps = self.cfg.epochs * steps_per_epoch  # the schedule's horizon

    def _finals(self, teacher: WhisperEncoder) -> WhisperFinals:
        """Whisper's frozen decoder and vocabulary from distill.decoder's bundle."""
        bundle = Path(self.cfg.decoder)
        if not self.cfg.decoder or not (bundle / DECODER_FILE).is_file():
            raise FileNotFoundError(
                f"distill.kl_weight > 0 needs distill.decoder: a bundle with {DECODER_FILE} "
                f"and {TOKENIZER_FILE} (got {self.cfg.decoder!r})"
            )
        decoder, rules = load_decoder(bundle / DECODER_FILE)
        for p in decoder.parameters():
            p.requires_grad_(False)
        vocabulary = WhisperVocabulary.load(bundle / TOKENIZER_FILE)
        # float32: the loss's gradient goes through the decoder to the student's states
        return WhisperFinals(teacher, decoder, rules, vocabulary, precision="float32")

    def save_checkpoint(self, state: dict) -> None:
        full = {
            "student": self.student.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            **state,
        }
        tmp = self.out / ".last.pt.tmp"
        torch.save(full, tmp)
        os.replace(tmp, self.out / "last.pt")

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Relative squared error and mean cosine to the teacher on the held-out audio, the
        decoder-level KL per token where it is trained, and the objective they weigh into."""
        self.student.eval()
        error = energy = cosine = kl = 0.0
        count = positions = 0
        for batch in make_batches([c.frames for c in self.valid], self.max_frames, 0, 0, False):
            items = [self.valid[i] for i in batch]
            mel, lengths, teacher = load_batch(items)
            states, _ = self.student(mel, lengths, self.streaming)
            e, t, c = distance(states, teacher, lengths, self.cfg.delay)
            error, energy, cosine = error + float(e), energy + float(t), cosine + float(c)
            count += int((WhisperEncoder.output_lengths(lengths) - self.cfg.delay).sum())
            if self.finals is not None:
                summed, n = self._kl(items, states, lengths)
                kl, positions = kl + float(summed), positions + n
        self.student.train()
        result = {"rel_mse": error / energy, "cosine": cosine / count}
        if self.finals is not None:
            result["kl"] = kl / max(positions, 1)
        result["objective"] = self.cfg.distance_weight * result[
            "rel_mse"
        ] + self.cfg.kl_weight * result.get("kl", 0.0)
        return result

    def _kl(
        self, items: list[Cached], states: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, int]:
        """The decoder-level KL summed over the positions of the items with a transcript."""
        assert self.finals is not None
        rows = [i for i, item in enumerate(items) if item.words is not None]
        if not rows:
            return states.new_zeros(()), 0
        vocabulary = self.finals.vocabulary
        words = load_words([items[i] for i in rows], vocabulary.prompt, vocabulary.end)
        ends = WhisperEncoder.output_lengths(lengths[rows])
        delay = self.cfg.delay  # the student's state t + delay stands for the teacher's t
        ours = states[rows][:, delay : delay + int(ends.max())]
        return decoder_kl(self.finals, ours, ends, words)

    def fit(self, resume: bool = False) -> int:
        """Distil to the budget; 0, or the signal (SIGINT, SIGTERM) that stopped it after a
        step, whose state is then saved in last.pt for --resume."""
        self.prepare()
        torch.manual_seed(self.cfg.seed)
        state = {"epoch": 0, "batch": 0, "step": 0, "seconds": 0.0, "best": math.inf, "history": []}
        if resume:
            saved = torch.load(self.out / "last.pt", map_location="cpu", weights_only=False)
            self.student.load_state_dict(saved.pop("student"))
            self.optimizer.load_state_dict(saved.pop("optimizer"))
            torch.set_rng_state(saved.pop("torch_rng"))
            state.update(saved)
            self.log(f"resumed at step {state['step']} (epoch {state['epoch'] + 1})")
        else:
            self._validate_and_keep(
                state, "distill.init" if self.cfg.init else "the masked teacher"
            )
        origin = time.monotonic() - state["seconds"]
        bar = tqdm(total=self.total_steps, initial=state["step"], desc="distill", unit="step")
        # checked before a step, as `asr train` does: a resumed run whose budget is spent
        # takes no further step and leaves its student as it was
        stop = self._budget_spent(state)
        if stop:
            self.log(f"step {state['step']}: distill.max_steps / max_minutes already reached")
        with StopSignals() as signals:
            while state["epoch"] < self.cfg.epochs and not stop and not signals.received:
                order = make_batches(
                    [c.frames for c in self.train], self.max_frames, self.cfg.seed, state["epoch"]
                )
                while state["batch"] < len(order):
                    loss = self._step(
                        [self.train[i] for i in order[state["batch"]]],
                        state,
                        time.monotonic() - origin,
                    )
                    state["batch"] += 1
                    state["step"] += 1
                    state["seconds"] = time.monotonic() - origin
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss:.4f}", minutes=f"{state['seconds'] / 60:.1f}")
                    if signals.received:  # saved below, without the validation a stop would run
                        stop = True
                        break
                    stop = self._budget_spent(state)
                    if state["step"] % self.cfg.valid_every == 0 or stop:
                        self._validate_and_keep(state)
                    if state["step"] % self.cfg.checkpoint_every == 0 or stop:
                        self.save_checkpoint(state)
                    if stop:
                        break
                if not stop:
                    state["epoch"] += 1
                    state["batch"] = 0
                    self._validate_and_keep(state)
                    self.save_checkpoint(state)
        bar.close()
        if signals.received:
            self.save_checkpoint(state)
            out = shlex.quote(str(self.out))
            self.log(
                f"interrupted after step {state['step']}: {self.out / 'last.pt'} saved; go on "
                f"with asr distill --config {out}/config.json --out {out} --resume"
            )
            return signals.received
        if math.isfinite(state["best"]):
            self.log(
                f"done: best held-out objective {state['best']:.4f}; "
                f"student in {self.out / 'student'}"
            )
        else:  # no step was validated: nothing to write (distill.epochs=0, say)
            self.log(
                f"done: nothing was trained (step {state['step']}, distill.epochs="
                f"{self.cfg.epochs}); no student was written"
            )
        return 0

    def _budget_spent(self, state: dict) -> bool:
        """Whether distill.max_steps or distill.max_minutes (0: no limit) is reached."""
        return bool(self.cfg.max_steps and state["step"] >= self.cfg.max_steps) or bool(
            self.cfg.max_minutes and state["seconds"] >= 60 * self.cfg.max_minutes
        )

    def _step(self, items: list[Cached], state: dict, seconds: float) -> float:
        mel, lengths, teacher = load_batch(items)
        rng = np.random.default_rng([self.cfg.seed, state["step"]])  # so a resume draws the same
        shifted = rng.random(len(items)) < self.cfg.position_offset_share
        phase = rng.integers(0, self.student.dims.n_ctx, len(items))
        offsets = torch.from_numpy(np.where(shifted, phase, 0))
        progress = seconds / (60 * self.cfg.max_minutes) if self.cfg.max_minutes else 0.0
        factor = lr_factor(
            state["step"],
            self.cfg.warmup_steps,
            self.total_steps,
            self.cfg.final_lr_ratio,
            progress,
        )
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr * factor
        if self.cfg.augment:  # the student hears the changed audio, the target stays
            mel = augment(
                mel, lengths, self.cfg.augment, self.cfg.augment_share, self.whisper.floor, rng
            )
        with torch.autocast("cpu", torch.bfloat16, enabled=self.cfg.precision == "bfloat16"):
            states, _ = self.student(mel, lengths, self.streaming, offsets)
        states = states.float()
        error, energy, _ = distance(states, teacher, lengths, self.cfg.delay)
        loss = self.cfg.distance_weight * error / energy
        if self.finals is not None:
            summed, positions = self._kl(items, states, lengths)
            loss = loss + self.cfg.kl_weight * summed / max(positions, 1)
        value = float(loss.detach())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.student.parameters(), 1.0)
        self.optimizer.step()
        if state["step"] % self.cfg.log_every == 0:
            self.log(f"step {state['step']}: loss {value:.4f}, lr {self.cfg.lr * factor:.2e}")
        return value

    def _validate_and_keep(self, state: dict, start: str = "") -> None:
        """Validate and write the student if it is the best so far. The start (``start``
        names it) counts when it is an earlier student: a run whose steps all read worse
        leaves it as it was, not its least bad step; the masked teacher is no student."""
        result = self.validate()
        state["history"].append({"step": state["step"], **result})
        better = result["objective"] < state["best"] and (not start or bool(self.cfg.init))
        kl = f", decoder KL {result['kl']:.4f}" if "kl" in result else ""
        label = f"step {state['step']}" + (f" ({start})" if start else "")
        self.log(
            f"{label}: held-out rel MSE {result['rel_mse']:.4f}, "
            f"cosine {result['cosine']:.4f}{kl}" + (" (best)" if better else "")
        )
        if better:
            state["best"] = result["objective"]
            student = WhisperEncoder(self.student.dims)
            merged = copy.deepcopy(self.student)
            merge_adapters(merged.layers, LAYER_LINEARS)
            student.load_state_dict(merged.state_dict())
            meta = {
                "teacher": self.whisper.teacher,
                "streaming": json.dumps(dataclasses.asdict(self.streaming)),
                "delay": str(self.cfg.delay),
                "step": str(state["step"]),
                "heldout_rel_mse": f"{result['rel_mse']:.5f}",
                **({"heldout_kl": f"{result['kl']:.5f}"} if "kl" in result else {}),
            }
            save_encoder(student, self.out / "student", meta)
