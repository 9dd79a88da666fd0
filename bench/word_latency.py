"""Word latency: from a word's end in the audio to the streaming emission of its last token.

For each --model (a bundle, optionally with a ``:two-pass`` or ``:one-pass`` suffix that
sets its finals, or ``:greedy``: the streaming pass alone, one-pass finals from a greedy
search without the language model, which is the search a bundle with
decode.greedy_partials shows its partials from), every held-out utterance is fed to a real streaming session in --chunk-ms
pieces. A word counts as shown at the amount of audio fed when it reached its final place
in the transcript (finals so far plus the current partial) and stayed there to the end.
The final transcript is matched word by word to the reference (difflib); for each word
right, latency = shown time - the word's end in the audio. Printed per model: median, p90,
p95 and the share of words over 400 ms (the goal: p95 at most 400 ms for the streaming
pass), with words right against reference words so that a reader sees the coverage; and
the median and p95 of number words ("seventy", "thousand") and of the others apart, as a
number's words may wait for the number's end; and the share of right words shown only
after the next word had ended too (of all, and of those over 400 ms), as a policy that
holds a short word for the sound after it does.

All times are audio time (seconds of audio fed), as if the model kept up with real time:
processing time is excluded and measured elsewhere (bench/load.py, bench/streaming.py).

Word ends come from a CTC forced alignment made by the --aligner bundle (default: the
first --model), which needs the Whisper front end, its full-attention teacher (a bundle
saved with two-pass finals carries it) and a CTC head: the teacher's states over the
whole utterance (no streaming look-ahead delay in them) run through the bundle's LAS
encoder, its CTC head gives log-probs per state, and the Viterbi path of the reference
tokens gives each token's last state. A word ends where the last state of its last token
ends, capped at the audio's length. Utterances that cannot be aligned are counted and
skipped. A CTC spike sits inside its token, not at its end, so a word end read from it
could be early and a latency overstated; measured against the word ends Kokoro's own
durations give (bench/experiments/tts_word_ends.py), the ends are 2 ms early at the
median (10 ms on average), and a clip's last word ends within 10 ms of its audible end.

    python bench/word_latency.py --model models/default models/default:two-pass \\
        --manifest data/live/test_seen_voices.jsonl --limit 200
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.bundle import load_model  # noqa: E402
from asr.config import SessionOptions  # noqa: E402
from asr.ctc_alignment import ctc_token_spans  # noqa: E402
from asr.events import Event  # noqa: E402
from asr.formats import word_times  # noqa: E402
from asr.frontend import BUNDLE_TEACHER_FILE  # noqa: E402
from asr.recognizer import Recognizer  # noqa: E402
from asr.tokenizer import SentencePieceTokenizer  # noqa: E402
from asr.whisper_encoder import WhisperEncoder  # noqa: E402
from asr.whisper_features import SAMPLE_RATE, log_mel  # noqa: E402
from training.dataset import entry_audio  # noqa: E402
from training.manifest import Entry, read_manifest  # noqa: E402
from training.recipes.textnorm import NUMBER_WORDS, normalize  # noqa: E402

GOAL_MS = 400.0  # issue #17: p95 at most this for the streaming pass
# --model PATH:SUFFIX -> (two-pass finals, greedy search without the LM, streaming decoder)
SUFFIXES = {
    "two-pass": (True, False, None),
    "one-pass": (False, False, None),
    "greedy": (False, True, None),
    "whisper": (False, True, "whisper"),  # the streaming pass spelled by Whisper's decoder
}
WORD_START = "\u2581"  # sentencepiece's word-start mark


# -- the models' side: when each word is shown ------------------------------------------
def spoken_words(event: Event) -> list[tuple[str, float]]:
    """An event's words as references spell them (normalised: Whisper's finals are cased and
    punctuated, and write numbers as digits), each with the time its event gives the word
    it came from (:func:`asr.formats.word_times`)."""
    pairs = []
    for word, time in zip(event.text.split(), word_times(event)):
        pairs += [(w, time) for w in normalize(word).split()]
    return pairs


def settled(history: list[tuple[float, list[str]]]) -> list[float]:
    """Per item of the last sequence, the earliest time from which every later sequence
    holds it in its place."""
    final = history[-1][1]
    times = []
    for k, item in enumerate(final):
        when = history[-1][0]
        for fed, seen in reversed(history):
            if k >= len(seen) or seen[k] != item:
                break
            when = fed
        times.append(when)
    return times


def shown_times(
    recognizer: Recognizer, samples: np.ndarray, rate: int, chunk: int, two_pass: bool | None = None
) -> tuple[list[str], list[float], list[float]]:
    """Final words (normalised), per word the seconds of audio fed when it settled in its
    place, and the time its final gives it. ``two_pass`` (None: the bundle's setting) picks
    the session's finals."""
    session = recognizer.stream(rate, SessionOptions(two_pass=two_pass))
    finals: list[tuple[str, float]] = []
    partial: list[str] = []
    history: list[tuple[float, list[str]]] = []  # (audio fed, transcript words then)
    for start in range(0, len(samples), chunk):
        events = session.accept(samples[start : start + chunk])
        fed = min(start + chunk, len(samples)) / rate
        for event in events:
            if event.final:
                finals += spoken_words(event)
                partial = []
            else:
                partial = normalize(event.text).split()
        history.append((fed, [w for w, _ in finals] + partial))
    finals += [pair for e in session.finish() if e.final for pair in spoken_words(e)]
    words = [w for w, _ in finals]
    history.append((len(samples) / rate, words))
    return words, settled(history), [t for _, t in finals]


def right_words(reference: list[str], words: list[str]) -> list[tuple[int, int]]:
    """(reference index, hypothesis index) of each right word: where difflib matches it."""
    match = difflib.SequenceMatcher(a=reference, b=words, autojunk=False)
    return [(a + k, b + k) for a, b, n in match.get_matching_blocks() for k in range(n)]


def right_word_latencies(
    reference: list[str], ends: list[float], words: list[str], times: list[float]
) -> list[float]:
    """Seconds from each right word's end (``ends`` per reference word) to ``times`` of it
    (per hypothesis word: when it was shown, or the time its final states)."""
    return [times[b] - ends[a] for a, b in right_words(reference, words)]


def shown_after_next_word(
    reference: list[str], ends: list[float], words: list[str], times: list[float]
) -> list[bool]:
    """Per right word, whether it was shown only once the next reference word had ended as
    well: held for the sound after it, which tells a short word ("a", "and") from the start
    of a longer one. A reference's last word has no next word: False."""
    return [a + 1 < len(ends) and times[b] >= ends[a + 1] for a, b in right_words(reference, words)]


# -- the aligner's side: where each reference word ends -----------------------------------
def aligner_problem(recognizer: Recognizer) -> str | None:
    """What a bundle lacks to make word ends (None: nothing), all of it at once."""
    missing = []
    frontend = recognizer.frontend
    assert frontend is not None
    if frontend.cfg.frontend != "whisper":
        missing.append(f"the Whisper front end (it has {frontend.cfg.frontend!r})")
    else:
        try:
            frontend.full_attention()  # loaded now, once: the aligner reads it next
        except ValueError:
            missing.append(
                f"the full-attention Whisper teacher ({BUNDLE_TEACHER_FILE}; a bundle saved "
                "with decode.two_pass=true carries it)"
            )
    if recognizer.model.ctc is None:
        missing.append("a CTC head (it was trained with model.ctc_weight=0)")
    if not isinstance(recognizer.tokenizer, SentencePieceTokenizer):
        missing.append("a sentencepiece tokenizer (words are found from its pieces)")
    return "; ".join(missing) or None


def word_last_tokens(pieces: list[str]) -> list[int]:
    """Index of each word's last token: a piece starting with the word-start mark begins a
    word (the first piece always does)."""
    starts = [i for i, piece in enumerate(pieces) if i == 0 or piece.startswith(WORD_START)]
    return [s - 1 for s in starts[1:]] + ([len(pieces) - 1] if pieces else [])


def word_ends(
    pieces: list[str], last_frames: list[int], state_seconds: float, duration: float
) -> list[float]:
    """Seconds at which each word ends: the end of its last token's last state, capped at the
    audio's ``duration``."""
    return [min((last_frames[i] + 1) * state_seconds, duration) for i in word_last_tokens(pieces)]


@dataclass
class Aligner:
    """A bundle's full-attention teacher, LAS encoder and CTC head, aligning reference text."""

    recognizer: Recognizer
    teacher: WhisperEncoder
    state_seconds: float

    @classmethod
    def of(cls, recognizer: Recognizer) -> Aligner:
        assert recognizer.frontend is not None
        return cls(
            recognizer,
            recognizer.frontend.full_attention(),
            recognizer.stream(SAMPLE_RATE).state_seconds,
        )

    @torch.no_grad()
    def teacher_states(self, samples: np.ndarray) -> torch.Tensor:
        """The full-attention teacher's states [T, D] of 16 kHz ``samples``."""
        mel = torch.from_numpy(log_mel(samples, self.recognizer.config.model.whisper.floor))
        return self.teacher.encode_whole(mel, None)

    @torch.no_grad()
    def log_probs(self, states: torch.Tensor) -> torch.Tensor:
        """CTC log-probs [T, V] per LAS state over the teacher's ``states`` (the LAS layers
        run as for a two-pass final: ``Seq2Seq.encode`` from a fresh state)."""
        model = self.recognizer.model
        assert model.ctc is not None
        memory, lengths = model.encode(states.unsqueeze(0), torch.tensor([len(states)]))
        return model.ctc(memory[0, : int(lengths[0])]).log_softmax(-1)

    def word_ends(
        self, samples: np.ndarray, text: str, states: torch.Tensor | None = None
    ) -> list[float] | None:
        """Seconds at which each word of ``text`` ends in ``samples`` (16 kHz); None when the
        text cannot be aligned (too few states, no tokens, words and pieces disagree).
        ``states``: the samples' teacher states, when the caller has them already."""
        tokenizer = self.recognizer.tokenizer
        tokens = tokenizer.encode(text)
        if not tokens:
            return None
        if states is None:
            states = self.teacher_states(samples)
        log_probs = self.log_probs(states)
        if len(log_probs) == 0:
            return None
        _, last = ctc_token_spans(
            log_probs.unsqueeze(0),
            torch.tensor([len(log_probs)]),
            torch.tensor([tokens]),
            torch.tensor([len(tokens)]),
        )
        frames = last[0].tolist()
        pieces = tokenizer.pieces(tokens)
        if min(frames) < 0 or len(word_last_tokens(pieces)) != len(text.split()):
            return None
        return word_ends(pieces, frames, self.state_seconds, len(samples) / SAMPLE_RATE)


# -- figures ---------------------------------------------------------------------------
@dataclass
class Figures:
    """One model's counts and the latencies (s) of its right words."""

    model: str
    two_pass: bool
    greedy: bool = False
    utterances: int = 0
    words: int = 0  # reference words of the aligned utterances
    latencies: list[float] = field(default_factory=list)
    numbers: list[bool] = field(default_factory=list)  # per right word: a number word
    # per right word: shown only after the next reference word had ended
    after_next: list[bool] = field(default_factory=list)
    # per right word: the time its final states for it less its aligned end
    time_errors: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        ms = np.array(self.latencies) * 1000
        stats = None
        if len(ms):
            median, p90, p95 = np.percentile(ms, [50, 90, 95]).tolist()
            over = float(np.mean(ms > GOAL_MS))
            stats = {"median": median, "p90": p90, "p95": p95, "over_400_share": over}
        held = np.array(self.after_next, bool)  # empty: not counted
        errors = np.abs(np.array(self.time_errors)) * 1000
        error = None
        if len(errors):
            median, p95 = np.percentile(errors, [50, 95]).tolist()
            error = {"median": median, "p95": p95, "mean_signed": 1000 * np.mean(self.time_errors)}
        return {
            "model": self.model,
            "two_pass": self.two_pass,
            "final_time_error_ms": error,
            "greedy": self.greedy,
            "utterances": self.utterances,
            "words_aligned": self.words,
            "words_right": len(ms),
            "right_share": len(ms) / self.words if self.words else None,
            "latency_ms": stats,
            "after_next_word_share": share(held),
            "after_next_word_share_over_goal": share(held[ms > GOAL_MS]) if len(held) else None,
            "latency_ms_by_kind": {
                kind: by_kind(ms[np.array(self.numbers, bool) == (kind == "numbers")])
                for kind in ("numbers", "other")
            },
        }


def share(flags: np.ndarray) -> float | None:
    """The share of true ``flags`` (None for none)."""
    return float(np.mean(flags)) if len(flags) else None


def by_kind(ms: np.ndarray) -> dict[str, float | int | None]:
    """Count, median and p95 of some words' latencies (ms)."""
    median, p95 = np.percentile(ms, [50, 95]).tolist() if len(ms) else (None, None)
    return {"words": len(ms), "median": median, "p95": p95}


def table(rows: list[dict]) -> str:
    """The compact table: one row per model (rows as :meth:`Figures.to_dict` gives them)."""
    head = [
        "model",
        "finals",
        "utts",
        "aligned",
        "right",
        "right%",
        "median",
        "p90",
        "p95",
        ">400ms",
        "time err p50",
        "p95",
    ]
    lines = [head]
    for row in rows:
        share, stats = row["right_share"], row["latency_ms"]
        latency = ["-"] * 4
        if stats is not None:
            latency = [f"{stats[k]:.0f}" for k in ("median", "p90", "p95")]
            latency.append(f"{100 * stats['over_400_share']:.1f}%")
        error = row.get("final_time_error_ms")
        latency += ["-", "-"] if error is None else [f"{error[k]:.0f}" for k in ("median", "p95")]
        counts = [row[k] for k in ("utterances", "words_aligned", "words_right")]
        lines.append(
            [
                row["model"],
                "two-pass" if row["two_pass"] else "greedy" if row.get("greedy") else "one-pass",
                *map(str, counts),
                "-" if share is None else f"{100 * share:.1f}",
                *latency,
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))
        )
        for line in lines
    )


