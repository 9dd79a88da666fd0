"""Tests for the synthetic corpus recipe: text normalisation, augmentation, a tiny corpus."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from training.recipes import augment, synth_corpus
from training.recipes.engines import Espeak
from training.recipes.sources import TEXT_SOURCES, Sentence, clean_pairs
from training.recipes.textnorm import cardinal, is_clean, normalize


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("I have 3 cats.", "i have three cats"),
        ("It cost $5.50 today", "it cost five dollars and fifty cents today"),
        ("Only $1 and £2", "only one dollar and two pounds"),
        ("a $3 million deal", "a three million dollars deal"),
        ("25% off", "twenty five percent off"),
        ("the 21st and 2nd and 100th", "the twenty first and second and one hundredth"),
        (
            "in 1984 and 2005 and 1900",
            "in nineteen eighty four and two thousand five and nineteen hundred",
        ),
        ("in 1905 and 2019", "in nineteen oh five and two thousand nineteen"),
        ("pi is 3.14", "pi is three point one four"),
        ("1,250,000 people", "one million two hundred fifty thousand people"),
        ("the 1960s and the 80s", "the nineteen sixties and the eighties"),
        ("at 10:30 or 9:05", "at ten thirty or nine oh five"),
        ("Salt & pepper + 2", "salt and pepper plus two"),
        ("It's -7 outside", "it's minus seven outside"),
        ('"Well-known," she said; OK?', "well known she said ok"),
        ("a 101 dalmatians", "a one hundred one dalmatians"),
    ],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("sentence", "keep"),
    [
        ("The quick brown fox jumps over the lazy dog.", True),
        ("It cost $5 in 1984.", True),
        ("Too short.", False),
        (" ".join(["word"] * 21), False),
        ("The NASA rocket flew high.", False),
        ("Mr. Smith went to town today.", False),
        ("See http://example.com for more.", False),
        ("Q: What is it that you want?", False),
        ("What the fuck is going on here?", False),
        ("The B52 bomber flew over us.", False),
        ("Caf\u00e9 au lait is nice today.", False),
    ],
)
def test_is_clean(sentence: str, keep: bool) -> None:
    assert is_clean(sentence) is keep


def test_clean_pairs_dedupe_and_alphabet() -> None:
    pairs = clean_pairs(["I paid $5 for it.", "i paid five dollars for it", "Bad Q: no way here"])
    assert pairs == [("I paid five dollars for it.", "i paid five dollars for it")]
    assert set(pairs[0][1]) <= set("abcdefghijklmnopqrstuvwxyz' ")


def tone(seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(seconds * augment.RATE)) / augment.RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(
        np.float32
    )


@pytest.mark.parametrize("color", ["white", "pink", "brown"])
@pytest.mark.parametrize("snr", [5.0, 17.5, 30.0])
def test_noise_hits_snr(color: str, snr: float) -> None:
    x = tone()
    y = augment.add_noise(x, snr, color, np.random.default_rng(1))
    measured = 10 * np.log10(augment.power(x) / augment.power(y - x))
    assert len(y) == len(x) and y.dtype == np.float32
    assert abs(measured - snr) < 0.5


def test_length_preserving_ops() -> None:
    x = tone()
    rng = np.random.default_rng(0)
    outputs = [
        augment.reverberate(x, augment.synthetic_rir(0.5, rng)),
        augment.band_limit(x, 300, 3400),
        augment.telephone(x, mulaw=True),
        augment.telephone(x, mulaw=False),
        augment.gain(x, -6.0),
    ]
    for y in outputs:
        assert y.shape == x.shape and y.dtype == np.float32
    assert np.isclose(augment.power(outputs[0]), augment.power(x), rtol=1e-3)
    assert np.allclose(outputs[-1], x * 10 ** (-6 / 20), atol=1e-6)
    spectrum = np.abs(
        np.fft.rfft(augment.band_limit(augment.colored_noise(16000, "white", rng), 300, 3400))
    )
    assert spectrum[5000:].max() < 1e-3 * spectrum[500:3000].max()


@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_speed_changes_length_by_factor(factor: float) -> None:
    x = tone()
    assert abs(len(augment.speed(x, factor)) - len(x) / factor) <= 2


def test_plan_and_apply_are_reproducible() -> None:
    ops = augment.plan_augmentation(random.Random(3), rirs=[])
    assert ops and ops == augment.plan_augmentation(random.Random(3), rirs=[])
    x = tone()
    assert np.array_equal(augment.apply(x, ops, seed=9), augment.apply(x, ops, seed=9))


PAIRS = [
    Sentence(
        f"Sentence number {w} is spoken here.", f"sentence number {w} is spoken here", "fortune"
    )
    for w in "one two three four five six seven eight nine ten eleven twelve".split()
]


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_tiny_corpus_splits_and_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synth_corpus, "load_text", lambda names, seed: PAIRS)
    calls: list[int] = []
    original = Espeak.synthesize

    def counting(self: Espeak, voice: str, items: list) -> list:
        calls.append(len(items))
        return original(self, voice, items)

    monkeypatch.setattr(Espeak, "synthesize", counting)
    argv = ["--out", str(tmp_path), "--engines", "espeak", "--hours", "0.008", "--test-size", "2"]
    argv += ["--dev-size", "3"]
    assert synth_corpus.main(argv) == 0
    made = sum(calls)
    assert made >= 10

    manifests = {
        split: [json.loads(line) for line in (tmp_path / f"{split}.jsonl").read_text().splitlines()]
        for split in synth_corpus.SPLITS
    }
    assert [len(manifests[s]) for s in synth_corpus.SPLITS[1:]] == [3, 2, 2]
    assert not (tmp_path / f"{synth_corpus.SHORT}.jsonl").exists(), "default text: no new split"
    for split, lines in manifests.items():
        for line in lines:
            assert set(synth_corpus.MANIFEST_KEYS) <= set(line)
            data, rate = sf.read(tmp_path / line["audio"], dtype="int16")
            info = sf.info(tmp_path / line["audio"])
            assert (rate, info.channels, info.subtype) == (16000, 1, "PCM_16")
            assert abs(len(data) / rate - line["duration"]) < 1e-3
            held = synth_corpus.is_held_out(line["engine"], line["voice"])
            assert held == (split == "test_unseen_voices")
            if split != "train":
                assert line["aug"] == []
    train_text = {line["text"] for line in manifests["train"]}
    seen = {line["text"] for line in manifests["test_seen_voices"]}
    unseen = {line["text"] for line in manifests["test_unseen_voices"]}
    dev = {line["text"] for line in manifests["dev"]}
    texts = [train_text, dev, seen, unseen]
    assert all(not (a & b) for i, a in enumerate(texts) for b in texts[i + 1 :])

    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.wav")}
    assert synth_corpus.main(argv) == 0
    assert sum(calls) == made, "a rerun must not synthesise finished utterances again"
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.wav")} == mtimes
    assert (tmp_path / "train.jsonl").read_text().count("\n") == len(manifests["train"])


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_interrupted_corpus_has_manifests_of_what_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corpus still being made (or killed) is usable as far as it got."""
    monkeypatch.setattr(synth_corpus, "load_text", lambda names, seed: PAIRS)
    monkeypatch.setattr(synth_corpus, "MANIFEST_EVERY_S", 0)
    original, calls = Espeak.synthesize, []

    def interrupted(self: Espeak, voice: str, items: list) -> list:
        calls.append(voice)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return original(self, voice, items)

    monkeypatch.setattr(Espeak, "synthesize", interrupted)
    argv = ["--out", str(tmp_path), "--engines", "espeak", "--hours", "0.008", "--test-size", "2"]
    with pytest.raises(KeyboardInterrupt):
        synth_corpus.main([*argv, "--dev-size", "3"])
    journal = [json.loads(line) for line in (tmp_path / synth_corpus.JOURNAL).open()]
    listed = [
        json.loads(line)["audio"]
        for split in synth_corpus.SPLITS
        if (tmp_path / f"{split}.jsonl").exists()
        for line in (tmp_path / f"{split}.jsonl").open()
    ]
    assert journal and sorted(listed) == sorted(record["audio"] for record in journal)
    assert all((tmp_path / audio).exists() for audio in listed)


