"""The token n-gram language model and shallow fusion: Kneser-Ney probabilities against a
hand computation, proper distributions, storage, the `asr lm` command, and a search that
follows the language model when it is weighted heavily."""

from __future__ import annotations

import json
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from asr.audio import resample
from asr.bundle import load_model
from asr.cli import main as asr_main
from asr.decoding import SegmentSearch, drain
from asr.lm import LM_FILE, TokenLM
from asr.model import EOS_ID
from tests.conftest import SENTENCES, load_speech, speech_files
from tests.test_decoding import random_memory, random_model
from tests.test_server_cli import REPO, serve_process


def test_bigram_probabilities_match_a_hand_computation() -> None:
    # Padded with end-of-sentence (1) as the start context: "1 2 3 1", "1 2 4 1", "1 2 3 1".
    lm = TokenLM.train([[2, 3], [2, 4], [2, 3]], vocab_size=6, order=2)
    # Unigram continuation counts: 2, 3, 4 follow one distinct token each, EOS two;
    # discount 3 / (3 + 2 * 1) = 0.6; the 0.48 left goes uniformly to the 5 non-blank ids.
    unigram = {2: 0.4 / 5 + 0.096, 3: 0.4 / 5 + 0.096, 4: 0.4 / 5 + 0.096, 1: 1.4 / 5 + 0.096}
    unigram[5] = 0.096
    # Bigram counts 3, 2, 1, 2, 1: discount 2 / (2 + 2 * 2) = 1/3.
    after_2 = np.exp(lm.log_probs([2]))
    assert float(after_2[3]) == pytest.approx((2 - 1 / 3) / 3 + (2 / 9) * unigram[3], abs=1e-6)
    assert float(after_2[4]) == pytest.approx((1 - 1 / 3) / 3 + (2 / 9) * unigram[4], abs=1e-6)
    assert float(after_2[5]) == pytest.approx((2 / 9) * unigram[5], abs=1e-6)
    start = np.exp(lm.log_probs([]))
    assert float(start[2]) == pytest.approx((3 - 1 / 3) / 3 + (1 / 9) * unigram[2], abs=1e-6)
    unseen = np.exp(lm.log_probs([5]))  # a context never seen: the unigram distribution
    assert [float(unseen[i]) for i in (1, 2, 5)] == pytest.approx(
        [unigram[1], unigram[2], unigram[5]], abs=1e-6
    )
    assert float(unseen[0]) == 0.0  # blank is never predicted


def test_distributions_sum_to_one_and_survive_a_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    sequences = [rng.integers(2, 30, size=rng.integers(1, 12)).tolist() for _ in range(300)]
    lm = TokenLM.train(sequences, vocab_size=30, order=4)
    lm.save(tmp_path / LM_FILE)
    loaded = TokenLM.load(tmp_path / LM_FILE)
    for history in ([], sequences[0][:3], sequences[5], [29, 29, 29], [2]):
        probs = np.exp(lm.log_probs(history))
        assert float(probs.sum()) == pytest.approx(1.0, abs=1e-5)
        assert np.array_equal(loaded.log_probs(history), lm.log_probs(history))
    assert loaded.score(sequences[0]) == pytest.approx(lm.score(sequences[0]))
    # Seen sentences are likelier than the same tokens shuffled.
    assert lm.score(sequences[0]) > lm.score(sequences[0][::-1]) or len(set(sequences[0])) == 1


def test_bad_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="token id 30"):
        TokenLM.train([[2, 30]], vocab_size=30, order=3)
    with pytest.raises(ValueError, match="token id 1"):
        TokenLM.train([[2, EOS_ID]], vocab_size=30, order=3)
    with pytest.raises(ValueError, match="no text"):
        TokenLM.train([], vocab_size=30, order=3)
    with pytest.raises(ValueError, match="order"):
        TokenLM.train([[2]], vocab_size=30, order=0)
    with pytest.raises(ValueError, match="lower order"):  # contexts past 64-bit keys
        TokenLM.train([[2, 3]], vocab_size=70_000, order=5)
    assert TokenLM.train([[2, 3]], vocab_size=70_000, order=4).order == 4
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not an archive")
    with pytest.raises(ValueError, match="not a token language model"):
        TokenLM.load(junk)


