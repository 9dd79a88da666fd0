"""bench/word_latency.py: word ends from a CTC forced alignment, when each word settles in a
real streaming session, and the latency figures per model that it prints and writes."""

from __future__ import annotations

import json
import statistics
import types
from pathlib import Path

import numpy as np
import pytest
import soundfile

from asr.bundle import load_model
from tests.conftest import WHISPER_OVERRIDES, build_bundle, load_bench, with_two_pass
from training.recipes.textnorm import NUMBER_WORDS

REPO = Path(__file__).resolve().parents[1]
HELDOUT = REPO / "tests" / "data" / "heldout"
SEEN = HELDOUT / "test_seen_voices.jsonl"
MODEL = REPO / "models" / "first-gen"  # an fbank bundle: it streams, but cannot align
RATE = 16000
CHUNK = RATE // 50  # the bench's default 20 ms
TOO_MANY = 40  # words of a reference too long to align to the shortest held-out file


@pytest.fixture(scope="module")
def bench() -> types.ModuleType:
    return load_bench("word_latency")


def heldout_rows() -> list[dict]:
    return [json.loads(line) for line in SEEN.read_text().splitlines()]


def test_words_settle_while_the_audio_still_streams(bench: types.ModuleType) -> None:
    recognizer = load_model(MODEL)
    checked = 0
    for row in heldout_rows():
        samples, rate = soundfile.read(HELDOUT / row["audio"], dtype="float32")
        words, times, _ = bench.shown_times(recognizer, samples, rate, rate // 50)
        assert words == recognizer.transcribe(samples, rate).split()
        duration = len(samples) / rate
        assert all(0 < t <= duration for t in times)
        if len(words) >= 3:  # a word followed by two more is shown before the audio ends
            assert times[0] < duration
            checked += 1
    assert checked >= 3


def test_a_word_ends_with_the_last_state_of_its_last_piece(bench: types.ModuleType) -> None:
    pieces = ["▁the", "▁quick", "▁br", "own", "▁", "f", "ox", "▁jumps"]
    assert bench.word_last_tokens(pieces) == [0, 1, 3, 6, 7]
    last_frames = [2, 5, 7, 9, 10, 11, 13, 30]
    ends = bench.word_ends(pieces, last_frames, 0.04, 1.0)
    assert ends == pytest.approx([0.12, 0.24, 0.40, 0.56, 1.0])  # "jumps" (1.24 s) capped at 1 s
    assert bench.word_last_tokens(["ab", "c", "▁d"]) == [1, 2]  # a first piece always starts
    assert bench.word_last_tokens([]) == []


def test_only_right_words_have_a_latency(bench: types.ModuleType) -> None:
    reference, ends = ["a", "b", "c", "d"], [0.1, 0.2, 0.3, 0.4]
    words, times = ["a", "x", "c", "d", "e"], [0.3, 0.35, 0.5, 0.9, 1.0]
    latencies = bench.right_word_latencies(reference, ends, words, times)
    assert latencies == pytest.approx([0.2, 0.2, 0.5])


def test_words_held_for_the_next_word_are_counted(bench: types.ModuleType) -> None:
    reference, ends = ["a", "b", "c", "d"], [0.1, 0.2, 0.3, 0.4]
    words, times = ["a", "x", "c", "d"], [0.25, 0.35, 0.35, 0.9]  # "b" missed, "d" last
    held = bench.shown_after_next_word(reference, ends, words, times)
    assert held == [True, False, False]  # "a" at 0.25 >= "b"'s end; "c" at 0.35 < 0.4
    fig = bench.Figures("m", two_pass=False, words=len(reference))
    fig.latencies = bench.right_word_latencies(reference, ends, words, times)
    fig.after_next = held
    row = fig.to_dict()
    assert row["after_next_word_share"] == pytest.approx(1 / 3)
    assert row["after_next_word_share_over_goal"] == pytest.approx(0.0)  # "d": 500 ms, last
    fig.after_next = [True, False, True]  # over the goal only "d", now marked held
    assert fig.to_dict()["after_next_word_share_over_goal"] == pytest.approx(1.0)
    fig.latencies, fig.after_next = [0.1], [False]
    assert fig.to_dict()["after_next_word_share_over_goal"] is None  # none over the goal


def test_number_words_are_reported_apart(bench: types.ModuleType) -> None:
    reference = "call nine one one at once".split()
    words, times = "call nine one one at once".split(), [0.2, 0.9, 1.5, 2.0, 0.8, 0.9]
    ends = [0.1, 0.3, 0.5, 0.7, 0.75, 0.8]
    fig = bench.Figures("m", two_pass=False, words=len(reference))
    fig.latencies = bench.right_word_latencies(reference, ends, words, times)
    fig.numbers = [reference[a] in NUMBER_WORDS for a, _ in bench.right_words(reference, words)]
    kinds = fig.to_dict()["latency_ms_by_kind"]
    assert kinds["numbers"]["words"] == 3 and kinds["other"]["words"] == 3
    assert kinds["numbers"]["median"] == pytest.approx(1000)  # 600, 1000, 1300 ms
    assert kinds["other"]["median"] == pytest.approx(100)  # 100, 50, 100 ms


def test_model_specs_carry_their_finals(bench: types.ModuleType) -> None:
    assert bench.model_spec("models/x").two_pass is None
    spec = bench.model_spec("models/x:two-pass")
    assert (spec.name, spec.path, spec.two_pass) == ("models/x:two-pass", Path("models/x"), True)
    assert bench.model_spec("models/x:one-pass").two_pass is False
    greedy = bench.model_spec("models/x:greedy")
    assert (greedy.path, greedy.two_pass, greedy.greedy) == (Path("models/x"), False, True)
    assert bench.model_spec("exp/a:b/bundle").path == Path("exp/a:b/bundle")


@pytest.fixture(scope="module")
def ctc_bundle(tmp_path_factory: pytest.TempPathFactory, speech_dir: Path) -> Path:
    """A tiny Whisper bundle with a CTC head and the full-attention teacher (saved with
    two-pass finals): what an aligner needs. Random weights, real tokenizer and CMVN."""
    root = tmp_path_factory.mktemp("ctc-aligner")
    plain = build_bundle(
        root / "plain", speech_dir, overrides=[*WHISPER_OVERRIDES, "model.ctc_weight=0.5"]
    )
    return with_two_pass(plain, root / "ctc")


@pytest.fixture(scope="module")
def own_words(
    bench: types.ModuleType, ctc_bundle: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[tuple[np.ndarray, list[str], list[float]]]]:
    """A manifest of held-out recordings whose reference is what the bundle's streaming pass
    writes for each (an untrained model gets no real word right, and latency needs words
    right), plus one that cannot be aligned; and per aligned one: samples, words, shown times.
    A random model may write more pieces than a short file has states: such rows are left
    out, so that the one unaligned row is the one made so."""
    recognizer = load_model(ctc_bundle)
    aligner = bench.Aligner.of(recognizer)
    rows, kept = [], []
    for row in heldout_rows()[:6]:
        audio = HELDOUT / row["audio"]
        samples, rate = soundfile.read(audio, dtype="float32")
        assert rate == RATE
        words, times, _ = bench.shown_times(recognizer, samples, rate, CHUNK, two_pass=False)
        if words and aligner.word_ends(samples, " ".join(words)) is not None:
            rows.append({**row, "audio": str(audio), "text": " ".join(words)})
            kept.append((samples, words, times))
    assert len(kept) >= 3
    shortest = min(heldout_rows(), key=lambda r: r["duration"])
    long_text = " ".join(["comforted"] * TOO_MANY)  # more pieces than it has states
    rows.append({**shortest, "id": "too-short", "audio": str(HELDOUT / shortest["audio"])})
    rows[-1]["text"] = long_text
    manifest = tmp_path_factory.mktemp("own-words") / "own.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return manifest, kept


def test_latency_of_every_word_against_its_aligned_end(
    bench: types.ModuleType,
    ctc_bundle: Path,
    own_words: tuple[Path, list[tuple[np.ndarray, list[str], list[float]]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    manifest, kept = own_words
    out = tmp_path / "latency.json"
    one_pass = f"{ctc_bundle}:one-pass"
    greedy = f"{ctc_bundle}:greedy"  # the bundle searches greedily already: the same figures
    argv = ["--model", one_pass, str(ctc_bundle), greedy, "--manifest", str(manifest)]
    argv += ["--limit", "0"]
    assert bench.main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert (result["utterances"], result["unaligned"]) == (len(kept) + 1, 1)
    first, second, third = result["models"]
    assert (first["model"], first["two_pass"], second["two_pass"]) == (one_pass, False, True)
    assert third == {**first, "model": greedy, "greedy": True}

    # The expected figures, from the aligner's word ends and the shown times taken apart.
    aligner = bench.Aligner.of(load_model(ctc_bundle))
    expected, held = [], []
    for samples, words, times in kept:
        ends = aligner.word_ends(samples, " ".join(words))
        assert ends == sorted(ends) and 0 < ends[0] and ends[-1] <= len(samples) / RATE
        expected += [1000 * (t - e) for t, e in zip(times, ends)]
        held += [t >= e for t, e in zip(times, ends[1:])] + [False]
    words = sum(len(w) for _, w, _ in kept)
    assert result["reference_words"] == words + TOO_MANY
    assert (first["utterances"], first["words_aligned"], first["words_right"]) == (
        len(kept),
        words,
        words,
    )
    stats = first["latency_ms"]
    assert stats["median"] == pytest.approx(statistics.median(expected))
    assert stats["over_400_share"] == pytest.approx(np.mean(np.array(expected) > 400))
    assert first["after_next_word_share"] == pytest.approx(np.mean(held))
    for row in result["models"]:
        assert row["utterances"] == len(kept) and row["words_aligned"] == words
        assert 0 <= row["words_right"] <= row["words_aligned"]
        if row["latency_ms"] is not None:
            lat = row["latency_ms"]
            assert all(np.isfinite(lat[k]) for k in ("median", "p90", "p95"))
            assert lat["median"] <= lat["p90"] <= lat["p95"]
            assert 0 <= lat["over_400_share"] <= 1

    # The printed table says the same as the JSON.
    row = next(line.split() for line in printed.splitlines() if line.startswith(one_pass))
    assert row[1:6] == ["one-pass", str(len(kept)), str(words), str(words), "100.0"]
    assert row[6:9] == [f"{stats[k]:.0f}" for k in ("median", "p90", "p95")]
    assert f"{len(kept) + 1} utterances" in printed and "1 skipped" in printed
    assert f"{one_pass} {100 * np.mean(held):.1f}% / " in printed


def test_a_bundle_that_cannot_align_is_refused(
    bench: types.ModuleType, whisper_bundle: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--model", str(whisper_bundle), "--manifest", str(SEEN)])
    error = capsys.readouterr().err
    assert f"--aligner {whisper_bundle} cannot time word ends" in error
    assert "a CTC head" in error and "full-attention Whisper teacher" in error
    with pytest.raises(SystemExit):
        bench.main(["--model", str(MODEL), "--aligner", str(MODEL), "--manifest", str(SEEN)])
    assert "the Whisper front end (it has 'fbank')" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--chunk-ms", "0"], "--chunk-ms must be positive"),
        (["--manifest", "/nonexistent.jsonl"], "no such file"),
        (["--model", f"{MODEL}:three-pass"], "unknown suffix :three-pass"),
        (["--model", f"{MODEL}:two-pass"], "two-pass finals need the full-attention"),
    ],
)
def test_bad_inputs_are_parser_errors(
    bench: types.ModuleType,
    ctc_bundle: Path,
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = {"--model": str(ctc_bundle), "--manifest": str(SEEN)}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    argv = [*(x for flag, value in base.items() for x in (flag, value)), "--aligner"]
    with pytest.raises(SystemExit):
        bench.main([*argv, str(ctc_bundle)])
    assert message in capsys.readouterr().err
