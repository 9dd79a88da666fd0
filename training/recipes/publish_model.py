"""Publish a trained run as the bundled model, with every figure of its card measured here.

Two cards, chosen by the run's config. The first generation (fbank front end): evaluates
the run and its softmax baseline on both held-out splits (greedy and with the language
model, through the streaming recognizer, exactly as `asr eval`), copies the run's best
bundle to --out, writes ``metrics.json`` and the model card, and ships a small held-out
sample (FLAC + manifest) under tests/data/heldout for the test that checks the bundled
model. The second generation (model.frontend=whisper, issue #17) adds columns, goals,
benchmarks and step times: training/recipes/whisper_card.py, built on the functions here.
Evaluations are cached in each run directory, so a rerun after an interruption only does
what is missing.

  python -m training.recipes.publish_model --run exp/monotonic --baseline exp/softmax \\
      --data data/synth --out models/first-gen
  python -m training.recipes.publish_model --run exp/live/monotonic --baseline exp/live/softmax \\
      --data data/live --real DIR --steps exp/live/steps.tsv
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
import torch

from asr.bundle import load_model
from asr.config import Config, TrainConfig
from asr.lm import LM_FILE
from training.dataset import entry_audio
from training.evaluate import add_arguments as add_eval_arguments
from training.evaluate import run as run_eval
from training.lm_cli import run as train_lm
from training.manifest import read_manifest
from training.recipes.sources import DEFAULT_TEXT
from training.recipes.synth_corpus import LM_TEXT
from training.train import Position

SPLITS = ("test_seen_voices", "test_unseen_voices")
SPLIT_TITLES = {
    "test_seen_voices": "unseen sentences, seen voices",
    "test_unseen_voices": "unseen voices",
}
REPO = Path(__file__).resolve().parents[2]
DATA_ARG = "data/synth"  # how the card names the corpus directory (the recipe's default)
SAMPLE_DIR = REPO / "tests" / "data" / "heldout"
# Shallow fusion as the card reports it, chosen on the dev split of the synthetic corpus
# (`asr eval --manifest data/synth/dev.jsonl --beam B --lm-weight W`): WER 55.3% greedy,
# 49.4% with beam 4 alone, 45.2 / 44.9 / 46.5 / 48.1% with weights 0.2 / 0.3 / 0.4 / 0.5, and
# 44.2% with beam 8 at 0.3, for twice the search.
LM_BEAM, LM_WEIGHT, LM_ORDER = 4, 0.3, 5


def evaluate_run(
    run: Path,
    data: Path,
    lm_weight: float = 0.0,
    *,
    splits: tuple[str, ...] = SPLITS,
    bundle: Path | None = None,
    tag: str = "",
    search: tuple[str, ...] = (),
    ctc_weight: float = 0.0,
) -> dict[str, dict[str, Any]]:
    """WER/CER of ``bundle`` (default run/best_bundle) on each split, cached in
    run/eval_<tag><split>/summary.json; ``lm_weight`` > 0: with a beam of LM_BEAM and the
    bundle's language model at that weight, cached in run/eval_lm_<tag><split>;
    ``ctc_weight`` > 0: with joint CTC scoring at that weight (eval_ctc<weight>_...);
    ``search``: more `asr eval` options (e.g. --two-pass)."""
    bundle = bundle or run / "best_bundle"
    fused = lm_weight > 0
    inputs = [bundle / "model.safetensors", *([bundle / LM_FILE] if fused else [])]
    trained_on = run_manifests(run, data)[0]
    results = {}
    for split in splits:
        out = run / f"eval_{'lm_' if fused else ''}{ctc_tag(ctc_weight)}{tag}{split}"
        summary = out / "summary.json"
        if not (
            is_fresh(summary, inputs) and "by_train_frequency" in json.loads(summary.read_text())
        ):
            print(f"evaluating {bundle} {' '.join(search)} on {split} -> {out}", flush=True)
            argv = ["--model", str(bundle), "--manifest", str(data / f"{split}.jsonl")]
            argv += ["--out", str(out), "--train-manifest", str(trained_on), *search]
            argv += ["--ctc-weight", str(ctc_weight)]
            if fused:
                argv += ["--beam", str(LM_BEAM), "--lm-weight", str(lm_weight)]
            run_eval(_eval_parser().parse_args(argv))
        results[split] = json.loads(summary.read_text())
    return results


def ctc_tag(ctc_weight: float) -> str:
    """How a cached evaluation's directory names its joint CTC weight (none at 0)."""
    return f"ctc{ctc_weight:g}_" if ctc_weight > 0 else ""


