"""Write manifests from a folder of audio, a Kaldi data directory, TIMIT or WSJ.

Sources:
  folder DIR --out M.jsonl      audio (.wav .flac .sph) with a transcript beside each file
                                (same stem, .txt or .lab), searched recursively
  kaldi DATADIR --out M.jsonl   wav.scp, text, optional segments and utt2spk; wav.scp lines
                                that are shell pipes ("cmd ... |") run only with
                                --allow-pipes, their output saved as WAV under --audio-dir
  timit ROOT --out DIR          the original TRAIN/TEST layout (any case); writes train.jsonl,
                                dev.jsonl (50 speakers), test.jsonl (24-speaker core set) and
                                phones.txt; targets are 48 folded phones, SA sentences left out
  wsj ROOT --out DIR            original WSJ0/WSJ1 folders (.wv1 + .dot); writes
                                train_si284.jsonl, test_dev93.jsonl, test_eval92.jsonl
  merge M.jsonl... --out M.jsonl  several manifests as one, to train on corpora together;
                                audio paths rewritten for the output's folder, ids unique

WSJ splits follow the standard index files (tr_s_wv1.ndx + si_tr_s.ndx, h1_p0.ndx,
nvp/si_et_20.ndx) when they are under ROOT; otherwise the folder names decide:
train_si284 = every si_tr_s/<speaker>/ (WSJ0 si84 and WSJ1 si200) except WSJ0 speaker 401,
test_dev93 = si_dt_20, test_eval92 = si_et_20 (the 333-utterance 20k Nov'92 set).

Examples:
  asr prepare folder corpus/ --out data/corpus.jsonl
  asr prepare kaldi data/train --out data/train.jsonl --allow-pipes --audio-dir data/wav
  asr prepare timit /corpora/TIMIT --out data/timit
  asr prepare wsj /corpora/wsj --out data/wsj
  asr prepare merge data/wsj/train_si284.jsonl data/corpus.jsonl --out data/train.jsonl
"""

from __future__ import annotations

import argparse
import importlib.resources
import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import soundfile

from asr.scoring import timit_folding
from asr.tokenizer import SymbolTokenizer
from training.manifest import AudioInfo, Entry, audio_info, read_manifest, write_manifest

AUDIO_SUFFIXES = (".wav", ".flac", ".sph")
TRANSCRIPT_SUFFIXES = (".txt", ".lab")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="source", required=True, metavar="SOURCE")
    p = sub.add_parser("folder", help="audio files with transcripts beside them")
    p.add_argument("dir", type=Path)
    p.add_argument("--out", type=Path, required=True, help="manifest to write")
    p = sub.add_parser("kaldi", help="a Kaldi data directory")
    p.add_argument("dir", type=Path)
    p.add_argument("--out", type=Path, required=True, help="manifest to write")
    p.add_argument(
        "--allow-pipes", action="store_true", help="run wav.scp entries that are shell pipes"
    )
    p.add_argument(
        "--audio-dir",
        type=Path,
        help="where piped audio is saved as WAV (default: <out without .jsonl>_audio)",
    )
    for name, what in (("timit", "TIMIT (original layout)"), ("wsj", "WSJ0/WSJ1 (original)")):
        p = sub.add_parser(name, help=what)
        p.add_argument("dir", type=Path)
        p.add_argument("--out", type=Path, required=True, help="output directory")
    p = sub.add_parser("merge", help="several manifests as one")
    p.add_argument("manifests", type=Path, nargs="+")
    p.add_argument("--out", type=Path, required=True, help="manifest to write")


def run(args: argparse.Namespace) -> int:
    if args.source in ("folder", "kaldi", "merge"):
        if args.source == "folder":
            entries = prepare_folder(args.dir)
        elif args.source == "kaldi":
            audio_dir = args.audio_dir or args.out.with_name(args.out.stem + "_audio")
            entries = prepare_kaldi(args.dir, allow_pipes=args.allow_pipes, audio_dir=audio_dir)
        else:
            entries = merge_manifests(args.manifests)
        if not entries:  # an empty manifest would only fail later, far from the cause
            raise ValueError(
                f"no usable utterances (the reasons are above); {args.out} was not written"
            )
        _report(args.out, write_manifest(args.out, entries))
    else:
        prepare = prepare_timit if args.source == "timit" else prepare_wsj
        for split, count in prepare(args.dir, args.out).items():
            _report(args.out / f"{split}.jsonl", count)
    return 0