# -- command line ---------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """One --model: its text as given, the bundle, two-pass finals (None: the bundle's),
    whether its search is made greedy without the LM, and its streaming decoder (None: the
    bundle's)."""

    name: str
    path: Path
    two_pass: bool | None
    greedy: bool = False
    streaming_decoder: str | None = None


def model_spec(spec: str) -> ModelSpec:
    """``PATH``, ``PATH:two-pass``, ``PATH:one-pass``, ``PATH:greedy`` or ``PATH:whisper``
    (a colon followed by a path is part of the path)."""
    path, colon, suffix = spec.rpartition(":")
    if not colon or "/" in suffix:
        return ModelSpec(spec, Path(spec), None)
    if suffix not in SUFFIXES:
        known = ", ".join(f":{s}" for s in SUFFIXES)
        raise argparse.ArgumentTypeError(f"{spec!r}: unknown suffix :{suffix} (known: {known})")
    return ModelSpec(spec, Path(path), *SUFFIXES[suffix])


def load_bundles(parser: argparse.ArgumentParser, paths: list[Path]) -> dict[Path, Recognizer]:
    """Each bundle loaded once (one may be listed with several suffixes); a bad one is a
    parser error naming it."""
    loaded: dict[Path, Recognizer] = {}
    for path in paths:
        if path not in loaded:
            try:
                loaded[path] = load_model(path)
            except (OSError, ValueError) as err:
                parser.error(f"{path}: {err}")
    return loaded


def parse_args(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        type=model_spec,
        nargs="+",
        required=True,
        help="bundles, each optionally PATH:two-pass, PATH:one-pass, PATH:greedy or PATH:whisper "
        "(its streaming pass by Whisper's decoder; default: its own finals and search)",
    )
    parser.add_argument(
        "--aligner",
        type=Path,
        help="bundle whose CTC head times the word ends (default: the first --model's)",
    )
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=100, help="utterances (0: all)")
    parser.add_argument("--chunk-ms", type=float, default=20.0, help="audio per accept()")
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args(argv)
    if args.chunk_ms <= 0:
        parser.error("--chunk-ms must be positive")
    if args.limit < 0:
        parser.error("--limit must be >= 0 (0: all)")
    if not args.manifest.is_file():
        parser.error(f"--manifest {args.manifest}: no such file")
    args.aligner = args.aligner or args.model[0].path
    return parser, args