def is_fresh(result: Path, inputs: list[Path]) -> bool:
    """A cached result counts when it exists and is newer than every input it was made from."""
    newest = max(path.stat().st_mtime for path in inputs)
    return result.is_file() and result.stat().st_mtime > newest


def _eval_parser() -> argparse.ArgumentParser:
    """`asr eval`'s own options (with their defaults), so the recipe cannot fall behind them."""
    parser = argparse.ArgumentParser(prog="asr eval")
    add_eval_arguments(parser)
    return parser


def add_lm(bundle: Path, data: Path) -> None:
    """Train the bundle's language model on the corpus's lm_text.txt (unless it is newer)."""
    text = data / LM_TEXT
    if not text.is_file():
        raise FileNotFoundError(f"{text} is missing: rerun training.recipes.synth_corpus")
    lm = bundle / LM_FILE
    if lm.is_file() and lm.stat().st_mtime > text.stat().st_mtime:
        return
    held_out = [data / f"{split}.jsonl" for split in ("dev", *SPLITS, "test_short")]
    held_out = [path for path in held_out if path.is_file()]  # test_short: newer corpora only
    args = argparse.Namespace(
        model=bundle, manifest=[], text=[text], exclude=held_out, order=LM_ORDER, out=None
    )
    train_lm(args)


def training_facts(run: Path) -> dict[str, Any]:
    """Steps, epochs, validation history and training minutes of a run (from its checkpoint)."""
    state = torch.load(run / "last.pt", map_location="cpu", weights_only=False)
    position = Position(**state["position"])
    return {
        "steps": position.step,
        "epochs": round(position.epochs_done, 1),
        "history": position.history,
        "minutes": round(position.seconds / 60, 1),
        "command": _command(run / "best_bundle" / "README.md"),
    }


def _command(card: Path) -> str:
    for line in card.read_text().splitlines():
        if line.startswith("- command: `"):
            return line.removeprefix("- command: `").rstrip("`")
    raise ValueError(f"{card}: no training command line")


def run_manifests(run: Path, data: Path) -> tuple[Path, Path]:
    """The manifests ``run`` trained and validated on (its config's train.train_manifest and
    train.valid_manifest), or the corpus's train and dev splits where the config names none."""
    config = run / "config.json"
    train = Config.load(config).train if config.is_file() else TrainConfig()
    return (
        Path(train.train_manifest or data / "train.jsonl"),
        Path(train.valid_manifest or data / "dev.jsonl"),
    )


def synth_command(plan: dict[str, Any], out: str) -> str:
    """The synth_corpus command that planned a corpus, from its plan.json, writing to ``out``."""
    text = plan.get("text", list(DEFAULT_TEXT))  # corpora planned before --text have the default
    text_arg = "" if tuple(text) == DEFAULT_TEXT else f" --text {' '.join(text)}"
    install = " --install" if plan.get("install") else ""
    exclude = plan.get("exclude") or []
    max_words = f" --max-words {plan['max_words']}" if plan.get("max_words") else ""
    return (
        f"python -m training.recipes.synth_corpus --out {out} --hours {plan['hours']:g} "
        f"--seed {plan['seed']} --jobs {plan['jobs']}{install} --aug-prob {plan['aug_prob']:g}"
        f" \\\n      --test-size {plan['test_size']} --dev-size {plan['dev_size']} "
        f"--engines {' '.join(plan['engines'])}"
        + text_arg
        + max_words
        + (f" \\\n      --exclude {' '.join(exclude)}" if exclude else "")
    )