def _report(path: Path, count: int) -> None:
    print(f"{path}: {count} utterances")


def _warn(message: str) -> None:
    print(f"asr prepare: {message}", file=sys.stderr)


def _listing(directory: Path) -> dict[str, Path]:
    """Files of a directory by lower-cased name: corpora come in upper or lower case."""
    return {p.name.lower(): p for p in directory.iterdir() if p.is_file()}


def _subdirs(directory: Path, keep: Callable[[str], bool] = lambda name: True) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_dir() and keep(p.name.lower()))


def _info(path: Path) -> AudioInfo | None:
    """Header info, or None after reporting why the file cannot be used."""
    try:
        info = audio_info(path)
    except (ValueError, OSError) as err:
        _warn(f"skipping {path}: {err}")
        return None
    if info.frames <= 0:
        _warn(f"skipping {path}: no samples")
        return None
    return info


# --- folder ----------------------------------------------------------------------------


def prepare_folder(root: Path) -> list[Entry]:
    """Every audio file under ``root`` that has a non-empty transcript beside it."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such directory")
    entries = []
    listings: dict[Path, dict[str, Path]] = {}
    taken: dict[str, Path] = {}  # id -> the file that has it
    for audio in sorted(root.rglob("*")):
        if audio.suffix.lower() not in AUDIO_SUFFIXES or not audio.is_file():
            continue
        files = listings.setdefault(audio.parent, _listing(audio.parent))
        found = [files.get(audio.stem.lower() + s) for s in TRANSCRIPT_SUFFIXES]
        transcript = next((p for p in found if p), None)
        if transcript is None:
            _warn(f"skipping {audio}: no {audio.stem}.txt or .lab beside it")
            continue
        try:  # utf-8-sig: a byte-order mark is not part of the first word
            text = " ".join(transcript.read_text(encoding="utf-8-sig").split())
        except UnicodeDecodeError as err:
            _warn(f"skipping {audio}: {transcript.name} is not UTF-8 text ({err.reason})")
            continue
        if not text:
            _warn(f"skipping {audio}: empty transcript {transcript.name}")
            continue
        uid = "-".join(audio.relative_to(root).with_suffix("").parts)
        if uid in taken:  # x.wav beside x.flac, or a-b/c.wav beside a/b-c.wav
            _warn(f"skipping {audio}: its id {uid!r} is already {taken[uid]}'s")
            continue
        info = _info(audio)
        if info is not None:
            taken[uid] = audio
            entries.append(Entry(uid, str(audio.resolve()), text, info.duration))
    return entries


# --- merge -----------------------------------------------------------------------------


def merge_manifests(paths: list[Path]) -> list[Entry]:
    """The entries of every manifest in order, lines that training would skip reported and
    left out. An id found twice is an error naming both manifests: training finds each
    utterance's cached features by id, so a silent duplicate would pair text with wrong audio."""
    entries: list[Entry] = []
    source: dict[str, Path] = {}
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such manifest")
        found, _ = read_manifest(path)
        for entry in found:
            if entry.id in source:
                raise ValueError(f"id {entry.id!r} is in both {source[entry.id]} and {path}")
            source[entry.id] = path
        entries += found
    return entries


# --- Kaldi -----------------------------------------------------------------------------


def _read_table(path: Path) -> dict[str, tuple[int, str]]:
    """Kaldi ``key rest-of-line`` table: key -> (line number, rest)."""
    table = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        parts = line.strip().split(None, 1)
        if parts:
            table[parts[0]] = (number, parts[1] if len(parts) > 1 else "")
    return table


