"""bench/experiments/speller_waits.py: each boundary a token waited through, by reason, on
the bundled model's streaming speller and a held-out synthetic clip."""

from __future__ import annotations

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
    at_end = bench.waits(model, AtEnd(), states)
    plain = Speller(model, AtEnd())
    plain.accept(states[:-1])
    plain.finish(states[-1:])
    assert len(at_end) == len(plain.tokens) > 3
    assert sum(at_end[0].values()) == (len(states) - 1) // 16 and not at_end[0][DECODER]
    assert at_end[0][SETTLED] > 0  # the decoder read the first word long before the close
    assert not any(sum(c.values()) for c in at_end[1:])
    at_once = bench.waits(model, Immediate(), states)
    assert not any(c[SETTLED] or c[ELSEWHERE] for c in at_once)
    assert any(c[DECODER] for c in at_once)  # a memory cut mid-word: the decoder waits
