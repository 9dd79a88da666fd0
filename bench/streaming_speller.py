"""Whisper's decoder streaming (``asr.speller``) beside its ceiling and the LSTM decoder.

On the same utterances, side by side:

    ceiling     Whisper's decoder reading the streaming student's whole memory, then the
                teacher's encoded silence (as ``bench/decoder_ceiling.py``'s "student"
                column): the speller with the :class:`~asr.speller.AtEnd` policy
    attention   the training-free attention-guided policy (Simul-Whisper): a token waits
                while the alignment heads attend the last f states of the memory read
    learnt      the learnt policy (``training/speller.py``): Raffel et al.'s p(i, j) from the
                decoder's state and the student's, yes at p > threshold
    prototype   ``bench/monotonic_speller.py``'s policy (``--save``): an energy between LSTMs
                over the tokens said and over the student's states, Whisper's own decoder
                (no adapters) reading
    lstm        the bundle's own streaming decoder (greedy, one pass, no language model)

Every system reads the student's states as a session gets them: the audio is fed in
``--chunk-ms`` pieces and states arrive 16 at a time (320 ms) once the encoder has them.
A token's emission time is the audio fed when the states that let it out arrived (the
close: the whole audio); the LSTM's tokens are timed when they settled in their place
(finals so far plus the partial) and stayed there. Latency of a token = its emission time
minus the end of its word's audio, over the tokens of right words (difflib's match of
normalised words to the reference), with word ends from the CTC forced alignment of the
reference by the bundle's CTC head over the teacher's states
(:class:`bench.word_latency.Aligner`); utterances it cannot align count for WER only.
Printed per system: WER (texts scored as ``bench/real_speech.py`` scores them), token
latency p50 and p95 (ms), the share of those tokens emitted by their word's end + 1 s,
and the one-thread real-time factor of one stream (the student's encoding included).
Audio longer than Whisper's 30 s window is read window by window, each a segment.

    python bench/streaming_speller.py --manifest data/live/dev.jsonl --limit 100 \\
        --policy attention:4 attention:8 learnt:exp/speller/speller_policy.safetensors \\
        prototype:exp/prototype.safetensors \\
        --beyond silence mask --numbers words digits

``--numbers``: numbers spelled as said (the served default: a number's words stream as
they end) or in Whisper's numerals (written once the whole number is heard); the ceiling
reads with the first.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
import typing
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.bundle import load_model  # noqa: E402
from asr.config import Numbers, SessionOptions  # noqa: E402
from asr.recognizer import Recognizer  # noqa: E402
from asr.speller import (  # noqa: E402
    AtEnd,
    AttentionGuided,
    Immediate,
    Learnt,
    Policy,
    Speller,
    SpellerModel,
    SpellerOptions,
    bundle_adapter,
)
from asr.whisper_features import SAMPLE_RATE  # noqa: E402
from asr.whisper_finals import silent_states  # noqa: E402
from bench.decoder_ceiling import WINDOW, wer  # noqa: E402
from bench.monotonic_speller import Policy as PrototypePolicy  # noqa: E402
from bench.monotonic_speller import Prototype  # noqa: E402
from bench.real_speech import score_text  # noqa: E402
from bench.word_latency import Aligner, aligner_problem, settled  # noqa: E402
from training.dataset import entry_audio  # noqa: E402
from training.manifest import Entry, read_manifest  # noqa: E402

WORD_STARTS = (" ", "\u2581")  # a Whisper token's leading space, a sentencepiece's mark
Arrivals = list[tuple[float, np.ndarray]]  # (audio fed in s, the states that came then)


@dataclass(frozen=True)
class System:
    """One column: a speller policy and setting, or the bundle's LSTM decoder."""

    name: str
    policy: Policy | None = None  # None: the LSTM decoder
    options: SpellerOptions = SpellerOptions()
    adapted: bool = True  # read by the bundle's adapted decoder (False: Whisper's own)


@dataclass
class Figures:
    name: str
    hyps: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # s, per right token
    seconds: float = 0.0  # processing time, one thread
    audio: float = 0.0  # seconds of audio

    def row(self, refs: list[str]) -> dict:
        ms = np.array(self.latencies) * 1000
        p50, p95 = np.percentile(ms, [50, 95]).tolist() if len(ms) else (None, None)
        return {
            "system": self.name,
            "wer": wer(refs, self.hyps),
            "token_latency_p50_ms": p50,
            "token_latency_p95_ms": p95,
            "within_1s": float(np.mean(ms <= 1000)) if len(ms) else None,
            "right_tokens": len(ms),
            "rtf": self.seconds / self.audio if self.audio else None,
        }


