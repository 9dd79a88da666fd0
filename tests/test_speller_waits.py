"""bench/experiments/speller_waits.py: each boundary a token waited through, by reason, on
the bundled model's streaming speller and a held-out synthetic clip."""

from __future__ import annotations

from collections import Counter

import numpy as np

from asr.bundle import load_model
from asr.speller import AtEnd, Immediate, Speller
from tests.conftest import load_bench
from tests.test_speller import arrivals, heldout

SETTLED, ELSEWHERE, DECODER = (
    "energy no, decoder settled",
    "energy no, decoder elsewhere",
    "decoder waits",
)


def test_waits_are_the_policys_or_the_decoders() -> None:
    """Recording the asks changes nothing the speller says. A policy that never says yes
    before the close makes the first token wait through every chunk end, its policy's
    doing, and the rest wait for none; one that always says yes leaves only the decoder's
    waits, where it read the end of text."""
    bench = load_bench("experiments/speller_waits")
    recognizer = load_model(bench.ROOT / "models" / "default")
    model, _ = recognizer.speller()
    assert recognizer.frontend is not None
    samples, _ = heldout("test_seen_voices", 0)
    states = np.concatenate(arrivals(recognizer.frontend, samples, [len(samples)]))
    spelled = bench.waits(model, AtEnd(), states)
    at_end = spelled.counts()
    plain = Speller(model, AtEnd())
    plain.accept(states[:-1])
    plain.finish(states[-1:])
    assert spelled.tokens == plain.tokens and len(at_end) == len(plain.tokens) > 3
    assert sum(at_end[0].values()) == (len(states) - 1) // 16 and not at_end[0][DECODER]
    assert at_end[0][SETTLED] > 0  # the decoder read the first word long before the close
    assert not any(sum(c.values()) for c in at_end[1:])
    at_once = bench.waits(model, Immediate(), states).counts()
    assert not any(c[SETTLED] or c[ELSEWHERE] for c in at_once)
    assert any(c[DECODER] for c in at_once)  # a memory cut mid-word: the decoder waits


def test_late_waits_are_those_past_the_words_end() -> None:
    """A right word's last token counts the boundaries it waited through after the word's
    end only ("the" ends at 0.4 s: not the one at 0.32 s; "bureau" at 1.2 s: not 0.96 s);
    a word the speller did not say ("sense" read as "census") counts nothing."""
    bench = load_bench("experiments/speller_waits")
    recognizer = load_model(bench.ROOT / "models" / "default")
    model, _ = recognizer.speller()
    tokens = model.vocabulary.tokenizer.encode(" The census bureau.", add_special_tokens=False).ids
    assert [w for w, _ in bench.word_final_tokens(model, tokens)] == ["the", "census", "bureau"]
    last = [k for _, k in bench.word_final_tokens(model, tokens)]
    waits = [[] for _ in tokens]
    waits[last[0]] = [(16, SETTLED), (32, SETTLED), (48, ELSEWHERE)]  # 0.32, 0.64, 0.96 s
    waits[last[2]] = [(48, SETTLED), (64, DECODER)]  # 0.96, 1.28 s
    spelled = bench.Spelled(tokens, waits)
    late = bench.late_waits(model, spelled, ["the", "sense", "bureau"], [0.4, 1.0, 1.2])
    assert late == [Counter({SETTLED: 1, ELSEWHERE: 1}), Counter({DECODER: 1})]
