"""bench/monotonic_speller.py's hard scan and its training targets, on shipped held-out
audio: a policy that never fires says at the end what Whisper's decoder says offline, one
that always fires says each token as soon as Whisper's decoder would say anything, and P
holds Whisper's log-probabilities of the tokens under each cut."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from asr.bundle import load_model
from asr.config import Config
from asr.speller import CHUNK_STATES, AtEnd, NextToken, Speller, SpellerModel
from asr.whisper_finals import silent_states
from tests.conftest import REPO, load_bench
from training.manifest import read_manifest

speller_bench = load_bench("monotonic_speller")
MANIFEST = REPO / "tests" / "data" / "heldout" / "test_seen_voices.jsonl"


@pytest.fixture(scope="module")
def parts(whisper_model_file):
    ceiling = load_bench("decoder_ceiling")
    whisper = ceiling.WhisperDecoder(
        ceiling.whisper_ct2_dir(ceiling.DEFAULT_CACHE, ceiling.WHEEL_CACHE)
    )
    speller, encode = speller_bench.Speller.of_bundle(whisper, REPO / "models" / "default")
    bundle = Config.load(REPO / "models" / "default" / "config.json")
    assert speller.chunk == bundle.model.whisper.chunk  # the bundle's own chunks
    entries = read_manifest(MANIFEST)[0][:2]
    utterances = speller_bench.prepare(entries, encode["student"], speller)
    policy = speller_bench.Policy(whisper.decoder.embed.weight.detach().clone()).eval()
    return whisper, speller, utterances, policy


def test_p_holds_whisper_log_probabilities_under_each_cut(parts) -> None:
    whisper, speller, utterances, _ = parts
    for utt in utterances:
        states = math.ceil(len(utt.states) / speller_bench.STRIDE)
        assert utt.log_p.shape == (len(utt.tokens) + 1, states + 1)
        assert np.all(utt.log_p <= 0)
        # the whole memory: the transcript is Whisper's greedy one, so each token (and then
        # end-of-text) is the most likely there, well above chance
        assert np.all(utt.log_p[:, -1] > np.log(0.2))
        # from the first chunk alone Whisper's decoder cannot know the sentence
        assert utt.log_p[:, 0].mean() < utt.log_p[:, -1].mean() - 2


def test_never_firing_says_everything_at_the_end_as_offline(parts) -> None:
    whisper, speller, utterances, policy = parts
    with torch.no_grad():
        policy.energy.r.fill_(-1e4)
    for utt in utterances:
        tokens, at, _ = speller_bench.stream(policy, speller, utt, whisper.prompt[-1])
        assert tokens == utt.tokens
        assert at == [-1] * len(tokens)


def test_always_firing_says_each_token_once_whisper_would_say_anything(parts) -> None:
    whisper, speller, utterances, policy = parts
    with torch.no_grad():
        policy.energy.r.fill_(1e4)
    for utt in utterances:
        tokens, at, count = speller_bench.stream(policy, speller, utt, whisper.prompt[-1])
        emitted = [a for a in at if a >= 0]
        assert emitted and emitted == sorted(emitted)  # the pointer only moves forward
        assert emitted[0] < count // 2  # the first word comes long before the end


def test_certainty_policy_spans_offline_to_eager(parts) -> None:
    """Certainty that can never be reached says everything at the end, as offline; any
    certainty at all says each token at the first chunk whose top choice it is, in order,
    and those tokens are Whisper's own picks under that chunk's cut."""
    whisper, speller, utterances, _ = parts
    for utt in utterances:
        tokens, at, count = speller_bench.confident_stream(speller, utt, threshold=1.5)
        assert tokens == utt.tokens and at == [-1] * len(tokens)

        tokens, at, count = speller_bench.confident_stream(speller, utt, threshold=1e-9)
        emitted = [a for a in at if a >= 0]
        assert emitted and emitted == sorted(emitted) and emitted[0] < count // 2
        ends = speller.chunk_ends(len(utt.states))
        memory = speller.memory(utt.states)
        for i, j in enumerate(at):
            if j >= 0:
                assert speller.next_token(memory, tokens[:i], ends[j]) == tokens[i]


def test_prototype_policy_fires_at_a_chunk_where_its_energy_does(parts, tmp_path) -> None:
    """As the served speller's policy (over Whisper's own decoder), the prototype saved and
    loaded says yes at a chunk's end exactly where some 40 ms state of that chunk has a
    positive energy against the query of the tokens said so far."""
    whisper, _, utterances, _ = parts
    recognizer = load_model(REPO / "models" / "default")
    finals = recognizer.whisper_finals()
    assert finals is not None and recognizer.whisper_files is not None
    model = SpellerModel.load(*recognizer.whisper_files, silent_states(finals.teacher))
    first = model.vocabulary.prompt[-1]
    assert first == whisper.prompt[-1]  # the token the prototype's queries start from
    torch.manual_seed(0)
    policy = speller_bench.Policy(whisper.decoder.embed.weight.detach().clone()).eval()
    states = torch.from_numpy(utterances[0].states)
    per_chunk = CHUNK_STATES // speller_bench.STRIDE
    with torch.no_grad():
        query = policy.energy.query(policy.queries(torch.tensor([first]))[-1])
        energies = policy.energy.score(query, policy.keys(states))
        policy.energy.r -= float(np.median([e.max() for e in energies.split(per_chunk)]))
        energies = policy.energy.score(query, policy.keys(states))  # about half the chunks fire
    path = tmp_path / "prototype.safetensors"
    policy.save(path)
    loaded = speller_bench.Policy.load(path, model.decoder.embed.weight.detach())
    prototype = speller_bench.Prototype(loaded, first)

    speller = Speller(model, AtEnd())  # holds the states, says nothing while they come
    speller.accept(states)
    view = NextToken(speller, speller.hypothesis)
    said = []
    for boundary in range(CHUNK_STATES, len(states) + 1, CHUNK_STATES):
        chunk = energies[(boundary - CHUNK_STATES) // 2 : boundary // 2]
        said.append(prototype.emits(view, boundary))
        assert said[-1] == bool((chunk > 0).any()), boundary
    assert any(said) and not all(said)


def test_a_prototype_file_must_be_one(tmp_path) -> None:
    embeddings = torch.zeros(10, 512)
    policy_file = REPO / "models" / "default" / "speller_policy.safetensors"
    with pytest.raises(ValueError, match="not a prototype policy"):
        speller_bench.Policy.load(policy_file, embeddings)
    (tmp_path / "x.safetensors").write_text("not weights")
    with pytest.raises(ValueError, match="unreadable weights"):
        speller_bench.Policy.load(tmp_path / "x.safetensors", embeddings)