def policy_of(spec: str, model: SpellerModel) -> Policy:
    """``attention:F`` (the attention-guided policy, F states), ``end`` (the ceiling),
    ``immediate`` (at every chunk end: the decoder alone waits, by its end of text, as a
    decoder tuned on cut memories learns to), ``learnt:PATH`` or ``learnt:PATH@THRESHOLD``
    (a learnt policy's file), ``prototype:PATH`` (the prototype's, over ``model``'s token
    embeddings)."""
    kind, _, value = spec.partition(":")
    if kind == "attention" and value.isdigit():
        return AttentionGuided(int(value))
    if kind == "end" and not value:
        return AtEnd()
    if kind == "immediate" and not value:
        return Immediate()
    if kind == "learnt" and value:
        path, _, threshold = value.partition("@")
        try:
            return Learnt.load(Path(path), float(threshold) if threshold else None)
        except (OSError, ValueError) as err:
            raise argparse.ArgumentTypeError(f"{spec!r}: {err}") from None
    if kind == "prototype" and value:
        try:
            policy = PrototypePolicy.load(Path(value), model.decoder.embed.weight.detach())
        except (OSError, ValueError) as err:
            raise argparse.ArgumentTypeError(f"{spec!r}: {err}") from None
        return Prototype(policy, model.vocabulary.prompt[-1])
    raise argparse.ArgumentTypeError(
        f"{spec!r}: expected attention:F (F states), end, immediate, learnt:PATH[@THRESHOLD] "
        "or prototype:PATH"
    )


def systems_of(
    policies: list[str], beyonds: list[str], numbers: list[str], model: SpellerModel
) -> list[System]:
    ceiling = SpellerOptions(beyond="silence", numbers=numbers[0])  # type: ignore[arg-type]
    systems = [System("ceiling", AtEnd(), ceiling)]
    for beyond in beyonds:
        for spelled in numbers:
            for spec in policies:
                options = SpellerOptions(beyond=beyond, numbers=spelled)  # type: ignore[arg-type]
                policy = policy_of(spec, model)
                adapted = not isinstance(policy, Prototype)
                systems.append(System(f"{spec} ({beyond}, {spelled})", policy, options, adapted))
    return systems + [System("lstm greedy")]


def arrivals(recognizer: Recognizer, samples: np.ndarray, chunk: int) -> tuple[Arrivals, float]:
    """The student's states of one window as a session gets them, and the seconds taken."""
    assert recognizer.frontend is not None
    started = time.perf_counter()
    stream = recognizer.frontend.stream()
    got: Arrivals = []
    for start in range(0, len(samples), chunk):
        states = stream.accept(samples[start : start + chunk])
        if len(states):
            got.append((min(start + chunk, len(samples)) / SAMPLE_RATE, states))
    got.append((len(samples) / SAMPLE_RATE, stream.finish()))  # the close
    return got, time.perf_counter() - started


def spell(
    model: SpellerModel, system: System, windows: list[Arrivals]
) -> tuple[str, list[str], list[float]]:
    """A speller's text, its token pieces and their emission times (s)."""
    assert system.policy is not None
    texts, pieces, times = [], [], []
    for offset, got in zip(range(0, len(windows) * 30, 30), windows):
        speller = Speller(model, system.policy, system.options)
        emitted: list[float] = []
        for k, (fed, states) in enumerate(got):
            tokens = speller.finish(states) if k == len(got) - 1 else speller.accept(states)
            emitted += [offset + fed] * len(tokens)
        texts.append(speller.text)
        pieces += model.vocabulary.pieces(speller.tokens)
        times += emitted[: len(speller.tokens)]  # a final loop's repeats are cut
    return " ".join(texts), pieces, times


def lstm(
    recognizer: Recognizer, samples: np.ndarray, chunk: int
) -> tuple[str, list[str], list[float]]:
    """The LSTM decoder's text, pieces, and when each piece settled in its place."""
    session = recognizer.stream(SAMPLE_RATE, SessionOptions(two_pass=False))
    finals: list[str] = []
    texts: list[str] = []
    partial: list[str] = []
    history: list[tuple[float, list[str]]] = []  # (audio fed, pieces shown then)
    starts = range(0, len(samples), chunk)
    for start in [*starts, len(samples)]:  # then the close
        last = start == len(samples)
        events = session.finish() if last else session.accept(samples[start : start + chunk])
        for event in events:
            partial = [] if event.final else event.tokens
            finals += event.tokens if event.final else []
            texts += [event.text] if event.final else []
        history.append((min(start + chunk, len(samples)) / SAMPLE_RATE, finals + partial))
    return " ".join(texts), finals, settled(history)


def token_latencies(
    reference: list[str], ends: list[float], pieces: list[str], times: list[float]
) -> list[float]:
    """Per token of each right word: its emission time minus its word's end (s). A piece
    that starts with a space (or sentencepiece's mark) starts a word; each word is
    normalised as scores are, and matched to the reference by difflib."""
    words: list[str] = []
    owners: list[list[float]] = []  # per normalised word, its word's token times
    raw, raw_times = "", []
    for piece, when in [*zip(pieces, times), (" ", 0.0)]:
        if piece.startswith(WORD_STARTS) and raw:
            for word in score_text(raw).split():
                words.append(word)
                owners.append(raw_times)
            raw, raw_times = "", []
        raw += piece
        raw_times = [*raw_times, when]
    match = difflib.SequenceMatcher(a=reference, b=words, autojunk=False)
    return [
        when - ends[a + k]
        for a, b, n in match.get_matching_blocks()
        for k in range(n)
        for when in owners[b + k]
    ]


