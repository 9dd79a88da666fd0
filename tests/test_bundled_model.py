"""The bundled model transcribes shipped held-out files within the WER its card states,
through `asr transcribe` and, token for token the same, through a streaming session."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from asr.bundle import load_model
from asr.config import Config
from asr.scoring import wer
from training.recipes.textnorm import normalize

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "default"
HELDOUT = REPO / "tests" / "data" / "heldout"
# every held-out split the published sample has (publish_model ships one file list per split)
SPLITS = tuple(sorted(path.stem for path in HELDOUT.glob("*.jsonl")))


def served() -> dict[str, dict]:
    """The card's figures for the bundle as it serves: two-pass finals by Whisper's decoder
    where they are its default, else one-pass finals (with its LM when it has one)."""
    metrics = json.loads((MODEL / "metrics.json").read_text())
    if Config.load(MODEL / "config.json").decode.two_pass:
        finals = metrics["whisper_finals"]["eval"]
        return {split: {"wer": row["wer"]["two-pass"]} for split, row in finals.items()}
    monotonic = metrics["monotonic"]
    return (monotonic.get("fusion") or monotonic)["eval"]


def test_a_held_out_sample_ships_for_every_split_of_the_card() -> None:
    card = served()
    assert SPLITS and set(SPLITS) <= set(card), (SPLITS, sorted(card))


def sample(split: str) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in (HELDOUT / f"{split}.jsonl").read_text().splitlines()]
    assert len(rows) >= 10
    return rows


def allowed_wer(split: str, words: int) -> float:
    """The card's WER on the whole split, plus three binomial standard deviations for a small sample."""
    return with_three_deviations(served()[split]["wer"]["rate"], words)


def with_three_deviations(rate: float, words: int) -> float:
    """A WER measured elsewhere, plus three binomial standard deviations for ``words`` words."""
    return rate + 3 * math.sqrt(max(rate * (1 - rate), 0.01) / words)


@pytest.fixture(scope="module")
def transcripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """`asr transcribe` on every shipped file: {split: {audio path: text}}, run from a
    directory without ``models/default``, so that it must find the checkout's bundle."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    found = {}
    for split in SPLITS:
        files = [str(HELDOUT / row["audio"]) for row in sample(split)]
        result = subprocess.run(
            [sys.executable, "-m", "asr.cli", "transcribe", *files],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
            cwd=elsewhere,
        )
        lines = [line.split("\t", 1) for line in result.stdout.splitlines()]
        found[split] = {path: text for path, text in lines}
        assert set(found[split]) == set(files)
    return found


@pytest.mark.parametrize("split", SPLITS)
def test_transcribe_cli_is_within_the_stated_wer(
    split: str, transcripts: dict[str, dict[str, str]]
) -> None:
    rows = sample(split)
    refs = [row["text"] for row in rows]
    # finals by Whisper's decoder are cased and punctuated, digits for numbers: scored as
    # `asr eval` scores them
    hyps = [normalize(transcripts[split][str(HELDOUT / row["audio"])]) for row in rows]
    errors = wer(refs, hyps)
    limit = allowed_wer(split, errors.reference_length)
    assert errors.rate <= limit, list(zip(refs, hyps))


@pytest.mark.parametrize("split", SPLITS)
def test_streaming_gives_the_same_transcripts(
    split: str, transcripts: dict[str, dict[str, str]]
) -> None:
    recognizer = load_model(MODEL)
    for row in sample(split)[:5]:
        path = HELDOUT / row["audio"]
        samples, rate = soundfile.read(path, dtype="float32")
        session = recognizer.stream(rate)
        events = []
        for chunk in np.array_split(samples, max(1, len(samples) // (rate // 10))):  # ~100 ms
            events += session.accept(chunk)
        events += session.finish()
        text = " ".join(e.text for e in events if e.final and e.text)
        assert text == transcripts[split][str(path)]
