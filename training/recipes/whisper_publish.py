"""Publish a second-generation (Whisper front end) run: measure every figure its card
gives, each with the repository's own tools, and write the bundle, metrics.json and the card.

On every held-out split the corpus has (seen voices, unseen voices, short utterances) and,
with --real, on the real recordings: the first-generation model, the new model streaming,
with two-pass finals, and its softmax baseline (offline), greedy throughout. Then one
stream's real-time factor (bench/streaming.py), 50 clients on a server (bench/load.py),
word latency (bench/word_latency.py), the bundle's size, the recipe's step wall times and
the goals (whisper_goals), each met or not; whisper_card renders the card. Every
measurement is cached in the run directory (evaluations as `asr eval` writes them,
benchmarks as their --json), so a rerun after an interruption only does what is missing.
`python -m training.recipes.publish_model` is the entry point: it picks this publication
when the run's config has model.frontend=whisper.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.util
import json
import math
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from safetensors import safe_open

from asr.bundle import load_model
from asr.config import Config
from asr.frontend import BUNDLE_ENCODER_FILE, BUNDLE_TEACHER_FILE, frame_seconds
from asr.lm import LM_FILE
from asr.scoring import score
from asr.speller import ADAPTER_FILE, POLICY_FILE, bundle_adapter, bundle_policy, student_sha1
from asr.whisper_decoder import DECODER_FILE
from asr.whisper_encoder import weights_file, weights_metadata
from asr.whisper_text import TOKENIZER_FILE
from training.evaluate import evaluate
from training.manifest import read_manifest
from training.recipes import results_table
from training.recipes.gather import (
    LM_BEAM,
    LM_ORDER,
    REAL,
    REPO,
    SYNTHETIC,
    TITLES,
    add_lm,
    copy_bundle,
    corpus_facts,
    ctc_tag,
    evaluate_run,
    is_fresh,
    manifest_mix,
    run_manifests,
    ship_sample,
    shown,
    training_facts,
)
from training.recipes.whisper_card import CTC_WEIGHT, RECIPE, write_card
from training.recipes.whisper_goals import (
    LATENCY_UTTERANCES,
    LOAD_CLIENTS,
    evaluate_goals,
    goal_figures,
)

LONG_STREAM_SENTENCES = 12  # per stream in the card's bench/long_stream.py run
GREEDY = ("--beam", "1", "--lm-weight", "0")
LM_WEIGHTS = (0.2, 0.3, 0.4, 0.5, 0.6)  # shallow-fusion weights tried on the dev split


# -- inputs --------------------------------------------------------------------------------
def discover_splits(data: Path, real: Path | None) -> dict[str, Path]:
    """Each synthetic test split the corpus has, then the real recordings (--real DIR's
    all.jsonl, which must exist); at least one synthetic split is needed."""
    splits = {s: data / f"{s}.jsonl" for s in SYNTHETIC if (data / f"{s}.jsonl").is_file()}
    if not splits:
        raise FileNotFoundError(f"{data}: none of {', '.join(f'{s}.jsonl' for s in SYNTHETIC)}")
    if real is not None:
        manifest = real / "all.jsonl"
        if not manifest.is_file():
            raise FileNotFoundError(
                f"--real {real}: no all.jsonl (`python bench/real_speech.py --manifests {real}` "
                "writes it)"
            )
        splits[REAL] = manifest
    return splits


def read_steps(path: Path) -> list[tuple[str, float]]:
    """Each recipe step's wall seconds in the order the steps first ran, summed over the
    lines of a step (one per run of it: a resumed step has several); a line that is not
    ``name<TAB>seconds`` is an error naming it."""
    totals: dict[str, float] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        name, tab, seconds = line.partition("\t")
        try:
            value = float(seconds) if tab and name.strip() else math.nan
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{path}:{number}: expected 'step<TAB>seconds', got {line!r}")
        totals[name] = totals.get(name, 0.0) + value
    return list(totals.items())


def check_inputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Path]:
    """Everything the slow work needs, checked before it starts (parser errors); the splits."""
    for flag, run in (("--run", args.run), ("--baseline", args.baseline)):
        for name in ("last.pt", "best_bundle/model.safetensors", "best_bundle/README.md"):
            if not (run / name).is_file():
                parser.error(f"{flag} {run}: no {name} (not a finished training run)")
    for name in ("plan.json", "train.jsonl", "dev.jsonl"):
        if not (args.data / name).is_file():
            parser.error(f"--data {args.data}: no {name}")
    baseline = Config.load(args.baseline / "best_bundle" / "config.json").model
    if baseline.frontend != "whisper":
        parser.error(f"--baseline {args.baseline}: not on the Whisper front end like --run")
    if baseline.attention.kind != "softmax":
        parser.error(
            f"--baseline {args.baseline}: {baseline.attention.kind} attention, not softmax"
        )
    if not (args.run / "best_bundle" / BUNDLE_TEACHER_FILE).is_file():
        parser.error(
            f"--run {args.run}: best_bundle has no {BUNDLE_TEACHER_FILE}, which two-pass finals "
            "and word-latency alignments need (train with decode.two_pass=true)"
        )
    if args.speller is not None:
        if args.speller.resolve() == args.out.resolve():
            parser.error(f"--speller {args.speller} is --out: publishing would replace it first")
        try:
            check_speller(args.speller, args.run / "best_bundle")
        except (OSError, ValueError) as err:
            parser.error(f"--speller {args.speller}: {err}")
    if args.first_gen.resolve() == args.out.resolve():
        parser.error(f"--first-gen {args.first_gen} is --out: publishing would replace it")
    if args.steps is not None:
        try:
            read_steps(args.steps)
        except (OSError, ValueError) as err:
            parser.error(f"--steps: {err}")
    try:
        return discover_splits(args.data, args.real)
    except FileNotFoundError as err:
        parser.error(str(err))


def check_speller(speller: Path, bundle: Path) -> None:
    """The speller's files (a learnt policy, adapters if any) fit ``speller``'s student and
    decoder, and that student is ``bundle``'s, byte for byte: a FileNotFoundError or
    ValueError naming what does not."""
    bundle_adapter(speller)
    bundle_policy(speller)
    if student_sha1(speller) != student_sha1(bundle):
        raise ValueError(
            f"its speller was learnt on another streaming student than {bundle}'s "
            f"({BUNDLE_ENCODER_FILE} differs)"
        )


def carry_speller(speller: Path, out: Path) -> None:
    """Copy the speller's adapters (if any) and policy into the published bundle ``out``, with
    the Whisper decoder and tokenizer they were learnt over (which also write two-pass finals)
    and the speller bundle's settings of those finals (decode.two_pass, decode.whisper_finals)
    and of its pass (decode.speller_stall_s), then load them from there, as serving will.
    Files already there byte for byte are left alone. The run's evaluations measured its
    finals without Whisper's decoder (the card's "teacher states, LSTM decoder" column)."""
    for name in (ADAPTER_FILE, POLICY_FILE, DECODER_FILE, TOKENIZER_FILE):
        source, target = speller / name, out / name
        if not source.is_file():
            continue
        if target.is_file() and filecmp.cmp(source, target, shallow=False):
            continue  # the same bytes (perhaps the same file, linked): kept, with their time
        shutil.copyfile(source, target)
        target.chmod(0o644)
    finals = Config.load(speller / "config.json").decode
    serve(
        out,
        two_pass=finals.two_pass,
        whisper_finals=finals.whisper_finals,
        speller_stall_s=finals.speller_stall_s,
    )
    bundle_adapter(out)
    bundle_policy(out)


# -- measurements --------------------------------------------------------------------------
def real_speech() -> ModuleType:
    """bench/real_speech.py as a module (a script, not a package), for its scoring."""
    name = "bench_real_speech"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "bench" / "real_speech.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def evaluate_real(
    bundle: Path,
    manifest: Path,
    cache: Path,
    two_pass: bool | None,
    lm_weight: float = 0.0,
    ctc_weight: float = 0.0,
) -> dict[str, Any]:
    """WER/CER on the real recordings, scored as bench/real_speech.py scores them (its
    score_text on both sides: fillers dropped, spelled letters joined), cached as
    cache/summary.json: the summary only, so no transcript of held-out speech lands here.
    Greedy, or with ``lm_weight`` > 0 the bundle's own search (its beam, greedy partials)
    with its language model at that weight; joint CTC scoring at ``ctc_weight``."""
    summary_file = cache / "summary.json"
    inputs = [bundle / "model.safetensors", manifest, *([bundle / LM_FILE] if lm_weight else [])]
    if is_fresh(summary_file, inputs):
        return json.loads(summary_file.read_text())
    print(
        f"evaluating {bundle} (two-pass {two_pass}, LM {lm_weight:g}, CTC {ctc_weight:g}) on "
        f"{manifest}",
        flush=True,
    )
    recognizer = load_model(bundle)
    recognizer.set_search(None if lm_weight else 1, lm_weight, two_pass, ctc_weight)
    entries, _ = read_manifest(manifest)
    decoded, records = evaluate(recognizer, entries)
    score_text = real_speech().score_text
    ids = [e.id for e in entries]
    refs = [score_text(e.text) for e in entries]
    hyps = [score_text(r["hyp"]) for r in records]
    summary, _ = score(ids, refs, hyps)
    summary["audio_seconds"] = decoded["audio_seconds"]
    summary["by_set"] = {}
    for name in dict.fromkeys(uid.split("/", 1)[0] for uid in ids):
        chosen = [i for i, uid in enumerate(ids) if uid.split("/", 1)[0] == name]
        part, _ = score(
            [ids[i] for i in chosen], [refs[i] for i in chosen], [hyps[i] for i in chosen]
        )
        summary["by_set"][name] = part
    cache.mkdir(parents=True, exist_ok=True)
    summary_file.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def evaluate_columns(
    args: argparse.Namespace, splits: dict[str, Path]
) -> dict[str, dict[str, dict[str, Any]] | None]:
    """Each results column's summaries per split (first_gen None when that bundle is absent);
    every column but the first generation's with joint CTC scoring at CTC_WEIGHT."""
    synthetic = tuple(s for s in splits if s != REAL)
    mono, base = args.run / "best_bundle", args.baseline / "best_bundle"
    columns: dict[str, dict[str, dict[str, Any]] | None] = {
        "streaming": evaluate_run(
            args.run,
            args.data,
            splits=synthetic,
            search=(*GREEDY, "--no-two-pass"),
            ctc_weight=CTC_WEIGHT,
        ),
        "two_pass": evaluate_run(
            args.run,
            args.data,
            splits=synthetic,
            tag="two_pass_",
            search=(*GREEDY, "--two-pass"),
            ctc_weight=CTC_WEIGHT,
        ),
        "softmax": evaluate_run(
            args.baseline,
            args.data,
            splits=synthetic,
            search=(*GREEDY, "--no-two-pass"),
            ctc_weight=CTC_WEIGHT,
        ),
        "first_gen": None,
    }
    bundles = {
        "streaming": (mono, False, CTC_WEIGHT),
        "two_pass": (mono, True, CTC_WEIGHT),
        "softmax": (base, False, CTC_WEIGHT),
    }
    if (args.first_gen / "model.safetensors").is_file():
        columns["first_gen"] = evaluate_run(
            args.run,
            args.data,
            splits=synthetic,
            bundle=args.first_gen,
            tag="first_gen_",
            search=GREEDY,
        )
        bundles["first_gen"] = (args.first_gen, None, 0.0)
    else:
        print(f"no first-generation bundle at {args.first_gen}: its column is left out")
    if REAL in splits:
        for name, (bundle, two_pass, ctc_weight) in bundles.items():
            run = args.baseline if name == "softmax" else args.run
            cache = run / f"eval_{name}_{ctc_tag(ctc_weight)}{REAL}"
            column = columns[name]
            assert column is not None
            column[REAL] = evaluate_real(bundle, splits[REAL], cache, two_pass, 0.0, ctc_weight)
    return columns