def measure(
    entries: list[Entry],
    recognizer: Recognizer,
    models: dict[bool, SpellerModel],
    aligner: Aligner,
    systems: list[System],
    chunk: int,
) -> tuple[list[Figures], int]:
    figures = [Figures(s.name) for s in systems]
    greedy = replace(recognizer.config.decode.greedy(), two_pass=False)
    lstm_recognizer = replace(recognizer, config=replace(recognizer.config, decode=greedy))
    unaligned = 0
    for entry in tqdm(entries, unit="utt", file=sys.stderr):
        samples = entry_audio(entry, SAMPLE_RATE)
        duration = len(samples) / SAMPLE_RATE
        reference = score_text(entry.text)
        ends = aligner.word_ends(samples, reference) if reference else None
        unaligned += ends is None
        windows, encoding = [], 0.0
        for begin in range(0, max(len(samples), 1), WINDOW):
            got, seconds = arrivals(recognizer, samples[begin : begin + WINDOW], chunk)
            windows.append(got)
            encoding += seconds
        for system, fig in zip(systems, figures):
            started = time.perf_counter()
            if system.policy is None:
                text, pieces, times = lstm(lstm_recognizer, samples, chunk)
                fig.seconds += time.perf_counter() - started
            else:
                text, pieces, times = spell(models[system.adapted], system, windows)
                fig.seconds += time.perf_counter() - started + encoding
            fig.hyps.append(text)
            fig.audio += duration
            if ends is not None:
                fig.latencies += token_latencies(reference.split(), ends, pieces, times)
    return figures, unaligned


def table(rows: list[dict]) -> str:
    lines = [
        "| system | WER | token latency p50 (ms) | p95 (ms) | by end + 1 s | RTF |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        p50, p95, within = (
            row[k] for k in ("token_latency_p50_ms", "token_latency_p95_ms", "within_1s")
        )
        cells = [
            f"{100 * row['wer']:.2f}%",
            "-" if p50 is None else f"{p50:.0f}",
            "-" if p95 is None else f"{p95:.0f}",
            "-" if within is None else f"{100 * within:.1f}%",
            f"{row['rtf']:.3f}",
        ]
        lines.append(f"| {row['system']} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "default")
    parser.add_argument("--manifest", type=Path, nargs="+", required=True)
    parser.add_argument("--limit", type=int, default=0, help="first N utterances of each")
    parser.add_argument(
        "--policy",
        nargs="+",
        default=["attention:4", "attention:8"],
        help="speller policies: attention:F (F states), end, immediate, "
        "learnt:PATH[@THRESHOLD], prototype:PATH",
    )
    parser.add_argument(
        "--beyond",
        nargs="+",
        choices=["silence", "mask"],
        default=["silence"],
        help="what the policies' decoder reads past a token's boundary",
    )
    parser.add_argument(
        "--numbers",
        nargs="+",
        choices=typing.get_args(Numbers),
        default=["words"],
        help="numbers spelled as said, or in Whisper's numerals",
    )
    parser.add_argument("--chunk-ms", type=float, default=20.0, help="audio per accept()")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.limit < 0 or args.chunk_ms <= 0:
        parser.error("--limit must be >= 0 and --chunk-ms > 0")
    torch.set_num_threads(1)
    recognizer = load_model(args.model)
    problem = recognizer.two_pass_problem() or aligner_problem(recognizer)
    finals = recognizer.whisper_finals()
    if problem or finals is None:
        parser.error(f"--model {args.model}: {problem or 'no Whisper decoder'}")
    assert recognizer.whisper_files is not None
    silent = silent_states(finals.teacher)
    model = SpellerModel.load(*recognizer.whisper_files, silent, bundle_adapter(args.model))
    try:
        systems = systems_of(args.policy, args.beyond, args.numbers, model)
    except argparse.ArgumentTypeError as err:
        parser.error(str(err))
    models = {True: model}
    if not all(system.adapted for system in systems):
        models[False] = SpellerModel.load(*recognizer.whisper_files, silent)
    aligner = Aligner.of(recognizer)
    chunk = max(1, round(args.chunk_ms * SAMPLE_RATE / 1000))
    results = []
    for manifest in args.manifest:
        entries = read_manifest(manifest)[0][: args.limit or None]
        figures, unaligned = measure(entries, recognizer, models, aligner, systems, chunk)
        refs = [e.text for e in entries]
        rows = [fig.row(refs) for fig in figures]
        results.append(
            {"manifest": str(manifest), "utterances": len(entries), "unaligned": unaligned}
            | {"rows": rows}
        )
        print(
            f"\n{manifest}: {len(entries)} utterances, {unaligned} not aligned "
            f"(WER only); {args.chunk_ms:g} ms audio chunks"
        )
        print(table(rows), flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