def prepare_kaldi(
    datadir: Path, allow_pipes: bool = False, audio_dir: Path | None = None
) -> list[Entry]:
    """Entries for the utterances in ``text``; relative wav.scp paths are taken from the cwd.

    A pipe without ``allow_pipes`` is an error naming its wav.scp line, so no command
    from a data directory ever runs unasked.
    """
    datadir = Path(datadir)
    for name in ("wav.scp", "text"):
        if not (datadir / name).is_file():
            raise FileNotFoundError(f"{datadir}: no {name} (not a Kaldi data directory?)")
    wav_scp = _read_table(datadir / "wav.scp")
    texts = _read_table(datadir / "text")
    has_segments = (datadir / "segments").is_file()
    segments = _read_table(datadir / "segments") if has_segments else {}
    speakers = _read_table(datadir / "utt2spk") if (datadir / "utt2spk").is_file() else {}
    recordings: dict[str, tuple[Path, AudioInfo] | None] = {}
    entries = []
    for utt, (_, raw_text) in texts.items():
        text = " ".join(raw_text.split())
        if not text:
            _warn(f"skipping {utt}: empty text")
            continue
        rec, offset, end = utt, None, None
        if has_segments:
            if utt not in segments:
                _warn(f"skipping {utt}: not in segments")
                continue
            number, rest = segments[utt]
            try:
                rec, start, stop = rest.split()
                offset, end = float(start), float(stop)
            except ValueError:
                raise ValueError(
                    f"{datadir / 'segments'}:{number}: expected 'utt rec start end'"
                ) from None
        if rec not in wav_scp:
            _warn(f"skipping {utt}: recording {rec} not in wav.scp")
            continue
        if rec not in recordings:
            recordings[rec] = _kaldi_recording(
                datadir / "wav.scp", rec, *wav_scp[rec], allow_pipes, audio_dir
            )
        if recordings[rec] is None:
            continue
        audio, info = recordings[rec]
        duration = info.duration
        if offset is not None:
            end = info.duration if end <= 0 else min(end, info.duration)  # Kaldi -1: to the end
            duration = end - offset
            if duration <= 0:
                _warn(f"skipping {utt}: segment {offset}-{end} s is empty or past the audio")
                continue
        extra = {"speaker": speakers[utt][1]} if utt in speakers else {}
        entries.append(Entry(utt, str(audio), text, duration, offset, end, extra))
    return entries


def _kaldi_recording(
    scp: Path, rec: str, number: int, spec: str, allow_pipes: bool, audio_dir: Path | None
) -> tuple[Path, AudioInfo] | None:
    """A wav.scp entry as an audio file; pipes are run and their output saved as WAV."""
    if not spec.endswith("|"):
        path = Path(spec).resolve()
        info = _info(path)
        return None if info is None else (path, info)
    command = spec[:-1].strip()
    if not allow_pipes:
        raise ValueError(
            f"{scp}:{number}: recording {rec!r} is a shell pipe ({command!r}); "
            "rerun with --allow-pipes to run it (only for data directories you trust)"
        )
    if audio_dir is None:
        raise ValueError(f"{scp}:{number}: a piped recording needs an audio directory")
    result = subprocess.run(command, shell=True, capture_output=True, check=False)
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip()[-500:]
        raise ValueError(
            f"{scp}:{number}: pipe for {rec!r} failed ({result.returncode}): {message}"
        )
    try:
        samples, rate = soundfile.read(io.BytesIO(result.stdout), dtype="float32")
    except (RuntimeError, soundfile.LibsndfileError) as err:
        raise ValueError(
            f"{scp}:{number}: pipe for {rec!r} did not produce audio ({err})"
        ) from None
    # Re-written rather than copied: a streamed WAV header often has no valid length.
    audio_dir.mkdir(parents=True, exist_ok=True)
    path = (audio_dir / f"{rec}.wav").resolve()
    soundfile.write(path, samples, rate, subtype="PCM_16")
    info = _info(path)
    return None if info is None else (path, info)


# --- TIMIT -----------------------------------------------------------------------------


def _speaker_list(name: str) -> set[str]:
    text = importlib.resources.files("training.data").joinpath(name).read_text()
    return {
        line.strip().upper()
        for line in text.splitlines()
        if line.strip() and not line.startswith("#")
    }


def timit_phones(phn: Path) -> str:
    """A .PHN file (``start end phone`` lines) as a 48-phone string (q and h# removed)."""
    to48 = timit_folding().to48
    phones = []
    for line in phn.read_text().splitlines():
        parts = line.split()
        if not parts:
            continue
        symbol = parts[-1].lower()
        if symbol not in to48:
            raise ValueError(f"{phn}: unknown TIMIT phone {parts[-1]!r}")
        if to48[symbol]:
            phones.append(to48[symbol])
    return " ".join(phones)