def fusion(args: argparse.Namespace, splits: dict[str, Path]) -> dict[str, Any]:
    """Shallow fusion as the published bundle serves it: an n-gram LM over the corpus's text,
    partials from the greedy search and each final from a search with a beam of LM_BEAM and
    the LM over its segment's states, at the weight of LM_WEIGHTS best on the dev split; then its finals (streaming and
    two-pass) on every split. The LM and the chosen search go into the run's best_bundle
    (lm.npz, config.json), which publishing copies."""
    run = args.run
    out = run / "best_bundle"
    add_lm(out, args.data)
    serve(out, beam_size=LM_BEAM, greedy_partials=True, ctc_weight=CTC_WEIGHT)

    def scores(weight: float, splits: tuple[str, ...], two_pass: bool) -> dict[str, Any]:
        tag = f"w{weight:g}_{'two_pass_' if two_pass else ''}"
        search = ("--two-pass" if two_pass else "--no-two-pass",)
        return evaluate_run(
            run,
            args.data,
            weight,
            splits=splits,
            bundle=out,
            tag=tag,
            search=search,
            ctc_weight=CTC_WEIGHT,
        )

    dev = {f"{w:g}": scores(w, ("dev",), False)["dev"]["wer"]["rate"] for w in LM_WEIGHTS}
    weight = float(min(dev, key=lambda w: dev[w]))
    serve(out, lm_weight=weight)
    synthetic = tuple(s for s in splits if s != REAL)
    columns = {
        "eval": scores(weight, synthetic, False),
        "eval_two_pass": scores(weight, synthetic, True),
    }
    if REAL in splits:
        for key, two_pass in (("eval", False), ("eval_two_pass", True)):
            name = f"eval_lm_{ctc_tag(CTC_WEIGHT)}w{weight:g}_{'two_pass_' if two_pass else ''}"
            columns[key][REAL] = evaluate_real(
                out, splits[REAL], run / f"{name}{REAL}", two_pass, weight, CTC_WEIGHT
            )
    return {"beam": LM_BEAM, "order": LM_ORDER, "weight": weight, "dev": dev, **columns}


