"""Train a monotonic-attention model from a YAML config (plus section.key=value overrides).

Features are computed once and cached (train.feature_cache, or under the output
directory; training.cache_frames fills a shared cache ahead); CMVN comes
from the training features; the tokenizer is train.tokenizer, or trained from
the training texts when that is empty. With train.init a model bundle gives the
starting weights (widened when the run's layers are wider: training.widen), the tokenizer
and the CMVN instead. Checkpoints (output/last.pt, best.pt)
hold everything needed to continue exactly where a killed run stopped; model
bundles are written to output/bundle (final) and output/best_bundle. Ctrl-C or
SIGTERM stops after the current step and saves output/last.pt. A directory that
holds a run is only reused with --resume (same model and data) or --overwrite.

Examples:
  asr train --config training/configs/default.yaml train.train_manifest=data/train.jsonl \\
      train.valid_manifest=data/dev.jsonl --out exp/default
  asr train --config exp/default/config.json --out exp/default --resume
  asr train --config training/configs/whisper.yaml train.init=models/default ... --out exp/more
  asr train --config training/configs/whisper.yaml train.init=models/default \\
      model.encoder.units=512 model.decoder.units=512 ... --out exp/wider
  torchrun --standalone --nproc_per_node 2 -m asr.cli train --config CONFIG.yaml --out exp/ddp
  tensorboard --logdir exp/default/tensorboard
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import io
import math
import os
import random
import shlex
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from asr.bundle import CMVN_FILE, TOKENIZER_FILES, load_model, save_bundle
from asr.config import Config
from asr.decoding import decode_batch
from asr.features import CMVN
from asr.frontend import Frontend, load_frontend
from asr.model import Seq2Seq
from asr.scoring import wer
from asr.tokenizer import SentencePieceTokenizer, SymbolTokenizer, Tokenizer, load_tokenizer
from asr.whisper_encoder import WEIGHTS_FILE
from training.dataset import (
    Batch,
    SpecAugment,
    Utterance,
    UtteranceDataset,
    build_utterances,
    cache_features,
    collate,
    compute_cmvn,
    make_batches,
    teacher_batches,
    utterance_at,
)
from training.manifest import Entry, read_manifest
from training.widen import widened_state

TOKENIZER_SUFFIX = {"sentencepiece": ".model", "symbols": ".txt"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="YAML or JSON config")
    parser.add_argument("overrides", nargs="*", help="section.key=value settings")
    parser.add_argument("--out", type=Path, help="output directory (default: train.output_dir)")
    again = parser.add_mutually_exclusive_group()
    again.add_argument(
        "--resume", action="store_true", help="continue from OUT/last.pt where it stopped"
    )
    again.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in an OUT that holds a run, deleting its checkpoints, bundles and "
        "TensorBoard logs (its cached features and tokenizer stay)",
    )


def run(args: argparse.Namespace) -> int:
    config = Config.load(args.config, args.overrides)  # unknown keys fail here, before any work
    out = Path(args.out or config.train.output_dir)
    check_config(config, out, args.resume, args.overwrite)
    command = "asr " + shlex.join(sys.argv[1:])
    with Distributed() as ddp:
        stopped_by = Trainer(config, out, ddp, command).fit(args.resume, args.overwrite)
    return 128 + stopped_by if stopped_by else 0  # 130 for SIGINT, 143 for SIGTERM


# What a finished or interrupted run leaves: a fresh run into its directory needs --overwrite
# (which deletes these and the TensorBoard logs).
RUN_OUTPUTS = ("last.pt", "best.pt", "bundle", "best_bundle")
# Settings a resumed run must share with its checkpoint: the weights' shapes and front end, the
# data, tokenizer and CMVN they learned from and the batch order (model.*, the training
# manifest, tokenizer, init, seed, max_batch_seconds, teacher_share), and lr and weight_decay,
# which the optimizer's saved state would silently keep. Budgets (epochs, max_steps,
# max_minutes), logging, checkpoints, validation (its manifest too), the schedule's shape,
# augmentation and precision may change.
FIXED_ON_RESUME = (
    "model",
    "train.train_manifest",
    "train.tokenizer",
    "train.init",
    "train.seed",
    "train.max_batch_seconds",
    "train.teacher_share",
    "train.lr",
    "train.weight_decay",
)


def check_config(config: Config, out: Path, resume: bool, overwrite: bool = False) -> None:
    """Everything that can be checked cheaply, so a bad run fails before feature extraction."""
    t = config.train
    if not t.train_manifest:
        raise ValueError("train.train_manifest is not set")
    for name in ("train_manifest", "valid_manifest", "tokenizer"):
        value = getattr(t, name)
        if value and not Path(value).is_file():
            raise FileNotFoundError(f"train.{name}: {value} does not exist")
    kind = config.model.tokenizer.kind
    if t.tokenizer and Path(t.tokenizer).suffix != TOKENIZER_SUFFIX[kind]:
        raise ValueError(
            f"train.tokenizer {t.tokenizer} does not fit model.tokenizer.kind={kind} "
            f"(expected a {TOKENIZER_SUFFIX[kind]} file)"
        )
    if resume and not (out / "last.pt").is_file():
        raise FileNotFoundError(f"--resume: {out / 'last.pt'} does not exist")
    if resume:
        check_resume(config, out / "last.pt")
    held = [name for name in RUN_OUTPUTS if (out / name).exists()]
    if held and not resume and not overwrite:
        raise ValueError(
            f"{out} holds a run ({', '.join(held)}): add --resume to continue it, --overwrite "
            "to start afresh and replace it, or train into another --out"
        )
    if t.init and t.tokenizer:
        raise ValueError("train.init brings its bundle's tokenizer: leave train.tokenizer empty")
    if t.init and not (Path(t.init) / "config.json").is_file():
        raise FileNotFoundError(f"train.init: {t.init} is not a model bundle (no config.json)")
    if t.init:
        check_init_front_end(config, Path(t.init))
    if t.teacher_share > 0:
        if config.model.frontend != "whisper":
            raise ValueError("train.teacher_share needs model.frontend=whisper (a teacher)")
        teacher = Path(config.model.whisper.teacher) / WEIGHTS_FILE
        if not teacher.is_file():
            raise FileNotFoundError(
                f"train.teacher_share: the teacher {teacher} does not exist (model.whisper.teacher)"
            )
    Seq2Seq(config.model, 4)  # validates the architecture settings


def check_resume(config: Config, checkpoint: Path) -> None:
    """Refuse, naming them, settings that differ from the checkpoint's in FIXED_ON_RESUME, before
    any file of the run is written: its weights would not load (or would train on other data),
    and config.json, rewritten with the wrong settings, would make every later resume fail."""
    try:
        saved = torch.load(checkpoint, map_location="cpu", weights_only=False, mmap=True)
        trained = Config.from_dict(saved["config"])
    except (RuntimeError, OSError, KeyError, ValueError, EOFError) as err:
        raise ValueError(f"--resume: cannot read the settings in {checkpoint} ({err})") from None
    differing = trained.differences(config, FIXED_ON_RESUME)
    if differing:
        listed = "; ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in differing.items())
        raise ValueError(
            f"--resume: this run's settings differ from those {checkpoint} was trained with "
            f"({listed}). A resumed run keeps its model, data, seed, batch size, lr and "
            "weight_decay (budgets, logging and validation may change): resume with "
            f"--config {checkpoint.parent / 'config.json'}, or train into another --out"
        )


# The front-end settings a train.init bundle's weights and CMVN were trained on, which a run
# from it must keep. The Whisper encoder itself, its mask and its int8 scheme may change: the
# recipe goes on from a bundle over a newly distilled student at another chunk (models/default,
# 8 -> 16 states) or on rows-int8 frames, and the layers learn the new states.
INIT_FRONT_END = {
    "fbank": ("model.frontend", "model.features"),
    "whisper": ("model.frontend", "model.whisper.floor"),
}


def check_init_front_end(config: Config, bundle: Path) -> None:
    """Refuse a train.init bundle trained on other frames (another front end, other filterbank
    settings or log-mel floor): its weights and CMVN would load, and read the wrong features."""
    trained = Config.load(bundle / "config.json")
    differing = trained.differences(config, INIT_FRONT_END[trained.model.frontend])
    if differing:
        listed = "; ".join(f"{k}: {a!r} there, {b!r} here" for k, (a, b) in differing.items())
        raise ValueError(
            f"train.init: {bundle} was trained on another front end ({listed}); a run from it "
            "must keep the bundle's model.frontend and its model.features (fbank) or "
            "model.whisper.floor (whisper)"
        )


class StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM during training ask for a stop after the current step, so
    that the run saves last.pt and can resume (Trainer.fit); a second signal acts at once, as
    it did before. Outside the main thread (no signals there) it does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received = 0  # the signal's number, 0 while none came
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def _handle(self, signum: int, _frame: object) -> None:
        self.received = signum
        self._restore()
        name = signal.Signals(signum).name
        os.write(2, f"\n{name}: stopping after this step (send it again to stop now)\n".encode())

    def _restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    def __exit__(self, *exc: object) -> None:
        self._restore()


class Distributed:
    """torch.distributed when launched by torchrun (WORLD_SIZE > 1), otherwise one process."""

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.device = torch.device("cpu")

    def __enter__(self) -> Distributed:
        if self.world > 1:
            # torch._dynamo, which the first optimizer imports, keeps references to a process
            # group that exists when it is imported: imported after init, it kept the group
            # alive past destroy_process_group, and gloo's worker threads then freed their
            # last work during interpreter shutdown, aborting a rank (about 1 run in 50).
            import torch._dynamo  # noqa: F401

            backend = "gloo"
            if torch.cuda.is_available():
                backend = "nccl"
                self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
                torch.cuda.set_device(self.device)
            dist.init_process_group(backend, timeout=timedelta(hours=4))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self.world > 1:
            # Ranks leave together, none while rank 0 still writes the bundle. (The SIGABRT
            # this barrier was first meant for came from the group outliving its teardown:
            # see __enter__.)
            if exc_type is None:
                dist.barrier()
            dist.destroy_process_group()

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            tensor = tensor.to(self.device)
            dist.all_reduce(tensor)
        return tensor.cpu()

    def gather(self, obj: Any) -> list[Any]:
        if self.world == 1:
            return [obj]
        objects: list[Any] = [None] * self.world
        dist.all_gather_object(objects, obj)
        return objects

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.world == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, 0)
        return box[0]

    def broadcast_model(self, model: torch.nn.Module) -> None:
        if self.world > 1:
            for tensor in model.state_dict().values():
                dist.broadcast(tensor, 0)


def configure_cpu(threads: int) -> None:
    """Intra-op threads (0: torch's default), and denormal floats flushed to zero.

    Soft monotonic attention's far-off probabilities are products of many (1 - p) that
    sink into the denormal range; reaching the decoder's matrix products (forward and
    backward), they made those products 5x slower on x86 and a training step 35% slower.
    Values below 1e-38 are zero to every loss and gradient that matters.
    """
    if threads:
        torch.set_num_threads(threads)
    torch.set_flush_denormal(True)


@functools.cache
def cpu_bfloat16_works() -> bool:
    """Whether this CPU runs LSTMs under bfloat16 autocast. oneDNN's bfloat16 LSTM needs
    AVX512-BF16 (or AMX); without it (an AMD EPYC here) it cannot create the primitive."""
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(4, 4, batch_first=True)(torch.zeros(1, 2, 4))
    except RuntimeError:
        return False
    return True


def step_precision(precision: str, device_type: str) -> torch.autocast:
    """The autocast context a training step's forward runs under (train.precision);
    bfloat16 on a CPU that cannot run it is float32 (``Trainer.prepare`` says so)."""
    enabled = precision == "bfloat16" and (device_type != "cpu" or cpu_bfloat16_works())
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=enabled)


def lr_factor(
    step: int, warmup: int, total: int, final_ratio: float, time_progress: float = 0.0
) -> float:
    """Linear warmup to 1, then cosine decay to ``final_ratio`` at ``total`` steps, or
    earlier once ``time_progress`` (the used fraction of a time budget) is further on."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, max((step - warmup) / span, time_progress))
    return final_ratio + (1 - final_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@dataclass
class Position:
    """Where training stands: the next batch to run is ``order[batch]`` of ``epoch``."""

    epoch: int = 0
    batch: int = 0
    step: int = 0
    order: list[list[int]] | None = None
    best_wer: float = math.inf
    seconds: float = 0.0  # training time so far, summed over resumed runs
    history: list[dict[str, float]] = field(default_factory=list)

    @property
    def epochs_done(self) -> float:
        """Epochs trained, the current one counted by its share of batches run."""
        return self.epoch + (self.batch / len(self.order) if self.order else 0.0)


class Trainer:
    """One training run (one process of possibly several)."""

    def __init__(self, config: Config, out: Path, ddp: Distributed, command: str) -> None:
        self.config = config
        self.cfg = config.train
        self.out = out
        self.ddp = ddp
        self.command = command
        self.log = print if ddp.main else (lambda *_: None)
        self.signals = StopSignals()  # replaced by the one fit() installs
        self.interrupted = False  # a stop signal came, on any rank

    # -- data -------------------------------------------------------------------------
    def _entries(self, manifest: str) -> list[Entry]:
        # Every rank reads the manifest; only rank 0 reports skipped lines.
        entries, _ = read_manifest(manifest, log=sys.stderr if self.ddp.main else io.StringIO())
        if not entries:
            raise ValueError(f"{manifest}: no usable utterances")
        return entries

    def _tokenizer(self, texts: list[str]) -> tuple[Tokenizer, Path]:
        if self.cfg.init:
            path = Path(self.cfg.init) / TOKENIZER_FILES[self.config.model.tokenizer.kind]
            return load_tokenizer(path), path
        if self.cfg.tokenizer:
            return load_tokenizer(self.cfg.tokenizer), Path(self.cfg.tokenizer)
        tok_cfg = self.config.model.tokenizer
        path = self.out / ("tokenizer.model" if tok_cfg.kind == "sentencepiece" else "tokens.txt")
        if self.ddp.main and not path.is_file():
            if tok_cfg.kind == "sentencepiece":
                SentencePieceTokenizer.train(
                    texts, path.with_suffix(""), tok_cfg.vocab_size, tok_cfg.model_type
                )
            else:
                SymbolTokenizer.build(texts).save(path)
            self.log(f"tokenizer trained from {len(texts)} texts: {path}")
        self.ddp.barrier()
        return load_tokenizer(path), path

    @property
    def feature_dir(self) -> Path:
        return Path(self.cfg.feature_cache) if self.cfg.feature_cache else self.out / "features"

    def _features(
        self, entries: list[Entry], desc: str, frontend: Frontend | None = None
    ) -> dict[str, tuple[Path, int]]:
        cache, frontend = self.feature_dir, frontend or self.frontend
        parts = self.ddp.gather(
            cache_features(entries, frontend, cache, self.ddp.rank, self.ddp.world, desc)
        )
        return {k: v for part in parts for k, v in part.items()}

    def _cmvn(self, train: list[Utterance]) -> CMVN:
        if self.cfg.init:  # the statistics the starting weights learned under
            return CMVN.load(Path(self.cfg.init) / CMVN_FILE)
        names = "\n".join(u.features.name for u in train).encode()
        path = self.feature_dir / f"cmvn-{hashlib.sha1(names).hexdigest()[:16]}.json"
        if self.ddp.main and not path.is_file():
            compute_cmvn(train).save(path)
        self.ddp.barrier()
        return CMVN.load(path)

    def prepare(self, overwrite: bool = False) -> None:
        """Manifests, tokenizer, features, CMVN, model and optimizer; with ``overwrite`` the
        outputs of the run in OUT go first, so none of its files mixes with the new run's."""
        configure_cpu(self.cfg.threads)
        self.out.mkdir(parents=True, exist_ok=True)
        if self.ddp.main:
            if overwrite:
                for name in (*RUN_OUTPUTS, "tensorboard"):
                    path = self.out / name
                    if path.is_dir():
                        shutil.rmtree(path)
                    else:
                        path.unlink(missing_ok=True)
            self.config.save(self.out / "config.json")
        train_entries = self._entries(self.cfg.train_manifest)
        valid_entries = self._entries(self.cfg.valid_manifest) if self.cfg.valid_manifest else []
        self.tokenizer, self.tokenizer_file = self._tokenizer([e.text for e in train_entries])
        self.frontend = load_frontend(self.config.model)
        torch.manual_seed(self.cfg.seed)
        self.model = Seq2Seq(self.config.model, self.tokenizer.vocab_size)
        if self.cfg.init:
            self._start_from(Path(self.cfg.init))
        reduction = self.model.encoder.reduction
        teacher = None
        if self.cfg.teacher_share > 0:
            teacher = self._features(
                train_entries, "teacher train features", self.frontend.teacher_view()
            )
        self.train_set = build_utterances(
            train_entries,
            self._features(train_entries, "train features"),
            self.tokenizer,
            reduction,
            self.log,
            teacher,
        )
        self.valid_set = build_utterances(
            valid_entries,
            self._features(valid_entries, "valid features"),
            self.tokenizer,
            reduction,
            self.log,
        )
        if not self.train_set:
            raise ValueError(f"{self.cfg.train_manifest}: no usable training utterances")
        self.cmvn = self._cmvn(self.train_set)
        self.model.set_cmvn(torch.from_numpy(self.cmvn.mean), torch.from_numpy(self.cmvn.std))
        self.ddp.broadcast_model(self.model)
        self.model.to(self.ddp.device)
        self.frame_seconds = self.frontend.frame_seconds
        self.max_frames = int(self.cfg.max_batch_seconds / self.frame_seconds)
        self.batches_per_epoch = len(self._order(0))
        total = self.batches_per_epoch * self.cfg.epochs
        if self.cfg.max_steps:
            total = min(total, self.cfg.max_steps)
        self.total_steps = total
        self._time_progress = 0.0  # read by the schedule; fit() keeps it current
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda step: lr_factor(
                step, self.cfg.warmup_steps, total, self.cfg.final_lr_ratio, self._time_progress
            ),
        )
        self.augment = SpecAugment(self.cfg.spec) if self.cfg.specaugment else None
        if self.cfg.precision == "bfloat16" and not cpu_bfloat16_works():
            self.log("train.precision=bfloat16: this CPU cannot run LSTMs in bfloat16, so float32")
        hours = sum(u.frames for u in self.train_set) * self.frame_seconds / 3600
        self.log(
            f"{len(self.train_set)} training utterances ({hours:.2f} h), "
            f"{len(self.valid_set)} validation; vocabulary {self.tokenizer.vocab_size}; "
            f"{self.model.num_parameters() / 1e6:.2f}M parameters; "
            f"{self.batches_per_epoch} batches per epoch; {self.ddp.world} process(es)"
        )

    def _start_from(self, bundle: Path) -> None:
        """train.init: the bundle's weights; where this run's model is wider (more units,
        a wider embedding or attention), the bundle's model widened to it (training.widen)."""
        start = load_model(bundle)
        try:
            self.model.load_state_dict(start.model.state_dict())
        except RuntimeError as err:
            try:
                self.model.load_state_dict(widened_state(start.model, self.model))
            except ValueError as why:
                raise ValueError(
                    f"train.init: {bundle}'s weights do not fit this run's model settings "
                    f"({str(err).splitlines()[0]}), nor widen to them: {why}"
                ) from None
            before = start.model.num_parameters() / 1e6
            self.log(f"train.init: {bundle}'s model ({before:.2f}M parameters) widened")
        changed = start.config.differences(self.config, ("model.whisper",))
        for name, (old, new) in changed.items():  # allowed (INIT_FRONT_END), but said
            self.log(f"train.init: {name} is {new!r} here, {old!r} in {bundle}'s config")
        self.log(f"starting from {bundle}'s weights, tokenizer and CMVN")

    def _order(self, epoch: int) -> list[list[int]]:
        batches = make_batches(
            [u.frames for u in self.train_set], self.max_frames, self.cfg.seed, epoch
        )
        share = self.cfg.teacher_share
        return teacher_batches(batches, len(self.train_set), share, self.cfg.seed, epoch)

    # -- checkpoints ------------------------------------------------------------------
    def _rng_state(self) -> dict[str, Any]:
        return {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
        }

    def save_checkpoint(self, name: str, pos: Position) -> None:
        """Write OUT/name atomically (tmp file + os.replace); every rank's RNG state is kept."""
        rngs = self.ddp.gather(self._rng_state())
        if not self.ddp.main:
            return
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "position": pos.__dict__,
            "rng": rngs,
            "world_size": self.ddp.world,
            "config": self.config.to_dict(),
        }
        path = self.out / name
        tmp = path.with_name(f".{name}.tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)

    def load_checkpoint(self, path: Path) -> Position:
        state = torch.load(path, map_location="cpu", weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state["world_size"] == self.ddp.world:
            rng = state["rng"][self.ddp.rank]
            random.setstate(rng["python"])
            np.random.set_state(rng["numpy"])
            torch.set_rng_state(rng["torch"])
        else:
            self.log(
                f"warning: {path} was written by {state['world_size']} process(es), this run has "
                f"{self.ddp.world}: random streams restart, so the run is not bit-identical"
            )
        return Position(**state["position"])

    # -- training ---------------------------------------------------------------------
    def fit(self, resume: bool = False, overwrite: bool = False) -> int:
        """Train to the end of the budget and write the bundles; a SIGINT or SIGTERM stops
        after the current step with last.pt saved instead, and its number is returned (else 0)."""
        self.prepare(overwrite)
        self._seed_streams()
        pos = self.load_checkpoint(self.out / "last.pt") if resume else Position()
        if resume:
            self.log(f"resumed at epoch {pos.epoch + 1}, batch {pos.batch}, step {pos.step}")
        writer = None
        if self.ddp.main:
            writer = SummaryWriter(
                self.out / "tensorboard", purge_step=pos.step if resume else None
            )
        self._clock_origin = time.monotonic() - pos.seconds
        self._tick(pos)
        # A run resumed with its budget spent takes no further step: it only closes out what
        # a kill after its last step may have left undone.
        stop = self._budget_spent(pos)
        with StopSignals() as self.signals:
            self.log(f"Ctrl-C or SIGTERM stops after the current step and saves {self.out}/last.pt")
            while pos.epoch < self.cfg.epochs and not stop and not self.interrupted:
                if pos.order is None:
                    pos.order = self._order(pos.epoch)
                stop = self._run_epoch(pos, writer)
                if not stop:  # the epoch ran to its end
                    self._end_epoch(pos, writer)
                    self.interrupted = self._agree(self.signals.received > 0)
        if self.interrupted:
            self._tick(pos)
            self.save_checkpoint("last.pt", pos)
            out = shlex.quote(str(self.out))
            self.log(
                f"interrupted after step {pos.step}: {self.out}/last.pt saved; go on with "
                f"asr train --config {out}/config.json --out {out} --resume"
            )
        else:
            if stop:
                self._close_out(pos, writer)
            if self.ddp.main:
                self._write_bundle(self.out / "bundle", pos)
                self.log(f"final bundle: {self.out / 'bundle'}")
        if writer:
            writer.close()
        # a rank that got no signal itself stops with its peers, as if sent SIGTERM
        return (self.signals.received or signal.SIGTERM) if self.interrupted else 0

    def _agree(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank, so every rank stops at the same step."""
        return bool(self.ddp.all_sum(torch.tensor([float(flag)], dtype=torch.float64)).item())

    def _seed_streams(self) -> None:
        seed = self.cfg.seed + 1000 * self.ddp.rank
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    def _tick(self, pos: Position) -> None:
        """Bring the training clock (kept across resumes) and the time-budget progress up to date."""
        pos.seconds = time.monotonic() - self._clock_origin
        if self.cfg.lr_schedule == "minutes":
            self._time_progress = pos.seconds / (60 * self.cfg.max_minutes)

    def _budget_spent(self, pos: Position) -> bool:
        """Whether train.max_steps or train.max_minutes is reached at ``pos``."""
        return bool(self.cfg.max_steps and pos.step >= self.cfg.max_steps) or bool(
            self.cfg.max_minutes and pos.seconds >= 60 * self.cfg.max_minutes
        )

    def _run_epoch(self, pos: Position, writer: SummaryWriter | None) -> bool:
        """Run the rest of the current epoch; True when a step or time limit was reached."""
        assert pos.order is not None
        world, rank = self.ddp.world, self.ddp.rank
        remaining = pos.order[pos.batch :]
        shares = [batch[rank::world] for batch in remaining]
        loader = DataLoader(
            UtteranceDataset(self.train_set),
            batch_sampler=[s for s in shares if s],
            collate_fn=collate,
            num_workers=self.cfg.num_workers,
            # Its own generator: a loader iterator otherwise draws from the global RNG, so a
            # resumed run (one more iterator) would diverge from an uninterrupted one.
            generator=torch.Generator(),
        )
        batches = iter(loader)
        bar = tqdm(
            total=len(pos.order),
            initial=pos.batch,
            desc=f"epoch {pos.epoch + 1}/{self.cfg.epochs}",
            unit="batch",
            disable=not self.ddp.main,
            dynamic_ncols=True,
        )
        smoothed: float | None = None
        self.model.train()
        for global_batch, share in zip(remaining, shares):
            t0 = time.monotonic()
            stats = self._step(global_batch, next(batches) if share else None)
            pos.batch += 1
            pos.step += 1
            self._tick(pos)
            stats["stop"] = float(self._budget_spent(pos))
            stats["interrupted"] = float(self.signals.received > 0)
            totals = self.ddp.all_sum(torch.tensor(list(stats.values()), dtype=torch.float64))
            stats = dict(zip(stats, totals.tolist()))
            seconds = sum(u.frames for u in self._utterances(global_batch)) * self.frame_seconds
            speed = seconds / max(time.monotonic() - t0, 1e-9)
            smoothed = stats["loss"] if smoothed is None else 0.9 * smoothed + 0.1 * stats["loss"]
            bar.set_postfix(loss=f"{smoothed:.3f}", audio_s_per_s=f"{speed:.1f}", refresh=False)
            bar.update()
            if writer and pos.step % max(1, self.cfg.log_every) == 0:
                for key in ("loss", "att_loss", "ctc_loss", "align_loss", "grad_norm"):
                    if key in stats:
                        writer.add_scalar(f"train/{key}", stats[key], pos.step)
                writer.add_scalar("train/lr", self.scheduler.get_last_lr()[0], pos.step)
                writer.add_scalar("train/audio_seconds_per_second", speed, pos.step)
            if self.cfg.checkpoint_every and pos.step % self.cfg.checkpoint_every == 0:
                self.save_checkpoint("last.pt", pos)
                self.log(f"checkpoint step={pos.step} epoch={pos.epoch + 1} batch={pos.batch}")
            if stats["interrupted"]:  # on any rank; fit() saves last.pt
                bar.close()
                self.interrupted = True
                return True
            if stats["stop"]:  # fit() validates, then saves last.pt
                bar.close()
                self.log(f"stopping at step {pos.step} (train.max_steps / train.max_minutes)")
                return True
        bar.close()
        return False

    def _utterances(self, global_batch: list[int]) -> list[Utterance]:
        """A batch's utterances (an index past the set is one read through the teacher)."""
        return [utterance_at(self.train_set, i) for i in global_batch]

    def _step(self, global_batch: list[int], batch: Batch | None) -> dict[str, float]:
        """Forward and backward of this rank's share, summed gradients, clip, update."""
        utts = self._utterances(global_batch)
        ctc_tokens = sum(len(u.tokens) for u in utts)
        normalizer = (float(ctc_tokens + len(utts)), float(max(1, ctc_tokens)))
        self.optimizer.zero_grad(set_to_none=False)
        stats = {"loss": 0.0, "att_loss": 0.0}
        if self.model.ctc is not None:
            stats["ctc_loss"] = 0.0
            if self.model.aligns_to_ctc:
                stats["align_loss"] = 0.0
        if batch is not None:
            device = self.ddp.device
            with step_precision(self.cfg.precision, device.type):
                loss, out = self.model.compute_loss(
                    batch.feats.to(device),
                    batch.feat_lens.to(device),
                    batch.targets.to(device),
                    batch.target_lens.to(device),
                    feature_transform=self.augment,
                    label_smoothing=self.cfg.label_smoothing,
                    normalizer=normalizer,
                )
            loss.backward()
            stats = {k: out[k] for k in stats}
        params = [p for p in self.model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:  # a rank without utterances in this batch, or an unused head
                p.grad = torch.zeros_like(p)
        if self.ddp.world > 1:
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        # grad_norm is the same on every rank: divide so that the all-reduced sum equals it.
        stats["grad_norm"] = float(norm) / self.ddp.world
        return stats

    # -- validation and outputs -------------------------------------------------------
    def _close_out(self, pos: Position, writer: SummaryWriter | None) -> None:
        """After the budget's last step: the epoch's own validation when the step ended it,
        else (stopped mid-epoch) one more validation, so the final card has a WER and the
        last weights can become the best ones; nothing when the step is validated already."""
        if pos.order is not None and pos.batch >= len(pos.order):
            self._end_epoch(pos, writer)
        elif not pos.history or pos.history[-1]["step"] != pos.step:
            self._validate_and_keep(pos, writer, "final validation")
            self._tick(pos)
            self.save_checkpoint("last.pt", pos)  # with that validation in its history

    def _end_epoch(self, pos: Position, writer: SummaryWriter | None) -> None:
        self._validate_and_keep(pos, writer, f"epoch {pos.epoch + 1}")
        pos.epoch += 1
        pos.batch = 0
        pos.order = None
        self._tick(pos)
        self.save_checkpoint("last.pt", pos)
        self.ddp.barrier()

    def _validate_and_keep(self, pos: Position, writer: SummaryWriter | None, label: str) -> None:
        """Validate, record the result and, when the WER improved, write best.pt and best_bundle."""
        result: dict[str, float] = {"epoch": pos.epoch + 1, "step": pos.step}
        if self.ddp.main and self.valid_set:
            result.update(self.validate())
            self.log(
                f"{label}: valid loss {result['valid_loss']:.4f}, "
                f"WER {100 * result['valid_wer']:.2f}% ({int(result['valid_decoded'])} utterances)"
            )
            if writer:
                writer.add_scalar("valid/loss", result["valid_loss"], pos.step)
                writer.add_scalar("valid/wer", result["valid_wer"], pos.step)
                writer.flush()
        self.model.train()
        result = self.ddp.broadcast(result)
        pos.history.append(result)
        if "valid_wer" in result and result["valid_wer"] < pos.best_wer:
            pos.best_wer = result["valid_wer"]
            self._tick(pos)
            self.save_checkpoint("best.pt", pos)
            if self.ddp.main:
                self._write_bundle(self.out / "best_bundle", pos)

    def _decoded_ids(self) -> set[str]:
        """The validation utterances whose WER is measured: all, or train.valid_decode_max of
        them spread evenly over the lengths (the first ones of the length-sorted batches
        would be the shortest, and choose the best checkpoint for short utterances alone)."""
        by_length = sorted(self.valid_set, key=lambda u: (u.frames, u.id))
        count = min(self.cfg.valid_decode_max or len(by_length), len(by_length))
        picks = np.linspace(0, len(by_length) - 1, count).round().astype(int)
        return {by_length[i].id for i in picks}

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Validation loss (no noise, no SpecAugment) and greedy hard-monotonic WER."""
        self.model.eval()
        frames = [u.frames for u in self.valid_set]
        loader = DataLoader(
            UtteranceDataset(self.valid_set),
            batch_sampler=make_batches(frames, self.max_frames, 0, 0, shuffle=False),
            collate_fn=collate,
            num_workers=self.cfg.num_workers,
            generator=torch.Generator(),
        )
        loss_sum, tokens = 0.0, 0
        refs, hyps = [], []
        decoded = self._decoded_ids()
        decode_cfg = self.config.decode
        device = self.ddp.device
        # Hard monotonic decoding is the serving path, which runs on the CPU.
        decoder_model = self.model if device.type == "cpu" else copy.deepcopy(self.model).cpu()
        for batch in loader:
            self.model.eval()
            loss, stats = self.model.compute_loss(
                batch.feats.to(device),
                batch.feat_lens.to(device),
                batch.targets.to(device),
                batch.target_lens.to(device),
            )
            loss_sum += float(loss) * stats["tokens"]
            tokens += stats["tokens"]
            take = [i for i, uid in enumerate(batch.ids) if uid in decoded]
            if take:
                rows = torch.tensor(take)
                results = decode_batch(
                    decoder_model, batch.feats[rows], batch.feat_lens[rows], decode_cfg
                )
                for text, segments in zip([batch.texts[i] for i in take], results):
                    ids = [t for seg in segments for t in seg.tokens]
                    refs.append(text.lower())
                    hyps.append(self.tokenizer.decode(ids))
        return {
            "valid_loss": loss_sum / max(1, tokens),
            "valid_wer": wer(refs, hyps).rate,
            "valid_decoded": float(len(refs)),
        }

    def _write_bundle(self, directory: Path, pos: Position) -> None:
        save_bundle(
            directory, self.config, self.model, self.tokenizer_file, self.cmvn, self._card(pos)
        )

    def _card(self, pos: Position) -> str:
        hours = sum(u.frames for u in self.train_set) * self.frame_seconds / 3600
        lines = [
            "# Monotonic-attention LAS model",
            "",
            "Listen-Attend-Spell with a unidirectional encoder and hard monotonic attention "
            "(Raffel et al., 2017), trained with soft monotonic attention.",
            "",
            "## Training",
            "",
            f"- command: `{self.command}`",
            f"- training data: `{self.cfg.train_manifest}` "
            f"({len(self.train_set)} utterances, {hours:.2f} h)",
            f"- validation data: `{self.cfg.valid_manifest or '-'}` ({len(self.valid_set)} utterances)",
            f"- parameters: {self.model.num_parameters() / 1e6:.2f}M; vocabulary "
            f"{self.tokenizer.vocab_size} ({self.config.model.tokenizer.kind})",
            f"- steps: {pos.step}; epochs: {pos.epochs_done:.1f}; training time: "
            f"{pos.seconds / 60:.1f} min; processes: {self.ddp.world}",
            "",
            "## Validation WER (greedy, hard monotonic)",
            "",
            "| epoch | step | valid loss | WER |",
            "|---|---|---|---|",
        ]
        for row in pos.history:
            if "valid_wer" in row:
                lines.append(
                    f"| {int(row['epoch'])} | {int(row['step'])} | {row['valid_loss']:.4f} "
                    f"| {100 * row['valid_wer']:.2f}% |"
                )
        if math.isfinite(pos.best_wer):
            lines += ["", f"Best validation WER: {100 * pos.best_wer:.2f}%"]
        return "\n".join(lines) + "\n"