def prepare_timit(root: Path, out_dir: Path) -> dict[str, int]:
    """train (all TRAIN speakers), dev and test (core) manifests plus phones.txt; SA excluded."""
    root, out_dir = Path(root), Path(out_dir)
    parts = {p.name.lower(): p for p in _subdirs(root, lambda n: n in ("train", "test"))}
    if len(parts) != 2:
        raise FileNotFoundError(f"{root}: expected TRAIN and TEST folders (TIMIT original layout)")
    core, dev = _speaker_list("timit_core_test.txt"), _speaker_list("timit_dev.txt")
    splits: dict[str, list[Entry]] = {"train": [], "dev": [], "test": []}
    found: dict[str, set[str]] = {"dev": set(), "test": set()}
    for part in ("train", "test"):
        for region in _subdirs(parts[part], lambda n: re.fullmatch(r"dr[1-8]", n) is not None):
            for speaker_dir in _subdirs(region):
                speaker = speaker_dir.name.upper()
                split = (
                    "train"
                    if part == "train"
                    else "test"
                    if speaker in core
                    else "dev"
                    if speaker in dev
                    else None
                )
                if split is None:
                    continue  # the remaining TEST speakers belong to neither standard set
                entries = _timit_speaker(speaker_dir, speaker.lower())
                if entries and split in found:  # a speaker counts once it has utterances
                    found[split].add(speaker)
                splits[split].extend(entries)
    for split, expected in (("dev", dev), ("test", core)):
        if found[split] != expected:
            _warn(
                f"TIMIT {split}: found {len(found[split])} of the {len(expected)} standard speakers"
            )
    empty = [split for split, entries in splits.items() if not entries]
    if empty:  # an empty manifest would only fail later, in training or evaluation
        raise FileNotFoundError(
            f"{root}: no TIMIT utterances for {', '.join(empty)} (looked for <UTT>.WAV or "
            "<UTT>.WAV.wav with <UTT>.PHN beside it in TRAIN|TEST/DR1-8/<SPEAKER>/)"
        )
    counts = {
        split: write_manifest(out_dir / f"{split}.jsonl", entries)
        for split, entries in splits.items()
    }
    SymbolTokenizer(timit_folding().phones48).save(out_dir / "phones.txt")
    return counts


def _timit_speaker(speaker_dir: Path, speaker: str) -> list[Entry]:
    """A speaker's SI/SX utterances; the audio is X.WAV (original SPHERE) or, in the common
    converted copies, X.WAV.wav (RIFF), the original taken when both are there."""
    files = _listing(speaker_dir)
    entries = []
    for utt in sorted({name.split(".")[0] for name in files if name.endswith(".wav")}):
        wav = files.get(utt + ".wav") or files.get(utt + ".wav.wav")
        if wav is None or utt.startswith("sa"):
            continue
        phn = files.get(utt + ".phn")
        if phn is None:
            _warn(f"skipping {wav}: no .PHN transcription beside it")
            continue
        try:
            text = timit_phones(phn)
        except ValueError as err:
            _warn(f"skipping {wav}: {err}")
            continue
        info = _info(wav)
        if info is not None and text:
            entries.append(
                Entry(
                    f"{speaker}_{utt}",
                    str(wav.resolve()),
                    text,
                    info.duration,
                    extra={"speaker": speaker},
                )
            )
    return entries


# --- WSJ -------------------------------------------------------------------------------

# split -> (index files that define it, folder names used when those are absent)
WSJ_SPLITS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "train_si284": (("tr_s_wv1.ndx", "si_tr_s.ndx"), ("si_tr_s",)),
    "test_dev93": (("h1_p0.ndx",), ("si_dt_20",)),
    "test_eval92": (("nvp/si_et_20.ndx",), ("si_et_20",)),
}
WSJ_EXCLUDED_SPEAKERS = {("si_tr_s", "401")}  # left out of the standard si84 list

_DOT_LINE = re.compile(r"^(.*)\((\w+)\)\s*$")
# Verbal punctuation: the reader said the word (",COMMA", ".POINT", "%PERCENT", "--DASH",
# "(LEFT-PAREN", '"DOUBLE-QUOTE'): unescaped symbols, then the word that was spoken.
_VERBAL_PUNCTUATION = re.compile(r"^[^\w\s\\\[\]<>*~]+([a-z][a-z-]*)$", re.I)
# REVO(LUTIONARY)-: the unspoken part of a cut-off word, and the hyphen that marks the cut
_PARTIAL = re.compile(r"(?<!\0)\([^()]*(?<!\0)\)|^-+|(?<!\0)-+$")