def serve(bundle: Path, **decode: Any) -> None:
    """Set decode settings in a bundle's config.json (what `asr serve` and every command
    then use by default)."""
    path = bundle / "config.json"
    config = Config.load(path)
    changed = replace(config, decode=replace(config.decode, **decode))
    if changed != config:  # unchanged, it keeps its time: the cached benchmarks stay valid
        changed.save(path)


def bench(name: str, argv: list[str], cache: Path, inputs: list[Path]) -> dict[str, Any]:
    """``python bench/<name>.py ARGV --json CACHE`` unless CACHE is newer than ``inputs``;
    the figures it wrote."""
    if not is_fresh(cache, inputs):
        partial = cache.with_name(cache.name + ".partial")
        command = [sys.executable, str(REPO / "bench" / f"{name}.py"), *argv]
        print(f"running {' '.join(command[1:])}", flush=True)
        done = subprocess.run([*command, "--json", str(partial)], cwd=REPO)
        if done.returncode != 0 or not partial.is_file():
            raise RuntimeError(f"bench/{name}.py failed (exit {done.returncode}): {command}")
        partial.replace(cache)
    return json.loads(cache.read_text())


def run_benchmarks(
    args: argparse.Namespace, splits: dict[str, Path]
) -> dict[str, dict[str, Any] | None]:
    """RTF, load and word latency of the published bundle (None where switched off)."""
    out = shown(args.out)
    bundle = args.run / "best_bundle"
    inputs = [bundle / "model.safetensors", bundle / "config.json"]
    found: dict[str, dict[str, Any] | None] = {
        "rtf": None,
        "load": None,
        "word_latency": None,
        "long_stream": None,
    }
    if not args.no_rtf:
        found["rtf"] = bench("streaming", ["--model", out], args.run / "bench_rtf.json", inputs)
    if not args.no_load:
        argv = ["--model", out, "--no-two-pass", "--clients", str(LOAD_CLIENTS)]
        found["load"] = bench("load", argv, args.run / "bench_load.json", inputs)
    if not args.no_word_latency:
        manifest = splits.get("test_seen_voices", next(iter(splits.values())))
        argv = ["--model", f"{out}:greedy", f"{out}:one-pass", f"{out}:two-pass"]
        argv += ["--manifest", str(manifest)]
        argv += ["--limit", str(LATENCY_UTTERANCES)]
        cache = args.run / "bench_word_latency.json"
        found["word_latency"] = bench("word_latency", argv, cache, [*inputs, manifest])
    if not args.no_long_stream:
        manifests = list(splits.values())
        restart = Config.load(bundle / "config.json").decode.restart_pause_s
        argv = ["--model", out, "--manifest", *map(str, manifests)]
        argv += ["--sentences", str(LONG_STREAM_SENTENCES), "--restart", "0", f"{restart:g}"]
        cache = args.run / "bench_long_stream.json"
        found["long_stream"] = bench("long_stream", argv, cache, [*inputs, *manifests])
    return found


