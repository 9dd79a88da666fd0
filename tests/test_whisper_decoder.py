"""Whisper's text decoder in torch against CTranslate2's own, and its memories cut short."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from asr.audio import read_audio
from asr.scoring import score
from asr.whisper_decoder import TokenRules, WhisperTextDecoder, attention, loop_start
from asr.whisper_encoder import WhisperEncoder, load_encoder
from asr.whisper_features import SAMPLE_RATE, log_mel
from training.ctranslate2_file import read_ct2_model
from training.recipes.textnorm import normalize

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "tests" / "data" / "heldout" / "test_seen_voices.jsonl"
PROMPT = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]


@pytest.fixture(scope="module")
def decoder(ct2_whisper_dir: Path) -> WhisperTextDecoder:
    return WhisperTextDecoder.from_ctranslate2(
        read_ct2_model(ct2_whisper_dir / "model.bin").variables
    )


@pytest.fixture(scope="module")
def teacher() -> WhisperEncoder:
    return load_encoder(REPO / "models" / "whisper-base")


def _window_states(teacher: WhisperEncoder, samples: np.ndarray) -> np.ndarray:
    """The teacher's states of a 30 s window holding ``samples``, as Whisper encodes it."""
    window = np.zeros(30 * SAMPLE_RATE, dtype=np.float32)
    window[: len(samples)] = samples
    with torch.no_grad():
        return teacher(torch.from_numpy(log_mel(window, floor=None))[None])[0][0].numpy()


def _utterances(count: int) -> list[tuple[np.ndarray, str]]:
    rows = [json.loads(line) for line in MANIFEST.read_text().splitlines()[:count]]
    return [(read_audio(MANIFEST.parent / r["audio"])[0], r["text"]) for r in rows]


def test_greedy_transcripts_match_ctranslate2_token_for_token(
    decoder: WhisperTextDecoder, teacher: WhisperEncoder, ct2_whisper_dir: Path
) -> None:
    """Our port reads the teacher's states to the tokens CTranslate2's decoder picks, and
    those spell the held-out sentences."""
    import ctranslate2
    from tokenizers import Tokenizer

    model = ctranslate2.models.Whisper(str(ct2_whisper_dir), device="cpu", compute_type="float32")
    tokenizer = Tokenizer.from_file(str(ct2_whisper_dir / "tokenizer.json"))
    prompt = [tokenizer.token_to_id(t) for t in PROMPT]
    end = tokenizer.token_to_id("<|endoftext|>")
    refs, hyps = [], []
    for samples, text in _utterances(4):
        states = _window_states(teacher, samples)
        features = ctranslate2.StorageView.from_array(np.ascontiguousarray(states[None]))
        reference = model.generate(features, [PROMPT], beam_size=1)[0].sequences_ids[0]
        ours = decoder.greedy(decoder.memory(torch.from_numpy(states)[None]), prompt, end)
        assert ours == reference
        refs.append(text)
        hyps.append(normalize(tokenizer.decode(ours)))
    # measured: 3 errors in 25 words ("a puffing kind of man's", "brush on" for "brushing")
    assert score(["0", "1", "2", "3"], refs, hyps)[0]["wer"]["rate"] < 0.2


def test_a_cut_memory_reads_the_states_before_the_cut_and_silence_after(
    decoder: WhisperTextDecoder, teacher: WhisperEncoder
) -> None:
    samples, _ = _utterances(1)[0]
    speech = decoder.memory(torch.from_numpy(_window_states(teacher, samples))[None])
    silence = decoder.memory(torch.from_numpy(_window_states(teacher, samples[:0]))[None])
    ends = torch.tensor([0, 37, 1500])
    cut = WhisperTextDecoder.cut(speech, silence, ends)
    for (k, v), (speech_k, speech_v), (silent_k, silent_v) in zip(cut, speech, silence):
        assert k.shape == (3, *speech_k.shape[1:])
        assert torch.equal(k[0], silent_k[0]) and torch.equal(v[0], silent_v[0])
        assert torch.equal(k[2], speech_k[0]) and torch.equal(v[2], speech_v[0])
        assert torch.equal(k[1, :, :37], speech_k[0, :, :37])
        assert torch.equal(v[1, :, 37:], silent_v[0, :, 37:])
    tokens = torch.tensor([[50258, 50259, 50359, 50363, 440]] * 3)
    with torch.no_grad():
        together = decoder(tokens, cut)
        alone = decoder(tokens[:1], [(k[1:2], v[1:2]) for k, v in cut])
    torch.testing.assert_close(together[1:2], alone, rtol=0, atol=1e-5)


def test_a_loop_is_kept_once_and_ordinary_repeats_are_no_loop() -> None:
    assert loop_start([7, 1, 2, 3, 3, 3, 3]) == 4  # "3" four times: keep one
    assert loop_start([7, 5, 6, 5, 6, 5, 6, 5, 6]) == 3  # "5 6" four times
    assert loop_start([9, 8, *[1, 2, 3] * 4]) == 5
    assert loop_start([7, 3, 3, 3]) is None  # "no no no"
    assert loop_start([7, 5, 6, 5, 6]) is None  # "command command"
    assert loop_start(list(range(30))) is None
    assert loop_start([99, *range(14)] * 4) == 15  # a looping sentence
    assert loop_start([*range(31)] * 4) is None  # longer than ``longest``
    # with a shortest span of 8 tokens, a word said four times is speech; eight is a loop
    assert loop_start([5, *[9] * 4], shortest_span=8) is None
    assert loop_start([5, *[9] * 8], shortest_span=8) == 2
    assert loop_start([5, *[1, 2] * 4], shortest_span=8) == 3


def test_token_rules_as_masks() -> None:
    """Never written: the rules' tokens and every special after the end (the end itself may
    be); never written first: those and the rules' begin tokens."""
    rules = TokenRules(suppress=(1, 3), suppress_begin=(0, 5), alignment_heads=())
    suppress, suppress_begin = rules.masks(size=9, text_tokens=5)
    assert suppress.tolist() == [False, True, False, True, False, False, True, True, True]
    assert suppress_begin.tolist() == [True, True, False, True, False, True, True, True, True]


@pytest.mark.parametrize("queries", [1, 5])
def test_bfloat16_attention_matches_float32_with_and_without_a_mask(queries: int) -> None:
    """The two products that replace torch's fused kernel in bfloat16 attend as float32's
    fused kernel does: over every key, and with keys hidden by a mask (a cut memory's,
    or the causal one of several new tokens)."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 8, n, 64, generator=gen) for n in (queries, 300, 300))
    mask = torch.rand(2, 1, queries, 300, generator=gen) > 0.3
    for m in (None, mask):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
        got = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), m)
        assert got.dtype == torch.bfloat16 and got.shape == want.shape
        torch.testing.assert_close(got.float(), want, atol=0.02, rtol=0.02)
        assert not torch.allclose(got.float(), want, atol=1e-6)  # it ran in bfloat16
    hidden = torch.zeros_like(mask)
    hidden[..., :10] = True  # only the first ten keys
    got = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), hidden)
    want = torch.nn.functional.scaled_dot_product_attention(q, k[:, :, :10], v[:, :, :10])
    torch.testing.assert_close(got.float(), want, atol=0.02, rtol=0.02)