def prepare(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[list[Recognizer], Aligner, list[Figures]]:
    """The recognizer of each model, the aligner and an empty row per model, after checking
    each can do what it is asked (parser errors otherwise)."""
    specs: list[ModelSpec] = args.model
    aligner_path: Path = args.aligner
    bundles = load_bundles(parser, [spec.path for spec in specs] + [aligner_path])
    problem = aligner_problem(bundles[aligner_path])
    if problem:
        parser.error(f"--aligner {aligner_path} cannot time word ends: it lacks {problem}")
    figures, recognizers = [], []
    for spec in specs:
        recognizer = bundles[spec.path]
        if spec.greedy or spec.streaming_decoder:
            decode = recognizer.config.decode.greedy() if spec.greedy else recognizer.config.decode
            if spec.streaming_decoder:
                decode = replace(decode, streaming_decoder=spec.streaming_decoder)
            recognizer = replace(recognizer, config=replace(recognizer.config, decode=decode))
        recognizers.append(recognizer)
        problems = recognizer.option_problems() if spec.streaming_decoder else {}
        trouble = recognizer.two_pass_problem() if spec.two_pass else None
        trouble = trouble or problems.get("streaming_decoder")
        if trouble:
            parser.error(f"--model {spec.name}: {trouble}")
        two_pass = recognizer.config.decode.two_pass if spec.two_pass is None else spec.two_pass
        figures.append(Figures(spec.name, two_pass, spec.greedy))
    return recognizers, Aligner.of(bundles[aligner_path]), figures


def measure(
    entries: list[Entry],
    recognizers: list[Recognizer],
    aligner: Aligner,
    figures: list[Figures],
    chunk: int,
) -> tuple[int, int]:
    """Fill ``figures`` from every utterance the aligner can align; return the unaligned
    utterances and all reference words."""
    unaligned = words = 0
    for entry in entries:
        samples = entry_audio(entry, SAMPLE_RATE)
        reference = entry.text.lower().split()
        words += len(reference)
        ends = aligner.word_ends(samples, " ".join(reference))
        if ends is None:
            unaligned += 1
            continue
        for recognizer, fig in zip(recognizers, figures):
            shown, times, stated = shown_times(
                recognizer, samples, SAMPLE_RATE, chunk, fig.two_pass
            )
            fig.utterances += 1
            fig.words += len(reference)
            fig.latencies += right_word_latencies(reference, ends, shown, times)
            fig.numbers += [reference[a] in NUMBER_WORDS for a, _ in right_words(reference, shown)]
            fig.after_next += shown_after_next_word(reference, ends, shown, times)
            fig.time_errors += right_word_latencies(reference, ends, shown, stated)
    return unaligned, words


def main(argv: list[str] | None = None) -> int:
    parser, args = parse_args(argv)
    torch.set_num_threads(1)
    recognizers, aligner, figures = prepare(parser, args)
    entries, _ = read_manifest(args.manifest)
    entries = entries[: args.limit or None]
    if not entries:
        parser.error(f"{args.manifest}: no usable utterances")
    chunk = max(1, int(args.chunk_ms * SAMPLE_RATE / 1000))
    unaligned, words = measure(entries, recognizers, aligner, figures, chunk)
    result = {
        "manifest": str(args.manifest),
        "chunk_ms": args.chunk_ms,
        "aligner": str(args.aligner),
        "time": "audio fed",
        "goal_p95_ms": GOAL_MS,
        "utterances": len(entries),
        "reference_words": words,
        "unaligned": unaligned,
        "models": [fig.to_dict() for fig in figures],
    }
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if unaligned < len(entries) else 1


def report(result: dict) -> str:
    """The header lines and the table of :func:`main`'s figures."""
    aligned = result["utterances"] - result["unaligned"]
    return "\n".join(
        [
            f"{result['utterances']} utterances ({result['reference_words']} words) of "
            f"{result['manifest']}: {aligned} aligned by {result['aligner']}'s CTC head, "
            f"{result['unaligned']} skipped (no alignment); {result['chunk_ms']:g} ms chunks",
            "latency: ms of audio fed from a right word's end to when it was shown; "
            f"goal p95 <= {GOAL_MS:g} ms; time err: ms between the time a final gives a right "
            "word and its aligned end",
            table(result["models"]),
            "median / p95 ms of number words and of the others: "
            + "; ".join(
                f"{row['model']} {kinds(row)}" for row in result["models"] if row["latency_ms"]
            ),
            f"shown only after the next word had ended, of the right words / of those over "
            f"{GOAL_MS:g} ms: "
            + "; ".join(
                f"{row['model']} {held(row)}" for row in result["models"] if row["latency_ms"]
            ),
        ]
    )


def held(row: dict) -> str:
    """``a% / b%`` of one model's row: its words shown only after the next word had ended."""
    shares = [row["after_next_word_share"], row["after_next_word_share_over_goal"]]
    return " / ".join("-" if value is None else f"{100 * value:.1f}%" for value in shares)


def kinds(row: dict) -> str:
    """``numbers (N) a / b, other (M) c / d`` of one model's row."""
    parts = []
    for kind, stats in row["latency_ms_by_kind"].items():
        if stats["words"]:
            parts.append(f"{kind} ({stats['words']}) {stats['median']:.0f} / {stats['p95']:.0f}")
    return ", ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
