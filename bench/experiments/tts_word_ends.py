"""How far the word latency benchmark's word ends are from where a voice really ends each word.

``bench/word_latency.py`` times each word's end by a CTC forced alignment (the aligner
bundle's teacher, LAS encoder and CTC head), and its docstring names a known bias: a CTC
spike sits inside its token, so a word end read from it can be early. Kokoro-82M knows
where it ends each word: its duration predictor gives every phoneme a whole number of
frames, and the audio is made from them. Its int8 model (the corpus's) does not output
them, so this probe writes a copy of it that does (the tensor the model's own frame
expansion sums, ``DURATIONS``; kokoro-onnx turns it into phoneme times), reads new
sentences with the corpus's Kokoro voices and speeds, and sets each word end (the end of
its last phoneme) beside the aligner's for the same clip. A sentence whose phonemes
group into another number of words than its transcript ("to be" read as one) is skipped.

    python bench/experiments/tts_word_ends.py --aligner models/default --clips 150

Prints, for the words before the last and for last words apart, the aligner's end minus
Kokoro's: median, mean, 10th and 90th percentile, and the share within one LAS state
(40 ms); and, for last words, each end minus the clip's audible end (the end of its last
10 ms frame within ``AUDIBLE_DB`` of its loudest), which says which of the two is right
where they differ.

With ``--heads``, also the word ends the streaming speller learns from: Whisper's greedy
transcript of the teacher's states (numbers spelled, as ``asr tune-speller --numbers
words`` and ``asr train-speller`` make their targets), each word ending where its last
token ends by the alignment heads (``training.speller.word_ends``, a mark joining the
word before it), for the clips whose transcript is the reference word for word.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

import numpy as np
import soxr
import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from word_latency import Aligner  # noqa: E402

from asr.bundle import load_model  # noqa: E402
from asr.config import WhisperFinalsConfig  # noqa: E402
from asr.frontend import STATE_SECONDS  # noqa: E402
from asr.whisper_finals import WhisperFinals  # noqa: E402
from training.recipes import kokoro  # noqa: E402
from training.recipes.engines import Kokoro as KokoroEngine  # noqa: E402
from training.recipes.engines import one_thread_session  # noqa: E402
from training.recipes.sources import load_text  # noqa: E402
from training.recipes.synth_corpus import FRAME, RATE, loud_frames  # noqa: E402
from training.speller import WORD_STARTS  # noqa: E402
from training.speller import word_ends as token_word_ends  # noqa: E402
from training.speller_adapter import float32_finals  # noqa: E402

DURATIONS = "/encoder/Gather_output_0"  # frames per token, pads included: the CumSum's input
AUDIBLE_DB = -30.0


def timed_model_path() -> Path:
    """A copy of the cached Kokoro model that also outputs ``duration`` (made once)."""
    import onnx

    path = kokoro.cache_dir() / "kokoro-int8-timed.onnx"
    if not path.exists():
        model = onnx.load(str(kokoro.model_path()))
        model.graph.node.append(onnx.helper.make_node("Identity", [DURATIONS], ["duration"]))
        model.graph.output.append(
            onnx.helper.make_tensor_value_info("duration", onnx.TensorProto.INT64, None)
        )
        tmp = path.with_name(path.name + ".part")
        onnx.save(model, str(tmp))
        os.replace(tmp, path)
    return path


def word_ends(phonemes: list[tuple[str, float]]) -> list[float]:
    """End (s) of each word's last sounding phoneme, from (phoneme, end) pairs in order: a
    space closes a word, punctuation marks are not sounds."""
    ends: list[float] = []
    last = None
    for phoneme, end in phonemes:
        if phoneme == " ":
            if last is not None:
                ends.append(last)
            last = None
        elif phoneme.isalpha() or not phoneme.isascii():
            last = end
    return ends + ([last] if last is not None else [])


def audible_end(samples: np.ndarray, floor_db: float = AUDIBLE_DB) -> float:
    """End (s) of the last 10 ms frame of 16 kHz ``samples`` within ``floor_db`` of the
    loudest's, as the corpus judges silence (``synth_corpus.loud_frames``)."""
    return float((loud_frames(samples, floor_db)[-1] + 1) * FRAME / RATE)