def corpus_facts(
    data: Path,
    splits: tuple[str, ...] = SPLITS,
    data_arg: str = DATA_ARG,
    manifests: tuple[Path, Path] | None = None,
) -> dict[str, Any]:
    """What the card says about the corpus, read from its manifests and plan.json;
    ``data_arg``: how the corpus command names the corpus directory. ``manifests``: what the
    model trained and validated on (``run_manifests``), when not the corpus's train and dev
    splits: those merged (`asr prepare merge`) with supplements planned in its subdirectories."""
    plan = json.loads((data / "plan.json").read_text())
    train, valid = manifests or (data / "train.jsonl", data / "dev.jsonl")
    rows = [json.loads(line) for line in train.open(encoding="utf-8")]
    commands = [synth_command(plan, data_arg)]
    supplements = {
        d: json.loads((d / "plan.json").read_text())
        for d in sorted(p.parent for p in data.glob("*/plan.json"))
    }
    merges = [
        ("train", train, list(supplements)),
        ("dev", valid, [d for d, p in supplements.items() if p["dev_size"] > 0]),
    ]
    merges = [(split, out, parts) for split, out, parts in merges if out != data / f"{split}.jsonl"]
    if merges:
        commands += [synth_command(p, f"{data_arg}/{d.name}") for d, p in supplements.items()]
    for split, out, parts in merges:
        merged = " ".join(f"{data_arg}/{d.name}/{split}.jsonl" for d in parts)
        commands.append(f"asr prepare merge {data_arg}/{split}.jsonl {merged} --out {out}")
    voices: dict[str, set[str]] = {}
    for row in rows:
        voices.setdefault(row["engine"], set()).add(row["voice"])
    sizes = {
        split: sum(1 for _ in path.open(encoding="utf-8"))
        for split, path in [("dev", valid), *((s, data / f"{s}.jsonl") for s in splits)]
    }
    return {
        "train_utterances": len(rows),
        "train_hours": sum(row["duration"] for row in rows) / 3600,
        "augmented": sum(bool(row["aug"]) for row in rows) / max(len(rows), 1),
        "voices": {engine: len(names) for engine, names in sorted(voices.items())},
        "engines": list(plan["engines"]),
        "text": list(plan.get("text", list(DEFAULT_TEXT))),
        "sizes": sizes,
        "command": "\n    ".join(commands),
    }