def tensor_elements(path: Path) -> int:
    """Parameters in a safetensors file (shapes only: nothing is loaded)."""
    with safe_open(str(path), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def model_facts(out: Path) -> dict[str, Any]:
    """What the card says about the network, from the published bundle."""
    recognizer = load_model(out)
    config, model = recognizer.config, recognizer.model
    cfg = config.model
    counts = {
        "whisper_encoder": tensor_elements(out / BUNDLE_ENCODER_FILE),
        "las_encoder": sum(p.numel() for p in model.encoder.parameters()),
        "decoder": sum(p.numel() for p in model.decoder.parameters()),
        "ctc": sum(p.numel() for p in model.ctc.parameters()) if model.ctc is not None else 0,
    }
    if (out / BUNDLE_TEACHER_FILE).is_file():
        counts["whisper_teacher"] = tensor_elements(out / BUNDLE_TEACHER_FILE)
    frame_ms = 1000 * frame_seconds(cfg)  # one Whisper encoder state
    return {
        "parameters": counts,
        "chunk_ms": round(cfg.whisper.chunk * frame_ms),
        "left_context_s": cfg.whisper.left_context * frame_ms / 1000,
        "int8": cfg.whisper.int8,
        "quantization": cfg.whisper.quantization,
        "two_pass_default": config.decode.two_pass,
        "encoder": {"layers": cfg.encoder.layers, "units": cfg.encoder.units},
        "reductions": list(cfg.encoder.reductions),
        "state_ms": round(math.prod(cfg.encoder.reductions) * frame_ms),
        "decoder": {"layers": cfg.decoder.layers, "units": cfg.decoder.units},
        "attention": {"kind": cfg.attention.kind, "dim": cfg.attention.dim},
        "ctc_weight": cfg.ctc_weight,
        "alignment_weight": cfg.alignment_weight,
        "alignment_delay": cfg.alignment_delay,
        "tokenizer": f"{cfg.tokenizer.kind} ({model.vocab_size} tokens)",
    }


def distill_command(student: Path, data: str) -> str:
    """The `asr distill` command that made ``student`` (the encoder folder inside a
    distillation's directory): the recipe's, with the manifests, epochs and threads its
    config.json recorded, when they give that config exactly; otherwise the recorded config
    itself; the recipe's command with this corpus when nothing was recorded. A bundle's own
    student (the recipe's INIT) was not distilled in this run: the card says whose it is.
    A blend (`asr blend-students`) is the command that made its tuned student, then the
    blend's; a student distilled from another run's is that run's command, then its own."""
    out = shown(student.parent)
    if student.name == BUNDLE_ENCODER_FILE:
        return f"# no distillation: the student encoder of the bundle {out} (INIT), kept as it was"
    blend = student_blend(student)
    if blend is not None:
        tuned = Path(blend["tuned"]).parent
        return (
            f"{distill_command(tuned, data)}\n    asr blend-students --start {blend['start']} "
            f"--tuned {shown(tuned)} --weight {blend['weight']:g} --out {shown(student)}"
        )
    recorded = student.parent / "config.json"
    recipe = "training/configs/distill.yaml"
    if not recorded.is_file():
        return (
            f"asr distill --config {recipe} --out {out} "
            f'"distill.train_manifests=[{data}/train.jsonl,{data}/train_long.jsonl]" '
            f"distill.valid_manifest={data}/dev_long.jsonl"
            f"  # reconstructed: {shown(recorded)} is missing"
        )
    config = Config.load(recorded)
    d = config.distill
    before = ""
    if d.init and (Path(d.init).parent.parent / "config.json").is_file():
        before = f"{distill_command(Path(d.init).parent, data)}\n    "
    settings = [
        f"distill.train_manifests=[{','.join(d.train_manifests)}]",
        f"distill.valid_manifest={d.valid_manifest}",
        f"distill.epochs={d.epochs}",
        f"distill.threads={d.threads}",
        *([f"distill.init={d.init}"] if d.init else []),
    ]
    if Config.load(REPO / recipe, settings).to_dict() == config.to_dict():
        return (
            f'{before}asr distill --config {recipe} --out {out} "{settings[0]}" '
            f"{' '.join(settings[1:])}"
        )
    return f"{before}asr distill --config {shown(recorded)} --out {out}"


def student_blend(student: Path) -> dict[str, Any] | None:
    """What ``asr blend-students`` recorded in a blended student's weights (its start, tuned
    student and weight), or None for a student that is not a blend."""
    weights = weights_file(student)
    if not weights.is_file():
        return None
    recorded = weights_metadata(weights).get("blend")
    return None if recorded is None else json.loads(recorded)


def distillation_mix(student: Path) -> dict[str, Any] | None:
    """What the student was distilled on (the tuned student's, for a blend), by kind of audio
    (gather.manifest_mix), from its recorded config; None where nothing was recorded (a
    bundle's own student among them: its config.json is the bundle's)."""
    if student.name == BUNDLE_ENCODER_FILE:
        return None
    blend = student_blend(student)
    if blend is not None:
        student = Path(blend["tuned"]).parent
    recorded = student.parent / "config.json"
    if not recorded.is_file():
        return None
    rows = []
    for manifest in Config.load(recorded).distill.train_manifests:
        rows += [json.loads(line) for line in Path(manifest).open(encoding="utf-8")]
    return manifest_mix(rows)


# -- publishing ----------------------------------------------------------------------------
def publish_command(args: argparse.Namespace, first_gen: bool) -> str:
    """The publishing command as the card shows it (--real's directory lies outside the
    repository, so it is named DIR)."""
    command = (
        f"python -m training.recipes.publish_model --run {args.run} --baseline {args.baseline} "
        f"\\\n      --data {args.data} --out {shown(args.out)}"
    )
    if first_gen:
        command += f" --first-gen {shown(args.first_gen)}"
    if args.real is not None:
        command += " --real DIR"
    if args.steps is not None:
        command += f" --steps {shown(args.steps)}"
    if args.speller is not None:
        command += f" --speller {shown(args.speller)}"
    if args.recipe != RECIPE:
        command += f" \\\n      --recipe '{args.recipe}'"
    return command


def step_times(path: Path | None) -> dict[str, Any] | None:
    """The recipe's step wall times (summed over resumes) and their total, for metrics.json."""
    if path is None:
        return None
    rows = [{"step": name, "seconds": seconds} for name, seconds in read_steps(path)]
    return {"rows": rows, "total_seconds": sum(row["seconds"] for row in rows)}


def student_dir(out: Path) -> Path:
    """The student encoder the bundle was trained on (model.whisper.encoder), as a path."""
    encoder = Path(Config.load(out / "config.json").model.whisper.encoder)
    return encoder if encoder.is_absolute() else REPO / encoder


def publish(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Measure everything, copy the bundle to --out, write metrics.json and the card."""
    splits = check_inputs(parser, args)
    columns = evaluate_columns(args, splits)
    fused = fusion(args, splits)
    synthetic = tuple(s for s in splits if s != REAL)
    training = {
        name: training_facts(run)
        for name, run in (("monotonic", args.run), ("softmax", args.baseline))
    }
    copy_bundle(args.run / "best_bundle", args.out)
    if args.speller is not None:
        carry_speller(args.speller, args.out)
    files = {p.name: p.stat().st_size for p in sorted(args.out.iterdir()) if p.is_file()}
    files.pop("README.md", None)  # training's card, replaced below
    first = columns["first_gen"]
    corpus = corpus_facts(
        args.data, synthetic, shown(args.data), run_manifests(args.run, args.data)
    )
    metrics: dict[str, Any] = {
        "generation": 2,
        "out": shown(args.out),
        "splits": {s: TITLES[s] for s in splits},
        "monotonic": {
            "eval": columns["streaming"],
            "eval_two_pass": columns["two_pass"],
            "fusion": fused,
            "ctc_weight": CTC_WEIGHT,
            "training": training["monotonic"],
        },
        "softmax": {"eval": columns["softmax"], "training": training["softmax"]},
        "first_gen": first and {"path": shown(args.first_gen), "eval": first},
        "files": files,
        "megabytes": sum(files.values()) / 1e6,
        "model": model_facts(args.out),
        **run_benchmarks(args, splits),
        "steps": step_times(args.steps),
        "corpus": corpus,
        "distillation": distillation_mix(student_dir(args.out)),
        "commands": {
            "recipe": args.recipe,
            "corpus": corpus["command"],
            "distill": distill_command(student_dir(args.out), shown(args.data)),
            "monotonic": training["monotonic"]["command"],
            "softmax": training["softmax"]["command"],
            "publish": publish_command(args, first is not None),
        },
    }
    metrics["goals"] = evaluate_goals(goal_figures(metrics))
    if args.sample:
        metrics["sample"] = ship_sample(args.data, args.sample, args.sample_max_seconds, synthetic)
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    write_card(args.out, metrics)
    if args.out.resolve() == results_table.METRICS.parent.resolve():
        results_table.main([])  # the README's table comes from the same metrics.json
    print(f"published {args.run / 'best_bundle'} -> {args.out}")
    marks = {True: "met", False: "NOT met", None: "not measured"}
    for goal in metrics["goals"]:
        print(f"  {goal['goal']}: {goal['figure']} ({marks[goal['met']]})")
    return 0
