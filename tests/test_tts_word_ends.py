"""bench/experiments/tts_word_ends.py: word ends from Kokoro's phoneme timings."""

from __future__ import annotations

import numpy as np
import pytest

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


def test_the_audible_end_is_where_the_last_loud_frame_ends() -> None:
    probe = load_bench("experiments/tts_word_ends")
    rate = 16000
    samples = np.zeros(rate, np.float32)
    samples[1600:8000] = 0.5  # 0.1-0.5 s loud
    samples[8000:9600] = 0.5 * 10 ** (-20 / 20)  # 0.5-0.6 s at -20 dB: audible
    samples[9600:12800] = 0.5 * 10 ** (-40 / 20)  # 0.6-0.8 s at -40 dB: the decay
    assert probe.audible_end(samples) == pytest.approx(0.6)
    assert probe.audible_end(samples, floor_db=-50) == pytest.approx(0.8)


def test_the_speller_targets_time_a_word_by_its_last_token_and_marks() -> None:
    probe = load_bench("experiments/tts_word_ends")
    pieces = [" The", " sun", "beam", ",", " I'm", " here", "."]
    ends = [10, 20, 25, 30, 40, 50, 55]  # states of 20 ms
    words, seconds = probe.target_words(pieces, ends)
    assert words == ["the", "sunbeam", "i'm", "here"]
    assert seconds == pytest.approx([0.2, 0.6, 0.8, 1.1])