# Plan ids of PAIRS with these arguments, captured from the corpus code before --text
# existed: a corpus with the default text must keep its plan bit for bit.
PINNED_VOICES = {
    "espeak": ["en-us+m1", "en-us+m4", "en-gb+f1", "en-gb+f2"],
    "flite": ["kal16", "rms", "slt"],
}
PINNED_ARGS = ({"espeak": 0.6, "flite": 0.4}, 0.01, 2, 3, 7, 0.8, ["rir0.wav", "rir1.wav"])
PINNED_IDS = [
    "test_seen_voices-espeak-en-us+m1-0e88855df3ed",
    "test_seen_voices-flite-slt-22a30bbf3176",
    "test_unseen_voices-espeak-en-gb+f2-052645e24559",
    "test_unseen_voices-flite-rms-4a8251479ea3",
    "dev-espeak-en-gb+f1-5dde5f089f8f",
    "dev-flite-kal16-5734537a514b",
    "dev-espeak-en-us+m1-deb30945c3a5",
    "train-espeak-en-gb+f1-7ca03707f880",
    "train-flite-kal16-749b3cc8f712",
    "train-espeak-en-gb+f1-943feb47d9fb",
    "train-flite-slt-0df79b8c2d3b",
    "train-espeak-en-us+m1-6bfb4a238aa4",
    "train-flite-kal16-cd9e79b20395",
    "train-espeak-en-gb+f1-bda1b219459a",
    "train-espeak-en-gb+f1-ac54cb015003",
    "train-flite-kal16-16bf7766b14a",
    "train-espeak-en-gb+f1-6fbad2fbbe2b",
]