def head_word_ends(finals: WhisperFinals, states: Tensor) -> tuple[list[str], list[float]]:
    """The words of Whisper's greedy transcript of the teacher's ``states`` and the end (s)
    of each as the speller's targets time it (:func:`target_words`)."""
    options = WhisperFinalsConfig(beam_size=1, numbers="words")
    text = finals.decode(states[None], torch.tensor([len(states)]), options)[0]
    return target_words(text.pieces, text.ends)


def target_words(pieces: list[str], ends: list[int]) -> tuple[list[str], list[float]]:
    """Whisper's tokens as words (lower case, letters and apostrophes; a token with a
    leading space starts one) and each word's end (s): its last token's end in states, a
    mark joining the word before it, as ``training.speller.word_ends`` times targets."""
    last = token_word_ends(pieces, ends)
    starts = [i for i, piece in enumerate(pieces) if i == 0 or piece.startswith(WORD_STARTS)]
    joined = ["".join(pieces[a:b]) for a, b in zip(starts, starts[1:] + [len(pieces)])]
    words = ["".join(c for c in word.lower() if c.isalpha() or c == "'") for word in joined]
    return words, [last[a] * STATE_SECONDS for a in starts]


def summary(name: str, seconds: list[float]) -> str:
    ms = np.array(seconds) * 1000
    return (
        f"{name}: {len(ms)} words: median {np.median(ms):+.0f} ms, "
        f"mean {ms.mean():+.0f}, p10 {np.percentile(ms, 10):+.0f}, "
        f"p90 {np.percentile(ms, 90):+.0f}, within 40 ms {np.mean(np.abs(ms) <= 40):.0%}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--aligner", type=Path, default=ROOT / "models" / "default")
    parser.add_argument("--clips", type=int, default=150)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--text", nargs="+", default=["austen", "fortune", "wordnet"])
    parser.add_argument("--heads", action="store_true", help="also the speller's word ends")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from kokoro_onnx import Kokoro

    model = Kokoro.from_session(one_thread_session(timed_model_path()), str(kokoro.voices_path()))
    recognizer = load_model(args.aligner)
    aligner = Aligner.of(recognizer)
    finals = float32_finals(recognizer) if args.heads else None
    engine = KokoroEngine("kokoro")
    voices = engine.voices()
    rng = random.Random(args.seed)
    sentences = [s for s in load_text(args.text, args.seed) if 4 <= len(s.text.split()) <= 16]
    rng.shuffle(sentences)
    inner: list[float] = []
    last: list[float] = []
    kokoro_audible: list[float] = []
    aligner_audible: list[float] = []
    heads_inner: list[float] = []
    heads_last: list[float] = []
    clips = skipped = 0
    for sentence in sentences:
        if clips == args.clips:
            break
        voice = rng.choice(voices)
        speed = engine.params(rng)["speed"]
        audio, rate, spoken = model.create_timed(
            sentence.spoken, kokoro.style(voice), speed=speed, lang=kokoro.accent(voice)
        )
        truth = word_ends([(t.phoneme, t.end) for t in spoken])
        samples = soxr.resample(audio, rate, 16000).astype(np.float32)
        states = aligner.teacher_states(samples)
        found = aligner.word_ends(samples, sentence.text, states)
        if found is None or len(truth) != len(found):
            skipped += 1
            continue
        clips += 1
        gaps = [a - b for a, b in zip(found, truth)]
        inner += gaps[:-1]
        last.append(gaps[-1])
        audible = audible_end(samples)
        kokoro_audible.append(truth[-1] - audible)
        aligner_audible.append(found[-1] - audible)
        if finals is not None:
            with torch.no_grad():
                words, ends = head_word_ends(finals, states)
            if words == sentence.text.split():
                gaps = [a - b for a, b in zip(ends, truth)]
                heads_inner += gaps[:-1]
                heads_last.append(gaps[-1])
    print(f"{clips} clips read by {args.aligner}, {skipped} skipped (words grouped otherwise)")
    print(summary("words before the last, aligner - Kokoro", inner))
    print(summary("last words, aligner - Kokoro", last))
    print(summary("last words, Kokoro - audible end", kokoro_audible))
    print(summary("last words, aligner - audible end", aligner_audible))
    if finals is not None:
        print(f"{len(heads_last)} clips transcribed word for word by Whisper's decoder")
        print(summary("words before the last, speller's targets - Kokoro", heads_inner))
        print(summary("last words, speller's targets - Kokoro", heads_last))
    return 0


if __name__ == "__main__":
    sys.exit(main())
