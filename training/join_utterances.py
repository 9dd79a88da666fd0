"""Join a manifest's utterances into long clips: one voice reading sentence after sentence.

Synthetic corpora hold a few seconds per utterance, while a microphone stream runs for
tens of seconds without a pause long enough to restart the encoder. A streaming student
distilled on short utterances only never sees its attention cache fill, and its states
drift from the teacher's the further a stream runs (bench/long_stream.py). The clips
written here are the utterances of one voice (a manifest's ``voice`` field, else
``speaker``) in random order, each followed by a short random pause (below the serving
restart pause), until a random length between --min-seconds and --max-seconds is
reached; their text is the sentences' texts joined, so they serve distillation and
training alike. The plan depends on the manifest and every option (--seed, the lengths,
--max-pause, --any-voice), and a clip's id hashes what makes its audio (its parts and the
pause after each), so a rerun with the same options resumes, writing only the clips that are
missing, while one with other options (or a grown corpus) writes its own clips and removes
those of the earlier plan: an existing WAV is only kept for the clip it was written for.

    python -m training.join_utterances --manifest data/live/train.jsonl \\
        --out data/live/train_long.jsonl --min-seconds 12 --max-seconds 28
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
from tqdm import tqdm

from training.dataset import entry_audio
from training.manifest import Entry, read_manifest

SAMPLE_RATE = 16000
MAX_CLIP_SECONDS = 30.0  # Whisper's window: the teacher reads a clip whole


@dataclass(frozen=True)
class Clip:
    """One long clip: its parts in order and the pause after each."""

    voice: str
    parts: tuple[Entry, ...]
    pauses: tuple[float, ...]

    @property
    def id(self) -> str:
        """Names the audio: the parts and their pauses (in samples), so a WAV written under
        other options (another --max-pause, say) is never taken for this clip's."""
        audio = "\n".join(
            f"{e.id} {pause_samples(p)}" for e, p in zip(self.parts, self.pauses, strict=True)
        )
        return f"joined-{len(self.parts)}-{hashlib.sha1(audio.encode()).hexdigest()[:12]}"

    @property
    def duration(self) -> float:
        return sum(e.duration for e in self.parts) + sum(self.pauses)

    @property
    def text(self) -> str:
        return " ".join(e.text for e in self.parts)


def pause_samples(seconds: float) -> int:
    return int(round(seconds * SAMPLE_RATE))


def voice_of(entry: Entry) -> str:
    return str(entry.extra.get("voice", entry.extra.get("speaker", "")))


def plan_clips(
    entries: Sequence[Entry],
    min_seconds: float,
    max_seconds: float,
    max_pause: float,
    seed: int,
    any_voice: bool = False,
) -> list[Clip]:
    """Every entry in exactly one clip (a voice's last clip may be shorter than asked);
    ``any_voice``: voices mixed in a clip (a small split has too few sentences per voice)."""
    if not 0 < min_seconds <= max_seconds <= MAX_CLIP_SECONDS:
        raise ValueError(
            f"need 0 < --min-seconds <= --max-seconds <= {MAX_CLIP_SECONDS:g} (Whisper's window), "
            f"got {min_seconds:g} and {max_seconds:g}"
        )
    if max_pause < 0:
        raise ValueError(f"--max-pause must be >= 0, got {max_pause:g}")
    rng = np.random.default_rng(seed)
    by_voice: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        by_voice["" if any_voice else voice_of(entry)].append(entry)
    clips = []
    for voice in sorted(by_voice):
        group = [by_voice[voice][i] for i in rng.permutation(len(by_voice[voice]))]
        parts: list[Entry] = []
        pauses: list[float] = []
        length, target = 0.0, rng.uniform(min_seconds, max_seconds)
        for entry in group:
            pause = float(rng.uniform(min(0.05, max_pause), max_pause))
            if parts and length + entry.duration + pause > max_seconds:
                clips.append(Clip(voice, tuple(parts), tuple(pauses)))
                parts, pauses, length = [], [], 0.0
                target = rng.uniform(min_seconds, max_seconds)
            if entry.duration + pause > max_seconds:
                continue  # longer alone than any clip may be
            parts.append(entry)
            pauses.append(pause)
            length += entry.duration + pause
            if length >= target:
                clips.append(Clip(voice, tuple(parts), tuple(pauses)))
                parts, pauses, length = [], [], 0.0
                target = rng.uniform(min_seconds, max_seconds)
        if parts:
            clips.append(Clip(voice, tuple(parts), tuple(pauses)))
    return clips


def clip_audio(clip: Clip) -> np.ndarray:
    pieces = []
    for entry, pause in zip(clip.parts, clip.pauses, strict=True):
        pieces.append(entry_audio(entry, SAMPLE_RATE))
        pieces.append(np.zeros(pause_samples(pause), np.float32))
    return np.concatenate(pieces)


def write_clips(clips: Sequence[Clip], manifest: Path) -> None:
    """The clips' wavs in ``wavs/<manifest's stem>/`` beside ``manifest`` (existing ones
    kept, those of no planned clip removed), and ``manifest`` listing them with paths
    relative to its folder, as a corpus's own manifests do (so the two concatenate into
    one manifest)."""
    folder = manifest.parent / "wavs" / manifest.stem
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for clip in tqdm(clips, desc=f"joining into {folder}", unit="clip"):
        path = folder / f"{clip.id}.wav"
        if not path.is_file():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            soundfile.write(tmp, clip_audio(clip), SAMPLE_RATE, subtype="PCM_16", format="WAV")
            os.replace(tmp, path)
        duration = soundfile.info(str(path)).duration
        entry = Entry(clip.id, str(path), clip.text, duration)
        entry.extra.update(voice=clip.voice, parts=[e.id for e in clip.parts])
        rows.append(entry.to_dict(manifest.parent))
    tmp = manifest.with_name(f".{manifest.name}.tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    os.replace(tmp, manifest)
    planned = {f"{clip.id}.wav" for clip in clips}
    for stale in folder.glob("*.wav"):  # clips of an earlier plan (the corpus has grown since)
        if stale.name not in planned:
            stale.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="manifest of the clips to write")
    parser.add_argument("--min-seconds", type=float, default=12.0)
    parser.add_argument("--max-seconds", type=float, default=28.0)
    parser.add_argument(
        "--max-pause", type=float, default=0.45, help="longest pause after a sentence (s)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--any-voice", action="store_true", help="mix voices in a clip (small held-out splits)"
    )
    args = parser.parse_args(argv)
    entries, _ = read_manifest(args.manifest, require_text=False)  # unlabelled audio joins too
    try:
        clips = plan_clips(
            entries, args.min_seconds, args.max_seconds, args.max_pause, args.seed, args.any_voice
        )
    except ValueError as err:
        parser.error(str(err))
    write_clips(clips, args.out)
    hours = sum(c.duration for c in clips) / 3600
    joined = sum(len(c.parts) for c in clips)
    print(f"{args.out}: {len(clips)} clips of {joined} utterances, {hours:.2f} h")
    if joined < len(entries):
        print(f"{len(entries) - joined} utterances longer than --max-seconds left out")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