def clean_wsj_transcript(text: str) -> str:
    """The words the reader said, lower case, from a WSJ .dot transcript (LDC dot spec).

    Escaped characters ("isn\\'t", "I\\.") are part of the word; unescaped ones are
    markup: [noise] events are dropped, verbal punctuation is its spoken word,
    a cut-off word keeps its spoken part, *mispronounced* and <verbally deleted>
    words were said and are kept, "~" (truncation) and a lone "." (pause) are dropped.
    Abbreviation periods are not spoken: "U.S." -> "us", "I\\. B\\. M\\." -> "i b m".
    """
    return " ".join(word for word in map(_wsj_word, text.split()) if word)


def _wsj_word(token: str) -> str:
    """One .dot token as the spoken word, or "" for markup that is not speech."""
    if token.startswith("[") or token.endswith("]"):  # [noise], [<noise], [noise>], [/noise]
        return ""
    # "\\x" -> a NUL-marked literal: markup rules below skip escaped characters
    marked = re.sub(r"\\(.)", lambda m: "\0" + m.group(1), token)
    plain = marked.replace("\0", "")
    verbal = _VERBAL_PUNCTUATION.match(plain) if "\0" not in marked else None
    if verbal and not (plain.startswith("'") and not plain.lower().endswith("quote")):
        return verbal.group(1).lower()  # 'EM is a word, 'SINGLE-QUOTE is punctuation
    word = re.sub(r"(?<!\0)[*<>~]", "", marked)  # *mispronounced*, <deleted>, ~truncated
    word = _PARTIAL.sub("", word)
    word = word.replace("\0", "").replace(".", "").lower()
    return word if any(c.isalnum() for c in word) else ""


def prepare_wsj(root: Path, out_dir: Path) -> dict[str, int]:
    """The three standard splits from the original discs; transcripts from the .dot files."""
    root, out_dir = Path(root), Path(out_dir)
    audio: dict[str, Path] = {}
    dots: list[Path] = []
    indices: dict[str, list[Path]] = {}
    for directory, _, names in os.walk(root, followlinks=True):
        for name in names:
            lower, path = name.lower(), Path(directory) / name
            if lower.endswith(".wv1"):
                audio[lower[:-4]] = path
            elif lower.endswith(".dot"):
                dots.append(path)
            elif lower.endswith(".ndx"):
                indices.setdefault(lower, []).append(path)
    if not audio:
        raise FileNotFoundError(f"{root}: no .wv1 files (WSJ original layout)")
    transcripts = {}
    for dot in dots:
        for line in dot.read_text(encoding="latin-1").splitlines():
            match = _DOT_LINE.match(line)
            if match:
                transcripts[match.group(2).lower()] = match.group(1)
    counts = {}
    compressed = 0
    for split, (index_names, folders) in WSJ_SPLITS.items():
        members = _wsj_index_members(indices, index_names)
        entries = []
        for utt, path in sorted(audio.items()):
            speaker, folder = path.parent.name.lower(), path.parent.parent.name.lower()
            if (folder, speaker) in WSJ_EXCLUDED_SPEAKERS:
                continue
            if (utt not in members) if members is not None else (folder not in folders):
                continue
            if utt not in transcripts:
                _warn(f"skipping {path}: no transcript in any .dot file")
                continue
            text = clean_wsj_transcript(transcripts[utt])
            info = _info(path)
            if info is None or not text:
                continue
            compressed += info.shorten
            entries.append(
                Entry(utt, str(path.resolve()), text, info.duration, extra={"speaker": speaker})
            )
        rule = "index files" if members is not None else f"folders {', '.join(folders)}"
        print(f"{split}: {len(entries)} utterances selected by {rule}", file=sys.stderr)
        counts[split] = write_manifest(out_dir / f"{split}.jsonl", entries)
    if compressed and shutil.which("sph2pipe") is None:
        _warn(
            f"{compressed} utterances are shorten-compressed SPHERE: reading them needs "
            "sph2pipe on PATH (build it from the LDC sph2pipe source), or convert them to WAV/FLAC"
        )
    return counts


def _wsj_index_members(indices: dict[str, list[Path]], names: tuple[str, ...]) -> set[str] | None:
    """Utterance ids listed by the split's index files, or None unless all of them exist."""
    members: set[str] = set()
    for name in names:
        folder, _, base = name.rpartition("/")
        paths = [p for p in indices.get(base, []) if not folder or p.parent.name.lower() == folder]
        if not paths:
            return None
        for line in paths[0].read_text(encoding="latin-1").splitlines():
            line = line.strip()
            if line and not line.startswith(";"):
                members.add(Path(line.split(":")[-1].strip()).name.split(".")[0].lower())
    return members