def ship_sample(
    data: Path, per_split: int, max_seconds: float, splits: tuple[str, ...] = SPLITS
) -> dict[str, int]:
    """``per_split`` utterances of at most ``max_seconds`` per split, as FLAC: the first in the
    order of their ids' SHA-1, a fixed pseudo-random mix of engines and voices."""
    counts = {}
    for split in splits:
        entries, _ = read_manifest(data / f"{split}.jsonl")
        chosen = [
            e
            for e in sorted(entries, key=lambda e: hashlib.sha1(e.id.encode()).hexdigest())
            if e.duration <= max_seconds
        ]
        chosen = chosen[:per_split]
        target = SAMPLE_DIR / split
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        with open(SAMPLE_DIR / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for i, entry in enumerate(chosen):
                name = f"{split}/{i:02d}.flac"
                samples = entry_audio(entry, 16000)
                soundfile.write(SAMPLE_DIR / name, np.clip(samples, -1, 1), 16000, subtype="PCM_16")
                row = {"id": entry.id, "audio": name, "text": entry.text}
                f.write(json.dumps({**row, "duration": round(len(samples) / 16000, 3)}) + "\n")
        counts[split] = len(chosen)
    return counts


def write_card(out: Path, metrics: dict[str, Any]) -> None:
    mono, soft = metrics["monotonic"], metrics["softmax"]
    rows = []
    for split in SPLITS:
        m, s = mono["eval"][split], soft["eval"][split]
        gap = 100 * (m["wer"]["rate"] - s["wer"]["rate"])
        rows.append(
            f"| {SPLIT_TITLES[split]} | {m['utterances']} | {100 * m['wer']['rate']:.2f}% "
            f"| {100 * m['cer']['rate']:.2f}% | {100 * s['wer']['rate']:.2f}% | {gap:+.2f} |"
        )
    fused_rows = []
    for split in SPLITS:
        g, m, s = (mono["eval"][split], mono["eval_lm"][split], soft["eval_lm"][split])
        gap = 100 * (m["wer"]["rate"] - s["wer"]["rate"])
        fused_rows.append(
            f"| {SPLIT_TITLES[split]} | {100 * g['wer']['rate']:.2f}% | {100 * m['wer']['rate']:.2f}% "
            f"| {100 * m['cer']['rate']:.2f}% | {100 * s['wer']['rate']:.2f}% | {gap:+.2f} |"
        )
    bands = []
    for split in SPLITS:
        m = mono["eval"][split]["by_train_frequency"]
        s = soft["eval"][split]["by_train_frequency"]
        bands += [
            f"| {SPLIT_TITLES[split]} | {b['band']} | {100 * b['share']:.1f}% "
            f"| {100 * b['rate']:.1f}% | {100 * c['rate']:.1f}% |"
            for b, c in zip(m, s, strict=True)
        ]
    history = "\n".join(
        f"| {int(h['epoch'])} | {h['valid_loss']:.3f} | {100 * h['valid_wer']:.2f}% |"
        for h in mono["training"]["history"]
        if "valid_wer" in h
    )
    config = Config.load(out / "config.json")  # defaults fill keys older bundles lack
    model = config.model
    enc, att, dec = model.encoder, model.attention, model.decoder
    state_ms = math.prod(enc.reductions) * model.features.frame_shift_ms
    delay = model.alignment_delay
    corpus = metrics["corpus"]
    voices = ", ".join(f"{engine} ({n})" for engine, n in corpus["voices"].items())
    text = CARD.format(
        enc_layers=enc.layers,
        enc_units=enc.units,
        reduction=math.prod(enc.reductions),
        reductions=", ".join(map(str, enc.reductions)),
        state_ms=state_ms,
        dec_layers=dec.layers,
        dec_units=dec.units,
        feedback="fed its last context" if dec.context_feedback else "fed tokens only",
        kind=att.kind,
        att_dim=att.dim,
        init_r=att.init_r,
        noise=att.noise_std,
        ctc=model.ctc_weight,
        align=model.alignment_weight,
        delay=(
            f"; each boundary is trained {delay} states ({delay * state_ms:g} ms) after its "
            "spike, so a token has heard that much more of its word when it is emitted"
            if delay
            else ""
        ),
        sp_type=model.tokenizer.model_type,
        vocab=model.tokenizer.vocab_size,
        valid_decoded=config.train.valid_decode_max,
        precision=config.train.precision,
        train_utterances=f"{corpus['train_utterances']:,}",
        train_hours=corpus["train_hours"],
        augmented=100 * corpus["augmented"],
        voices=voices,
        dev=corpus["sizes"]["dev"],
        seen=corpus["sizes"]["test_seen_voices"],
        unseen=corpus["sizes"]["test_unseen_voices"],
        corpus_command=corpus["command"],
        status=status(mono["eval"], mono["training"]),
        params=metrics["parameters"] / 1e6,
        megabytes=metrics["megabytes"],
        rows="\n".join(rows),
        fused_rows="\n".join(fused_rows),
        lm_beam=LM_BEAM,
        lm_weight=LM_WEIGHT,
        lm_order=LM_ORDER,
        lm_sentences=f"{metrics['lm_sentences']:,}",
        bands="\n".join(bands),
        history=history,
        publish_command=metrics["publish_command"],
        tokenizer_note=(
            "\n`train.tokenizer=` reuses the sentencepiece model an earlier run trained on the\n"
            "same corpus; sentencepiece training is deterministic, so a run that trains its own\n"
            "(as the recipe does) gets the same pieces.\n"
            if "train.tokenizer=" in mono["training"]["command"] + soft["training"]["command"]
            else ""
        ),
        mono_command=mono["training"]["command"],
        soft_command=soft["training"]["command"],
        mono_minutes=mono["training"]["minutes"],
        soft_minutes=soft["training"]["minutes"],
        mono_steps=mono["training"]["steps"],
        mono_epochs=mono["training"]["epochs"],
        soft_epochs=soft["training"]["epochs"],
    )
    (out / "README.md").write_text(text)


TARGETS = {"test_seen_voices": 0.10, "test_unseen_voices": 0.20}
RISE = 1.02  # a last validation loss this far above the lowest counts as overfitting


def status(evals: dict[str, dict[str, Any]], training: dict[str, Any]) -> str:
    """One sentence: does the model reach the WER targets it is meant to reach, and if not,
    what its validation losses say about why."""
    missed = [s for s in SPLITS if evals[s]["wer"]["rate"] > TARGETS[s]]
    goal = ", ".join(f"{SPLIT_TITLES[s]} <= {100 * TARGETS[s]:.0f}%" for s in SPLITS)
    if not missed:
        return f"It reaches the targets (WER {goal})."
    losses = [h for h in training["history"] if "valid_loss" in h]
    lowest = min(losses, key=lambda h: h["valid_loss"])
    last = losses[-1]
    if lowest is last:
        trend = (
            f"its validation loss was still falling at the last epoch ({losses[-2]['valid_loss']:.3f}"
            f" -> {last['valid_loss']:.3f}), so a longer budget would help"
            if len(losses) > 1
            else "it validated only once"
        )
    elif last["valid_loss"] > RISE * lowest["valid_loss"]:
        trend = (
            f"its validation loss was lowest at epoch {int(lowest['epoch'])} and then rose, "
            "so the corpus limits it as much as the budget"
        )
    else:  # a wobble of the last epochs, not overfitting
        trend = (
            f"its validation loss levelled off as the learning rate decayed (lowest "
            f"{lowest['valid_loss']:.3f} at epoch {int(lowest['epoch'])}, last "
            f"{last['valid_loss']:.3f}), so the budget limits it"
        )
    return (
        f"**It does not yet reach the targets (WER {goal})**: it was trained for "
        f"{training['minutes']} minutes of one CPU core, and {trend}."
    )


CARD = """# default: the bundled monotonic-attention model

Listen-Attend-Spell with a unidirectional encoder and hard monotonic attention
(Raffel et al., 2017), trained for {mono_minutes} minutes on one core of the 2-core
development machine, from synthetic speech only. {params:.2f}M parameters, weights
{megabytes:.1f} MB. `asr transcribe`, `asr serve` and the browser page use it by default.

## Results (greedy, hard monotonic attention, through the streaming recognizer)

{status}

| held-out split | utterances | WER | CER | WER, softmax baseline | monotonic - softmax (points) |
|---|---|---|---|---|---|
{rows}

The softmax baseline has the same architecture with Bahdanau attention over the whole
utterance (offline), trained on the same data with the same budget, side by side on the
same machine. Every figure above is `asr eval` output, gathered by
`python -m training.recipes.publish_model` into `metrics.json`.

With the language model: `lm.npz` is a {lm_order}-gram over the model's tokens, trained on
all {lm_sentences} sentences of the corpus's training split, spoken or not (dev and test
sentences are never among them), and added to the decoder's scores with weight
{lm_weight} in a beam search of {lm_beam} (both chosen on the dev split). The bundle decodes
greedily by default; `asr transcribe`, `asr eval` and `asr serve` take `--beam {lm_beam}
--lm-weight {lm_weight}`. Still streaming: hard monotonic attention, through the same recognizer.

| held-out split | WER, greedy | WER, beam {lm_beam} + LM | CER, beam {lm_beam} + LM | softmax, beam {lm_beam} + LM | monotonic - softmax (points) |
|---|---|---|---|---|---|
{fused_rows}

Where the errors are: the reference words of each split by how often they occur in the
training text, with the share of them that are substituted or deleted (`asr eval
--train-manifest`). Errors on frequent words are acoustic; words seen a few times or
never must be spelt from their sound alone.

| held-out split | times in training text | share of words | word error | softmax baseline |
|---|---|---|---|---|
{bands}

## Model

Unidirectional {enc_layers} x {enc_units} LSTM encoder with a {reduction}x time pyramid
(reductions {reductions}: one state per {state_ms} ms), {dec_layers}-layer {dec_units}-unit LSTM
decoder {feedback}, {kind} attention (dim {att_dim}, r = {init_r}, pre-sigmoid noise {noise}), auxiliary
CTC (weight {ctc}) whose confident Viterbi spikes guide each token's monotonic boundary
during training (CTC-synchronous training, weight {align}{delay}), sentencepiece {sp_type}
vocabulary of {vocab}. Configuration: `config.json` (training/configs/default.yaml).

## Data

The synthetic corpus of `training/recipes/synth_corpus.py`: {train_utterances} training
utterances, {train_hours:.2f} h, read by {voices} voices (espeak-ng counts accent/variant
combinations) from fortune and WordNet sentences; {augmented:.0f}% of them with speed, noise,
reverberation, band-limiting or telephone augmentation. Held out, all clean: {dev} dev
sentences by training voices (validation and the choice of checkpoint), {seen} unseen
sentences by seen voices, {unseen} unseen sentences by unseen voices (whole voices kept
out of training). No test utterance takes part in training or checkpoint choice.

## Training (exact commands; `training/recipes/default_model.sh` runs them all)

    {corpus_command}
    {mono_command}
    {soft_command}
    {publish_command}
{tokenizer_note}
Monotonic: {mono_steps} steps, {mono_epochs} epochs, {mono_minutes} minutes of training;
softmax baseline: {soft_epochs} epochs, {soft_minutes} minutes (both on one thread
each, sharing the machine, with {precision} matrix products: `train.precision`).

## Validation during training ({valid_decoded} utterances of the dev split, each epoch)

| epoch | valid loss | WER |
|---|---|---|
{history}

## Limits

Synthetic voices only: real microphones, accents and spontaneous speech are far from
this data, so expect much higher error rates on real recordings until the model is
trained on real speech with `asr train`.
"""


def build_parser() -> argparse.ArgumentParser:
    """Both generations' options; the run's config chooses the card (model.frontend)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="the monotonic run directory")
    parser.add_argument("--baseline", type=Path, required=True, help="the softmax run directory")
    parser.add_argument("--data", type=Path, required=True, help="corpus with the test manifests")
    parser.add_argument("--out", type=Path, default=REPO / "models" / "default")
    parser.add_argument(
        "--sample",
        type=int,
        default=12,
        help="held-out files per split to ship under tests/data/heldout (0: leave it alone)",
    )
    parser.add_argument("--sample-max-seconds", type=float, default=4.0)
    whisper = parser.add_argument_group("second generation (model.frontend=whisper) only")
    whisper.add_argument(
        "--first-gen",
        type=Path,
        default=REPO / "models" / "first-gen",
        help="the first-generation bundle, a column of the results (left out if absent)",
    )
    whisper.add_argument(
        "--real",
        type=Path,
        help="the directory `python bench/real_speech.py --manifests DIR` wrote (all.jsonl)",
    )
    whisper.add_argument("--steps", type=Path, help="the recipe's steps.tsv (step wall times)")
    whisper.add_argument("--no-rtf", action="store_true", help="skip bench/streaming.py")
    whisper.add_argument("--no-load", action="store_true", help="skip bench/load.py")
    whisper.add_argument(
        "--no-word-latency", action="store_true", help="skip bench/word_latency.py"
    )
    whisper.add_argument("--no-long-stream", action="store_true", help="skip bench/long_stream.py")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = args.run / "best_bundle" / "config.json"
    if not config.is_file():
        parser.error(f"--run {args.run}: no best_bundle/config.json (not a finished training run)")
    if Config.load(config).model.frontend == "whisper":
        # imported here: whisper_card imports this module's shared functions
        from training.recipes.whisper_card import publish

        return publish(parser, args)
    return publish_first_gen(args)


def copy_bundle(bundle: Path, out: Path) -> None:
    """``out`` becomes a copy of ``bundle`` (readable by all), whatever it held before."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(bundle, out)
    for path in out.iterdir():
        path.chmod(0o644)


def shown(path: Path) -> str:
    """A path as a command in the card names it: relative to the repository when inside it."""
    resolved = path.resolve()
    return str(resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else path)


def publish_first_gen(args: argparse.Namespace) -> int:
    """The first-generation (fbank) card: greedy and LM-fused columns, word-frequency bands."""
    metrics: dict[str, Any] = {}
    for name, run in (("monotonic", args.run), ("softmax", args.baseline)):
        add_lm(run / "best_bundle", args.data)
        metrics[name] = {
            "eval": evaluate_run(run, args.data),
            "eval_lm": evaluate_run(run, args.data, LM_WEIGHT),
            "training": training_facts(run),
        }
    bundle = args.run / "best_bundle"
    copy_bundle(bundle, args.out)
    weights = args.out / "model.safetensors"
    metrics["megabytes"] = weights.stat().st_size / 1e6
    metrics["parameters"] = load_model(args.out).model.num_parameters()
    if args.sample:
        metrics["sample"] = ship_sample(args.data, args.sample, args.sample_max_seconds)
    metrics["corpus"] = corpus_facts(args.data)
    metrics["lm_sentences"] = sum(
        1 for line in (args.data / LM_TEXT).open(encoding="utf-8") if line.strip()
    )
    metrics["publish_command"] = (
        f"python -m training.recipes.publish_model --run {args.run} --baseline {args.baseline} \\\n"
        f"      --data {args.data} --out {shown(args.out)}"
    )
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    write_card(args.out, metrics)
    print(f"published {bundle} -> {args.out}")
    for name in ("monotonic", "softmax"):
        for split in SPLITS:
            print(
                f"  {name:<9} {split:<18} WER {100 * metrics[name]['eval'][split]['wer']['rate']:.2f}%"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
