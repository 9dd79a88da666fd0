"""What every published model card gathers, whatever its generation: `asr eval` runs on the
held-out splits (cached in the run directory, so a rerun does only what is missing), the
run's training facts, the corpus's facts and commands, and the held-out sample shipped for
the bundled model's test. The cards render these; nothing here writes Markdown."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
import torch

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

# the second generation's held-out splits: the corpus's, then the real recordings
SYNTHETIC = ("test_seen_voices", "test_unseen_voices", "test_short")
REAL = "real"
TITLES = {
    **SPLIT_TITLES,
    "test_short": "short utterances (1-3 words, digits, letters)",
    REAL: "real human speech (held out, outside the repository)",
}


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
    mix = manifest_mix(rows)
    synthetic = [row for row in rows if row_kind(row) == "synthetic"]
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
    if mix["real"] or mix["joined"]["utterances"]:
        merges = []  # not the corpus's supplements: the recipe the card names merged them
    if merges:
        commands += [synth_command(p, f"{data_arg}/{d.name}") for d, p in supplements.items()]
    for split, out, parts in merges:
        merged = " ".join(f"{data_arg}/{d.name}/{split}.jsonl" for d in parts)
        commands.append(f"asr prepare merge {data_arg}/{split}.jsonl {merged} --out {out}")
    voices: dict[str, set[str]] = {}
    for row in synthetic:
        voices.setdefault(row["engine"], set()).add(row["voice"])
    sizes = {
        split: sum(1 for _ in path.open(encoding="utf-8"))
        for split, path in [("dev", valid), *((s, data / f"{s}.jsonl") for s in splits)]
    }
    return {
        "train_utterances": len(rows),
        "train_hours": sum(row["duration"] for row in rows) / 3600,
        "augmented": sum(bool(row["aug"]) for row in synthetic) / max(len(synthetic), 1),
        "mix": mix,
        "voices": {engine: len(names) for engine, names in sorted(voices.items())},
        "engines": list(plan["engines"]),
        "text": list(plan.get("text", list(DEFAULT_TEXT))),
        "sizes": sizes,
        "command": "\n    ".join(commands),
    }


def row_kind(row: dict[str, Any]) -> str:
    """A training manifest row's kind of audio: "synthetic" (a text-to-speech engine's voice),
    "real" (a package's recording, ``source``) or "joined" (clips of several utterances)."""
    if "engine" in row:
        return "synthetic"
    return "real" if "source" in row else "joined"


def manifest_mix(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a training manifest holds, by :func:`row_kind` (a card says each): synthetic
    speech, real recordings per package (pseudo-labelled or with the package's own text) and
    joined clips."""

    def amount(part: list[dict[str, Any]]) -> dict[str, Any]:
        return {"utterances": len(part), "hours": sum(row["duration"] for row in part) / 3600}

    kinds: dict[str, list[dict[str, Any]]] = {"synthetic": [], "real": [], "joined": []}
    for row in rows:
        kinds[row_kind(row)].append(row)
    real: dict[str, list[dict[str, Any]]] = {}
    for row in kinds["real"]:
        real.setdefault(row["source"], []).append(row)
    return {
        "synthetic": amount(kinds["synthetic"]),
        "real": {source: amount(part) for source, part in sorted(real.items())},
        "joined": amount(kinds["joined"]),
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