def test_default_text_plan_is_unchanged() -> None:
    args = synth_corpus.build_parser().parse_args(["--out", "x"])
    assert args.text == ["fortune", "wordnet"]
    names, shares = synth_corpus.parse_text(args.text)
    assert (names, shares) == (["fortune", "wordnet"], None)
    short_size = args.test_size if synth_corpus.SHORT_SOURCE in names else 0
    assert short_size == 0
    plan = synth_corpus.plan_corpus(PAIRS, PINNED_VOICES, *PINNED_ARGS, shares, short_size)
    assert [u.id for u in plan] == PINNED_IDS


def test_parse_text() -> None:
    parse = synth_corpus.parse_text
    assert parse(["austen", "everyday"]) == (["austen", "everyday"], None)
    assert parse(["fortune=1", "everyday=0.25"]) == (
        ["fortune", "everyday"],
        {"fortune": 1.0, "everyday": 0.25},
    )
    for bad in (["fortune", "everyday=0.2"], ["harvard"], ["austen=0"], ["austen", "austen"]):
        with pytest.raises(ValueError):
            parse(bad)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--engines", "espeak=0"], "--engines: 'espeak=0': the share after '=' must be a number"),
        (["--engines", "espeak=abc"], "--engines: 'espeak=abc': the share after '='"),
        (["--engines", "espeak=-1"], "--engines: 'espeak=-1': the share after '='"),
        (["--engines", "espeak=nan"], "--engines: 'espeak=nan': the share after '='"),
        (["--engines", "espeak", "espeak=2"], "--engines names 'espeak' twice"),
        (["--engines", "nope"], "--engines: unknown 'nope'; choose from espeak"),
        (["--text", "fortune=0.5", "wordnet=-1"], "--text: 'wordnet=-1': the share after '='"),
        (["--text", "austen=x"], "--text: 'austen=x': the share after '='"),
        (["--test-size", "-3"], "argument --test-size: must be 0 or more, got -3"),
        (["--dev-size", "-1"], "argument --dev-size: must be 0 or more, got -1"),
    ],
)
def test_bad_options_are_refused_before_setup(
    option: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """A usage error (exit 2) naming the option, before engines are checked or installed
    and before text is loaded; nothing is written."""

    def too_early(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("setup or text loading ran before the options were checked")

    monkeypatch.setattr(synth_corpus, "check_setup", too_early)
    monkeypatch.setattr(synth_corpus, "load_text", too_early)
    with pytest.raises(SystemExit) as exit_info:
        synth_corpus.main(["--out", str(tmp_path / "corpus"), *option])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and message in err, err
    assert not (tmp_path / "corpus").exists()


def number_words(n: int, start: int) -> list[str]:
    """n distinct number names from `start` on ("one thousand", "one thousand one", ...)."""
    return [cardinal(i) for i in range(start, start + n)]


def short_and_long(n_long: int = 40, n_short: int = 60) -> list[Sentence]:
    """Austen-like sentences, short everyday lines, and everyday lines of 4+ words (which are
    sentences like any other source's)."""
    long = [
        Sentence(f"A long sentence {w} here.", f"a long sentence {w} here", "austen")
        for w in number_words(n_long, 0)
    ]
    short = [Sentence(f"{w.capitalize()}.", w, "everyday") for w in number_words(n_short, 3000)]
    longer = [
        Sentence(f"Call {w} at noon.", f"call {w} at noon", "everyday")
        for w in number_words(10, 7000)
    ]
    return long + short + longer


def plan_text(pairs: list[Sentence], **options: Any) -> list[synth_corpus.Utterance]:
    """A plan over two engines' voices: 4 per test split, 5 dev, what is left of 0.01 h train."""
    defaults = {"hours": 0.01, "test_size": 4, "dev_size": 5, "seed": 3, "aug_prob": 0.8}
    weights = {"espeak": 0.6, "flite": 0.4}
    return synth_corpus.plan_corpus(pairs, PINNED_VOICES, weights, rirs=[], **(defaults | options))


def test_test_short_holds_short_everyday_lines_never_in_train() -> None:
    pairs = short_and_long()
    plan = plan_text(pairs, short_size=4)
    by_split: dict[str, list] = {}
    for u in plan:
        by_split.setdefault(u.split, []).append(u)
    short = by_split[synth_corpus.SHORT]
    assert len(short) == 4
    source = {p.text: p for p in pairs}
    for u in short:
        assert source[u.text].source == "everyday" and 1 <= len(u.text.split()) <= 3
        assert u.aug == [] and not synth_corpus.is_held_out(u.engine, u.voice)
    train = {u.text for u in by_split["train"]}
    assert not {u.text for u in short} & train
    for split in ("test_seen_voices", "test_unseen_voices", "dev"):
        assert all(not synth_corpus.is_short(source[u.text]) for u in by_split[split])
    # the short lines not held out are train material
    assert any(synth_corpus.is_short(source[t]) for t in train)
    # and without short_size there is no test_short, whatever the text
    assert synth_corpus.SHORT not in {u.split for u in plan_text(pairs)}


UNSEEN_DEV_VOICES = {  # PINNED_VOICES and a few of DEV_HELD_OUT
    "espeak": [*PINNED_VOICES["espeak"], "en-us+m3", "en-gb+klatt2"],
    "flite": [*PINNED_VOICES["flite"], "awb"],
}


def unseen_dev_plan(unseen_dev_size: int) -> list[synth_corpus.Utterance]:
    weights = {"espeak": 0.6, "flite": 0.4}
    options = {"hours": 0.02, "test_size": 4, "dev_size": 5, "seed": 3, "aug_prob": 0.8}
    pairs = short_and_long()
    return synth_corpus.plan_corpus(
        pairs, UNSEEN_DEV_VOICES, weights, rirs=[], unseen_dev_size=unseen_dev_size, **options
    )


def test_unseen_dev_split_has_voices_no_other_split_speaks() -> None:
    """dev_unseen_voices speaks only DEV_HELD_OUT voices, which no other split then speaks,
    and sentences of its own; without it a seed draws every split as before it existed."""
    by_split: dict[str, list[synth_corpus.Utterance]] = {}
    for u in unseen_dev_plan(6):
        by_split.setdefault(u.split, []).append(u)
    dev_voices = by_split[synth_corpus.UNSEEN_DEV]
    assert len(dev_voices) == 6 and all(u.aug == [] for u in dev_voices)
    assert {u.engine for u in dev_voices} == {"espeak", "flite"}
    for split, items in by_split.items():
        held = [
            synth_corpus.is_held_out(u.engine, u.voice, synth_corpus.DEV_HELD_OUT) for u in items
        ]
        assert all(held) if split == synth_corpus.UNSEEN_DEV else not any(held), split
    assert all(synth_corpus.is_held_out(u.engine, u.voice) for u in by_split["test_unseen_voices"])
    texts = {split: {u.text for u in items} for split, items in by_split.items()}
    others = set().union(*(t for split, t in texts.items() if split != synth_corpus.UNSEEN_DEV))
    assert not texts[synth_corpus.UNSEEN_DEV] & others
    # without the split those voices speak train and dev as any other
    plain = unseen_dev_plan(0)
    assert synth_corpus.UNSEEN_DEV not in {u.split for u in plain}
    assert any(
        synth_corpus.is_held_out(u.engine, u.voice, synth_corpus.DEV_HELD_OUT) for u in plain
    )
    pinned = synth_corpus.plan_corpus(PAIRS, PINNED_VOICES, *PINNED_ARGS, unseen_dev_size=0)
    assert [u.id for u in pinned] == PINNED_IDS


def test_unseen_dev_manifest_is_written_when_planned(tmp_path: Path) -> None:
    def written(plan: list[synth_corpus.Utterance], out: Path) -> list[str]:
        out.mkdir()
        done = {
            u.id: {"id": u.id, "audio": u.audio, "text": u.text, "duration": 1.0}
            | {"engine": u.engine, "voice": u.voice, "params": u.params, "aug": u.aug}
            for u in plan
        }
        synth_corpus.write_manifests(out, plan, done)
        return sorted(path.stem for path in out.glob("*.jsonl"))

    plan = unseen_dev_plan(3)
    assert written(plan, tmp_path / "with") == sorted(
        [*synth_corpus.SPLITS, synth_corpus.UNSEEN_DEV]
    )
    lines = (tmp_path / "with" / f"{synth_corpus.UNSEEN_DEV}.jsonl").read_text().splitlines()
    expected = [u.id for u in plan if u.split == synth_corpus.UNSEEN_DEV]
    assert [json.loads(line)["id"] for line in lines] == expected
    assert written(unseen_dev_plan(0), tmp_path / "without") == sorted(synth_corpus.SPLITS)


def test_held_out_splits_are_synthesized_first() -> None:
    plan = plan_text(short_and_long(), short_size=4)
    groups = synth_corpus.batches(plan, seed=5)
    order = [u for group in groups for u in group]
    assert sorted(u.id for u in order) == sorted(u.id for u in plan)
    splits = [u.split for u in order]
    first_train = splits.index("train")
    assert set(splits[:first_train]) == {*synth_corpus.SPLITS[1:], synth_corpus.SHORT}
    assert set(splits[first_train:]) == {"train"}
    assert all(len({(u.engine, u.voice) for u in group}) == 1 for group in groups)
    assert groups == synth_corpus.batches(plan, seed=5)


def test_text_shares_divide_train_audio_time() -> None:
    pairs = short_and_long(n_long=30, n_short=30)
    plan = plan_text(pairs, hours=0.5, shares={"austen": 0.25, "everyday": 0.75})
    seconds = {"austen": 0.0, "everyday": 0.0}
    source = {p.text: p.source for p in pairs}
    for u in plan:
        if u.split == "train":
            seconds[source[u.text]] += synth_corpus.estimate_seconds(u.text)
    assert seconds["everyday"] / sum(seconds.values()) == pytest.approx(0.75, abs=0.01)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_exclude_keeps_another_corpus_held_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second corpus (say, many fast voices for the decoder's words) built with --exclude
    of the first's manifests never speaks the first's held-out or spoken sentences."""
    monkeypatch.setattr(synth_corpus, "load_text", lambda names, seed: PAIRS)
    first, second = tmp_path / "first", tmp_path / "second"
    argv = ["--engines", "espeak", "--test-size", "2", "--dev-size", "2"]
    assert synth_corpus.main(["--out", str(first), "--hours", "0.004", *argv]) == 0
    manifests = sorted(str(m) for m in first.glob("*.jsonl") if m.name != synth_corpus.JOURNAL)
    argv = ["--engines", "espeak", "--test-size", "0", "--dev-size", "0", "--hours", "0.01"]
    assert synth_corpus.main(["--out", str(second), *argv, "--exclude", *manifests]) == 0

    def texts(corpus: Path, split: str) -> set[str]:
        return {json.loads(line)["text"] for line in (corpus / f"{split}.jsonl").open()}

    taken = set().union(*(texts(first, split) for split in synth_corpus.SPLITS))
    spoken = texts(second, "train")
    assert len(taken) >= 6 and spoken, (taken, spoken)
    assert not spoken & taken
    assert spoken <= {p.text for p in PAIRS}
    lm_text = set((second / synth_corpus.LM_TEXT).read_text().splitlines())
    assert not lm_text & taken
    assert all(not texts(second, split) for split in synth_corpus.SPLITS[1:])

    every = [str(m) for m in first.glob("*.jsonl")] + [str(second / "train.jsonl")]
    with pytest.raises(SystemExit, match="no sentences"):
        synth_corpus.main(["--out", str(tmp_path / "none"), *argv, "--exclude", *every])
    with pytest.raises(SystemExit, match="no such manifest: .*missing.jsonl"):
        synth_corpus.main(["--out", str(tmp_path / "none"), *argv, "--exclude", "missing.jsonl"])


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_max_words_speaks_only_short_sentences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A supplement of short utterances: --max-words 1 plans and speaks only the one-word
    lines, train and dev alike, and says so when none is left."""
    words = "alpha bravo charlie delta echo foxtrot golf hotel".split()
    pairs = PAIRS + [Sentence(f"{w.capitalize()}.", w, "everyday") for w in words]
    monkeypatch.setattr(synth_corpus, "load_text", lambda names, seed: pairs)
    argv = ["--engines", "espeak", "--test-size", "0", "--dev-size", "2", "--hours", "0.005"]
    out = tmp_path / "short"
    assert synth_corpus.main(["--out", str(out), *argv, "--max-words", "1"]) == 0
    spoken = [
        json.loads(line)["text"] for s in ("train", "dev") for line in (out / f"{s}.jsonl").open()
    ]
    assert len(spoken) > 2 and set(spoken) <= set(words), spoken
    assert json.loads((out / "plan.json").read_text())["max_words"] == 1
    with pytest.raises(SystemExit, match="--max-words must be 0"):
        synth_corpus.main(["--out", str(tmp_path / "bad"), *argv, "--max-words", "-1"])
    monkeypatch.setattr(synth_corpus, "load_text", lambda names, seed: PAIRS)
    with pytest.raises(SystemExit, match="no sentence of at most 5 words"):
        synth_corpus.main(["--out", str(tmp_path / "none"), *argv, "--max-words", "5"])


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_tiny_everyday_corpus(tmp_path: Path) -> None:
    argv = ["--out", str(tmp_path), "--engines", "espeak", "--hours", "0.01", "--text"]
    argv += ["everyday", "--test-size", "6", "--dev-size", "3", "--seed", "5"]
    assert synth_corpus.main(argv) == 0

    def read(split: str) -> list[dict]:
        return [json.loads(line) for line in (tmp_path / f"{split}.jsonl").open()]

    short, train = read(synth_corpus.SHORT), read("train")
    assert len(short) == 6 and len(read("test_seen_voices")) == 6
    assert all(1 <= len(line["text"].split()) <= 3 and line["aug"] == [] for line in short)
    assert not {line["text"] for line in short} & {line["text"] for line in train}
    lm_text = set((tmp_path / synth_corpus.LM_TEXT).read_text().splitlines())
    assert not {line["text"] for line in short} & lm_text
    for line in short:
        assert 0.2 < line["duration"] < 1.5 + synth_corpus.estimate_seconds(line["text"])


def test_missing_text_source_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absent = dataclasses.replace(TEXT_SOURCES["austen"], path=tmp_path / "absent")
    monkeypatch.setitem(TEXT_SOURCES, "austen", absent)
    with pytest.raises(SystemExit, match="--no-install-recommends r-cran-janeaustenr"):
        synth_corpus.check_setup({}, do_install=False, text=["fortune", "austen", "everyday"])
    assert TEXT_SOURCES["everyday"].missing() is None, "generated text needs nothing"


def test_journal_torn_by_a_kill_loses_no_later_record(tmp_path: Path) -> None:
    """A kill mid-append leaves half a line; the next run's records must not be glued to it."""
    records = [{"id": f"u{k}", "audio": f"wavs/u{k}.wav"} for k in range(3)]
    (tmp_path / "wavs").mkdir()
    for record in records:
        (tmp_path / record["audio"]).write_bytes(b"")
    journal = tmp_path / synth_corpus.JOURNAL
    journal.write_text(json.dumps(records[0]) + "\n" + json.dumps(records[1])[:9])
    assert list(synth_corpus.load_journal(tmp_path)) == ["u0"]
    with journal.open("a") as f:  # as the run after the kill appends its batches
        f.write(json.dumps(records[2]) + "\n")
    assert list(synth_corpus.load_journal(tmp_path)) == ["u0", "u2"]
