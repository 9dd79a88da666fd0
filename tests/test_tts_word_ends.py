"""bench/experiments/tts_word_ends.py: word ends from Kokoro's phoneme timings."""

from __future__ import annotations

from tests.conftest import load_bench


def test_a_word_ends_with_its_last_sounding_phoneme() -> None:
    probe = load_bench("experiments/tts_word_ends")
    # "hi, you." as Kokoro times it: marks and spaces take time but end no word
    timed = [("h", 0.1), ("ˈa", 0.2), ("ɪ", 0.3), (",", 0.35), (" ", 0.4), ("j", 0.5)]
    timed += [("uː", 0.7), (".", 0.9)]
    assert probe.word_ends(timed) == [0.3, 0.7]


def test_spaces_and_marks_alone_make_no_word() -> None:
    probe = load_bench("experiments/tts_word_ends")
    assert probe.word_ends([(" ", 0.1), (",", 0.2), (" ", 0.3), ("a", 0.4), (" ", 0.5)]) == [0.4]
    assert probe.word_ends([]) == []