@torch.no_grad()
def test_a_heavily_weighted_lm_decides_the_tokens() -> None:
    model, config = random_model("monotonic")
    lm = TokenLM.train([[5, 6, 7]] * 20, vocab_size=40, order=3)
    memory = random_memory(200)

    def first_segment(weight: float, beam: int) -> list[int]:
        config.decode.lm_weight, config.decode.beam_size = weight, beam
        search = SegmentSearch(model, config.decode, lm)
        search.append(memory)
        return drain(search)[0].tokens

    assert first_segment(0.0, 1) != [5, 6, 7]  # the random model alone says something else
    assert first_segment(50.0, 1) == [5, 6, 7]
    assert first_segment(50.0, 3) == [5, 6, 7]
    config.decode.lm_weight = 0.5
    with pytest.raises(ValueError, match="needs a language model"):
        SegmentSearch(model, config.decode)


def test_asr_lm_writes_a_model_the_bundle_loads_and_excludes_test_text(
    tiny_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = Path(shutil.copytree(tiny_bundle, tmp_path / "bundle"))
    text = tmp_path / "text.txt"
    text.write_text("".join(f"{s.upper()}\n\n" for s in SENTENCES))
    test = tmp_path / "test.jsonl"
    test.write_text(
        json.dumps({"id": "t", "audio": "x.wav", "duration": 1.0, "text": SENTENCES[0]}) + "\n"
    )
    assert load_model(bundle).lm_file is None
    assert (
        asr_main(
            [
                "lm",
                "--model",
                str(bundle),
                "--text",
                str(text),
                "--exclude",
                str(test),
                "--order",
                "3",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"from {len(SENTENCES) - 1} sentences (1 excluded)" in out
    recognizer = load_model(bundle)
    assert recognizer.lm_file == bundle / LM_FILE
    assert recognizer.lm is None  # greedy decoding does not read it
    recognizer.set_search(lm_weight=0.3)
    assert recognizer.lm is not None and recognizer.lm.order == 3
    tokens = recognizer.tokenizer.encode(SENTENCES[1])
    kept, dropped = (
        recognizer.lm.score(tokens),
        recognizer.lm.score(recognizer.tokenizer.encode(SENTENCES[0])),
    )
    assert kept / (len(tokens) + 1) > dropped / (len(recognizer.tokenizer.encode(SENTENCES[0])) + 1)

    # A weight the bundle cannot honour fails at load, naming the missing file.
    (bundle / LM_FILE).unlink()
    config = json.loads((bundle / "config.json").read_text())
    config["decode"]["lm_weight"] = 0.3
    (bundle / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="no language model"):
        load_model(bundle)
    assert asr_main(["lm", "--model", str(bundle)]) == 2
    assert "--manifest and/or --text" in capsys.readouterr().err


def test_serve_fuses_the_bundle_lm_when_asked(
    tiny_bundle: Path, speech_dir: Path, tmp_path: Path
) -> None:
    """A real `asr serve` with --beam and --lm-weight: so heavy a weight that every segment
    of real speech is the only sentence the language model knows."""
    bundle = Path(shutil.copytree(tiny_bundle, tmp_path / "bundle"))
    recognizer = load_model(bundle)
    sentence = SENTENCES[2]
    TokenLM.train([recognizer.tokenizer.encode(sentence)] * 10, 40, 4).save(bundle / LM_FILE)
    samples, rate = load_speech(speech_files(speech_dir)[0][0])
    audio = resample(samples, rate, 16000).astype("<f4").tobytes()
    command = [sys.executable, "-m", "asr.cli", "serve", "--model", str(bundle)]
    command += ["--workers", "1", "--beam", "2", "--lm-weight", "50"]
    with serve_process(command, REPO) as served:
        request = urllib.request.Request(
            f"http://127.0.0.1:{served.port}/v1/transcribe?sample_rate=16000&encoding=f32le",
            data=audio,
            headers={"Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            result = json.loads(response.read())
    finals = [s["text"] for s in result["segments"] if s["type"] == "final"]
    assert finals and set(finals) == {sentence}  # each segment restarts the sentence
    assert recognizer.transcribe(samples, rate) != sentence  # the bundle alone says otherwise
