"""Training throughput of a config on this machine, in audio-seconds per wall-second.

Runs full training steps (forward, backward, clipping, optimizer) of the model
on a synthetic batch: random features with utterance lengths drawn like a
speech corpus (1.5-8 s) and --tokens-per-second targets (7.7: the synthetic corpus with
the default 256-piece vocabulary); of the bucketed batches over those lengths it takes
the one of median duration, a typical batch. Steps of three variants alternate, so every
median comes from the same machine load: the config as it is, the other precision
(float32 / bfloat16 autocast, train.precision) and the other decoder input (with /
without context feedback, decoder.context_feedback). A profiled step of the config then
splits forward+backward time between the encoder, the attention and the decoder
(backward ops are attributed to the forward op that created them).

  python bench/train.py                         # training/configs/default.yaml
  python bench/train.py --threads 1 --batch-seconds 120
  python bench/train.py --threads 1 --manifest data/synth/train.jsonl   # that corpus's lengths
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.config import Config  # noqa: E402
from asr.frontend import frame_seconds, frontend_dim  # noqa: E402
from asr.model import Seq2Seq  # noqa: E402
from training.dataset import make_batches  # noqa: E402
from training.manifest import read_manifest  # noqa: E402
from training.train import configure_cpu, step_precision  # noqa: E402

GOAL = 60.0
PARTS = ("attention", "encoder", "decoder")  # innermost label wins (attention is inside decoder)


def synthetic_batch(
    config: Config,
    vocab: int,
    seconds: float,
    tokens_per_second: float,
    generator: torch.Generator,
    durations: list[float] | None = None,
) -> tuple[torch.Tensor, ...]:
    """The bucketed batch of median duration (its longest utterance) of make_batches over a
    pool of utterance lengths: ``durations`` (seconds, e.g. a manifest's), or 400 drawn
    uniformly from 1.5-8 s."""
    if durations is None:
        durations = (torch.rand(400, generator=generator) * 6.5 + 1.5).tolist()
    rate = 1 / frame_seconds(config.model)  # the front end's frames per second
    frames = [int(d * rate) for d in durations]
    batch = make_batches(frames, int(seconds * rate), seed=0, epoch=0, shuffle=False)
    batch.sort(key=lambda b: max(frames[i] for i in b))
    chosen = batch[len(batch) // 2]
    lens = torch.tensor([frames[i] for i in chosen])
    feats = torch.randn(
        len(chosen), int(lens.max()), frontend_dim(config.model), generator=generator
    )
    target_lens = (lens.float() / rate * tokens_per_second).long().clamp(min=1)
    targets = torch.randint(3, vocab, (len(chosen), int(target_lens.max())), generator=generator)
    targets[torch.arange(targets.shape[1])[None, :] >= target_lens[:, None]] = 0
    return feats, lens, targets, target_lens


def labelled(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with record_function(label):
            return fn(*args, **kwargs)

    return wrapper


def instrument(model: Seq2Seq) -> None:
    """Wrap the parts in profiler ranges (instance attributes; the classes stay untouched)."""
    attention = model.decoder.attention
    attention.soft_steps = labelled("attention", attention.soft_steps)  # type: ignore[method-assign]
    attention.keys = labelled("attention", attention.keys)  # type: ignore[method-assign]
    model.decoder.teacher_forced = labelled("decoder", model.decoder.teacher_forced)  # type: ignore[method-assign]
    model.encoder.forward = labelled("encoder", model.encoder.forward)  # type: ignore[method-assign]


def shares(step: Callable[[], None]) -> dict[str, float]:
    """Seconds of forward and backward per part for one profiled step."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = prof.events()
    part_of_seq: dict[int, str] = {}
    for event in events:
        if event.sequence_nr < 0 or event.name.startswith("autograd::engine"):
            continue
        parent, part = event.cpu_parent, "other"
        while parent is not None:
            if parent.name in PARTS:
                part = parent.name
                break
            parent = parent.cpu_parent
        part_of_seq.setdefault(event.sequence_nr, part)
    seconds: dict[str, float] = defaultdict(float)
    for event in events:
        duration = (event.time_range.end - event.time_range.start) / 1e6
        if event.name in PARTS:
            seconds[event.name + " fwd"] += duration
        elif (
            event.name.startswith("autograd::engine::evaluate_function")
            and event.cpu_parent is None
        ):
            seconds[part_of_seq.get(event.sequence_nr, "other") + " bwd"] += duration
    # Attention runs inside the decoder range: move its forward time out of the decoder's.
    seconds["decoder fwd"] -= seconds.get("attention fwd", 0.0)
    return dict(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "training/configs/default.yaml")
    parser.add_argument("--batch-seconds", type=float, help="default: train.max_batch_seconds")
    parser.add_argument(
        "--steps", type=int, default=5, help="timed steps per variant (after one warm-up)"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--manifest", type=Path, help="draw utterance lengths from this manifest")
    parser.add_argument(
        "--tokens-per-second", type=float, default=7.7, help="target tokens per audio second"
    )
    args = parser.parse_args()

    configure_cpu(args.threads)
    config = Config.load(args.config)
    vocab = config.model.tokenizer.vocab_size
    seconds = args.batch_seconds or config.train.max_batch_seconds
    feats, lens, targets, target_lens = synthetic_batch(
        config,
        vocab,
        seconds,
        args.tokens_per_second,
        torch.Generator().manual_seed(0),
        [e.duration for e in read_manifest(args.manifest)[0]] if args.manifest else None,
    )
    seconds_per_frame = frame_seconds(config.model)
    audio = float(lens.sum()) * seconds_per_frame

    def training_step(feedback: bool, precision: str) -> tuple[Seq2Seq, Callable[[], None]]:
        """A model of the config (with this decoder input) and one step of it in ``precision``."""
        model_cfg = copy.deepcopy(config.model)
        model_cfg.decoder.context_feedback = feedback
        torch.manual_seed(0)
        model = Seq2Seq(model_cfg, vocab)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step() -> None:
            optimizer.zero_grad()
            with step_precision(precision, "cpu"):
                loss, _ = model.compute_loss(feats, lens, targets, target_lens)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
            optimizer.step()

        return model, step

    precision, feedback = config.train.precision, config.model.decoder.context_feedback
    other_precision = "float32" if precision == "bfloat16" else "bfloat16"
    variants = {
        f"the config ({precision}, context feedback {'on' if feedback else 'off'})": (
            feedback,
            precision,
        ),
        f"{other_precision} instead": (feedback, other_precision),
        f"context feedback {'off' if feedback else 'on'} instead": (not feedback, precision),
    }
    steps = {label: training_step(*variant) for label, variant in variants.items()}
    model, config_step = next(iter(steps.values()))
    print(
        f"config {args.config.name}: {model.num_parameters() / 1e6:.2f}M parameters, "
        f"{args.threads} thread(s), ctc_weight {config.model.ctc_weight}"
    )
    print(
        f"batch: {len(lens)} utterances, {audio:.1f} s audio (padded {feats.shape[0] * feats.shape[1] * seconds_per_frame:.1f} s), "
        f"{int(target_lens.sum())} tokens, longest {feats.shape[1] * seconds_per_frame:.1f} s / {targets.shape[1]} tokens"
    )
    times: dict[str, list[float]] = {label: [] for label in steps}
    for _, step in steps.values():
        step()  # warm-up
    for _ in range(args.steps):
        for label, (_, step) in steps.items():
            started = time.perf_counter()
            step()
            times[label].append(time.perf_counter() - started)
    median = {label: statistics.median(measured) for label, measured in times.items()}
    reference = next(iter(median.values()))
    for label, seconds_per_step in median.items():
        print(
            f"{label:<45}: median step {seconds_per_step:.2f} s of {args.steps} -> "
            f"{audio / seconds_per_step:6.1f} audio-seconds per second (goal {GOAL:.0f}), "
            f"{seconds_per_step / reference:.2f} x the config's step time"
        )

    instrument(model)
    parts = shares(config_step)
    total = sum(parts.values())
    print("time share of one profiled step (forward + backward):")
    for name in ("encoder", "attention", "decoder", "other"):
        fwd, bwd = parts.get(f"{name} fwd", 0.0), parts.get(f"{name} bwd", 0.0)
        print(
            f"  {name:<9} {100 * (fwd + bwd) / total:5.1f}%  (forward {fwd:.2f} s, backward {bwd:.2f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
