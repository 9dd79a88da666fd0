"""Whisper's decoder taught to wait (training/speller_adapter.py, ``asr tune-speller``): the
prefix targets, adapters that merge at load into exactly the decoder they trained, and a
run of real steps on the bundle that lowers the held-out loss and teaches "wait"
(here Whisper's no-speech token, ``--wait no-speech``) at memories cut mid-speech; a bundle carrying the adapters
streams with a decoder of its own, waiting by their token, and refuses adapters learnt on
another student."""

from __future__ import annotations

import argparse
import copy
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from asr.adapters import (
    adapter_weights,
    add_adapters,
    apply_adapter_weights,
    averaged_adapters,
    merge_adapters,
)
from asr.bundle import load_model
from asr.config import WhisperConfig
from asr.recognizer import Recognizer
from asr.speller import ADAPTER_FILE, POLICY_FILE, WAIT_KEY, learnt_on
from asr.whisper_decoder import LINEARS, WhisperTextDecoder
from asr.whisper_finals import WhisperFinals
from asr.whisper_text import NO_SPEECH
from tests.test_bundled_model import HELDOUT, MODEL
from training.distill import Cached, cache_teacher, cache_words
from training.manifest import Entry, read_manifest
from training.speller_adapter import (
    Example,
    add_arguments,
    cache_examples,
    float32_finals,
    prefix_target,
    run,
)

END, WAIT = 99, 98


def test_the_target_is_the_words_ended_by_the_cut_then_wait() -> None:
    """Tokens 1-2 are one word ending at state 10, token 3 one ending at 40, token 4 at 60;
    only the whole memory ends the text."""
    example = Example(torch.zeros(64, 4), [1, 2, 3, 4], [10, 10, 40, 60])
    assert prefix_target(example, 9, END, WAIT) == [WAIT]  # nothing said yet
    assert prefix_target(example, 16, END, WAIT) == [1, 2, WAIT]
    assert prefix_target(example, 48, END, WAIT) == [1, 2, 3, WAIT]
    assert prefix_target(example, 60, END, WAIT) == [1, 2, 3, 4, WAIT]
    assert prefix_target(example, None, END, WAIT) == [1, 2, 3, 4, END]


def tiny_decoder() -> WhisperTextDecoder:
    torch.manual_seed(0)
    decoder = WhisperTextDecoder(vocab=50, d_model=16, heads=2, layers=2, n_ctx=20)
    for p in decoder.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return decoder.eval()


def test_saved_adapters_merged_at_load_are_the_decoder_they_trained(tmp_path: Path) -> None:
    plain = tiny_decoder()
    tuned = copy.deepcopy(plain)
    add_adapters(tuned, tuned.layers, LINEARS, rank=3)
    for name, p in tuned.named_parameters():
        if name.endswith(".up"):
            torch.nn.init.normal_(p, std=0.3)
    tokens = torch.tensor([[1, 5, 7, 9]])
    states = torch.randn(1, 12, 16)
    with torch.no_grad():
        want = tuned(tokens, tuned.memory(states))
        assert not torch.allclose(want, plain(tokens, plain.memory(states)), atol=1e-3)
    save_file(adapter_weights(tuned.layers, LINEARS), str(tmp_path / "a.safetensors"))
    loaded = copy.deepcopy(plain)
    apply_adapter_weights(loaded.layers, LINEARS, load_file(str(tmp_path / "a.safetensors")))
    merge_adapters(tuned.layers, LINEARS)
    with torch.no_grad():
        assert torch.allclose(loaded(tokens, loaded.memory(states)), want, atol=1e-5)
        assert torch.allclose(tuned(tokens, tuned.memory(states)), want, atol=1e-5)
    wrong = {"0.fc1.down": torch.zeros(3, 7), "0.fc1.up": torch.zeros(64, 3)}
    with pytest.raises(ValueError, match="0.fc1"):
        apply_adapter_weights(copy.deepcopy(plain).layers, LINEARS, wrong)


def test_averaged_adapters_are_the_mean_of_their_products_not_of_their_factors() -> None:
    torch.manual_seed(1)
    snapshots = [
        {"0.fc1.down": torch.randn(3, 16), "0.fc1.up": torch.randn(64, 3)} for _ in range(3)
    ]
    averaged = averaged_adapters(snapshots)
    assert averaged["0.fc1.down"].shape == (9, 16)  # rank times the count
    products = [s["0.fc1.up"] @ s["0.fc1.down"] for s in snapshots]
    mean = torch.stack(products).mean(0)
    assert torch.allclose(averaged["0.fc1.up"] @ averaged["0.fc1.down"], mean, atol=1e-5)
    factors = sum(s["0.fc1.up"] for s in snapshots) @ sum(s["0.fc1.down"] for s in snapshots)
    assert not torch.allclose(factors / 9, mean, atol=1e-2)
    with pytest.raises(ValueError, match="no adapters"):
        averaged_adapters([])


def tune_arguments(work: Path, *more: str) -> argparse.Namespace:
    """Eight steps on six synthetic clips (Whisper's own transcripts as targets), held out
    on five others, validated every fourth."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(
        ["--model", str(MODEL), "--train", str(HELDOUT / "test_seen_voices.jsonl")]
        + ["--valid", str(HELDOUT / "test_unseen_voices.jsonl"), "--limit", "6"]
        + ["--teacher-cache", str(work / "teacher"), "--cache", str(work / "states")]
        + ["--epochs", "4", "--batch", "3", "--lr", "1e-3", "--warmup", "2"]
        + ["--valid-every", "4", "--wait", "no-speech", *more]
    )


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The adapters of the best held-out loss of :func:`tune_arguments`' run."""
    work = tmp_path_factory.mktemp("tune")
    assert run(tune_arguments(work, "--out", str(work / "out"))) == 0
    return work / "out"


def test_tuning_lowers_the_held_out_loss_and_teaches_the_wait(tuned: Path) -> None:
    history = json.loads((tuned / "history.json").read_text())
    assert history[0]["step"] == 0 and history[-1]["step"] == 8
    best = min(h["loss"] for h in history[1:])
    assert best < 0.8 * history[0]["loss"]
    assert max(h["waits_right"] for h in history[1:]) > history[0]["waits_right"]
    assert (tuned / ADAPTER_FILE).is_file()
    with safe_open(str(tuned / ADAPTER_FILE), "pt") as f:  # what it was learnt with (the card's)
        meta = f.metadata()
    assert (meta["epochs"], meta["numbers"], meta["whole_share"]) == ("4", "digits", "0.3")
    assert meta[WAIT_KEY] == NO_SPEECH


def test_average_writes_the_mean_of_the_last_validations_the_end_among_them(
    tuned: Path,
) -> None:
    """``--average 2`` over the same run (its caches): the file is the mean of the adapters
    at steps 4 and 8, the second half of its stack the run's last adapters (as resumed from),
    and the history gives the mean's own held-out figures."""
    out = tuned.parent / "average"
    assert run(tune_arguments(tuned.parent, "--out", str(out), "--average", "2")) == 0
    history = json.loads((out / "history.json").read_text())
    assert history[-1]["averaged"] == 2 and history[-1]["step"] == 8
    assert [h["step"] for h in history[:-1]] == [0, 4, 8]
    assert history[-1]["loss"] < history[0]["loss"]
    saved = load_file(str(out / ADAPTER_FILE))
    last = torch.load(out / "last.pt", weights_only=False)["adapters"]
    moved = 0.0  # how far step 4's B (from zero) lay from the end's
    for key, value in last.items():
        half = saved[key].float().chunk(2, dim=0 if key.endswith(".down") else 1)
        expected = value if key.endswith(".down") else value / 2
        assert torch.allclose(half[1], expected, atol=2e-3)
        if key.endswith(".up"):
            moved = max(moved, float((half[0] - expected).abs().max() / expected.abs().max()))
    assert moved > 0.1, moved
    with safe_open(str(out / ADAPTER_FILE), "pt") as f:
        assert f.metadata()["average"] == "2"
    assert run(tune_arguments(tuned.parent, "--out", str(out), "--average", "2", "--resume")) == 0
    assert json.loads((out / "history.json").read_text()) == history  # a finished run stays


def bundle_with(adapter: Path, out: Path, policy_for_it: bool = True) -> Path:
    """models/default with ``adapter``; its policy's file names the adapter it was learnt
    over where ``policy_for_it`` (as `asr train-speller` on this bundle writes it)."""
    out.mkdir()
    for item in MODEL.iterdir():  # links to the bundle's files, but the two written here
        if item.name not in (POLICY_FILE, ADAPTER_FILE):
            (out / item.name).symlink_to(item.resolve())
    shutil.copy(adapter, out / ADAPTER_FILE)
    policy = MODEL / POLICY_FILE
    with safe_open(str(policy), "pt") as f:
        meta = f.metadata()
    if policy_for_it:
        meta |= learnt_on(out)
    save_file(load_file(str(policy)), str(out / POLICY_FILE), metadata=meta)
    return out


def test_a_bundle_with_adapters_streams_with_a_decoder_of_its_own(
    tuned: Path, tmp_path: Path
) -> None:
    recognizer = load_model(bundle_with(tuned / ADAPTER_FILE, tmp_path / "bundle"))
    model, _ = recognizer.speller()
    finals = recognizer.whisper_finals()
    assert finals is not None and model.decoder is not finals.decoder
    tokens = torch.tensor([model.vocabulary.prompt])
    states = torch.randn(1, 32, 512)
    with torch.inference_mode():
        ours = model.decoder(tokens, model.decoder.memory(states))
        theirs = finals.decoder(tokens, finals.decoder.memory(states))
    assert (ours - theirs).abs().max() > 1e-2  # the adapters are merged in the streaming one
    assert model.wait == model.vocabulary.no_speech != model.end  # as they learnt to wait
    assert not torch.equal(model.silence[0][0], finals.silence[0][0])


def test_a_policy_learnt_without_the_adapters_is_refused(tuned: Path, tmp_path: Path) -> None:
    """The policy reads the decoder's state: one learnt over Whisper's decoder as it is does
    not fit the adapted one."""
    bundle = bundle_with(tuned / ADAPTER_FILE, tmp_path / "bundle", policy_for_it=False)
    with pytest.raises(ValueError, match="another streaming decoder"):
        load_model(bundle).speller()


def test_adapters_learnt_on_another_student_are_refused(tuned: Path, tmp_path: Path) -> None:
    other = tmp_path / ADAPTER_FILE
    save_file(load_file(str(tuned / ADAPTER_FILE)), str(other), metadata={"student_sha1": "0" * 40})
    recognizer = load_model(bundle_with(other, tmp_path / "bundle"))
    with pytest.raises(ValueError, match="asr tune-speller"):
        recognizer.speller()


@dataclass
class OneClip:
    """A held-out clip in a manifest of its own, its teacher's states cached."""

    recognizer: Recognizer
    finals: WhisperFinals
    row: dict
    items: list[Cached]
    entries: dict[str, Entry]


def one_clip(tmp_path: Path, split: str, index: int) -> OneClip:
    recognizer = load_model(MODEL)
    finals = float32_finals(recognizer)
    row = json.loads((HELDOUT / f"{split}.jsonl").read_text().splitlines()[index])
    row["audio"] = str(HELDOUT / row["audio"])
    (tmp_path / "m.jsonl").write_text(json.dumps(row) + "\n")
    entries = read_manifest(tmp_path / "m.jsonl")[0]
    cfg = WhisperConfig(
        teacher=str(MODEL / "whisper_teacher.safetensors"),
        floor=recognizer.config.model.whisper.floor,
    )
    items = cache_teacher(entries, finals.teacher, cfg, tmp_path / "teacher", "teacher")
    return OneClip(recognizer, finals, row, items, {e.id: e for e in entries})


def test_spelled_targets_say_a_number_word_by_word(tmp_path: Path) -> None:
    """``--numbers words``: the target transcript spells a number as said (no numeral
    token), each of its words with its own end, where Whisper's numerals end together."""
    clip = one_clip(tmp_path, "test_unseen_voices", 3)
    assert clip.row["text"] == "one thousand one hundred three pounds and fifty pence"
    finals = clip.finals
    examples = {}
    for numbers in ("digits", "words"):
        cache_words(clip.items, finals, 16, "transcripts", numbers)
        examples[numbers] = cache_examples(
            clip.items, clip.entries, clip.recognizer, finals, tmp_path / "states", MODEL, numbers
        )[0]
    numerals = finals.vocabulary.numerals(len(finals.decoder.embed.weight))
    numeral = set(numerals.nonzero().flatten().tolist())
    assert numeral & set(examples["digits"].tokens)
    assert not numeral & set(examples["words"].tokens)
    spelled = finals.vocabulary.decode(examples["words"].tokens).lower()
    assert "thousand" in spelled and "hundred" in spelled
    assert len(set(examples["words"].word_ends)) > len(set(examples["digits"].word_ends))
    assert len(list((tmp_path / "states").iterdir())) == 2  # one example per transcript


def test_a_spoken_clips_targets_say_its_words(tmp_path: Path) -> None:
    """A clip of a ``--spoken`` manifest: its example says its text's words (a short one the
    teacher misreads), capitalised and closed as Whisper writes, each word's end in order
    inside the clip, in its own cache file beside the example of Whisper's reading."""
    from training.recipes.textnorm import normalize

    clip = one_clip(tmp_path, "test_short", 8)
    text = clip.row["text"]
    assert text == "monday the sixteenth"
    cache_words(clip.items, clip.finals, 16, "transcripts", "words")
    said = {}
    for name, spoken in (("whisper", set()), ("spoken", {clip.row["id"]})):
        example = cache_examples(
            clip.items,
            clip.entries,
            clip.recognizer,
            clip.finals,
            tmp_path / "states",
            MODEL,
            name,
            spoken,
        )[0]
        said[name] = clip.finals.vocabulary.decode(example.tokens)
        assert example.word_ends == sorted(example.word_ends)
        assert example.word_ends[-1] <= len(example.states)
    assert normalize(said["whisper"]) != text
    assert normalize(said["spoken"]) == text
    assert said["spoken"][0] == "M" and said["spoken"][-1] in ".?!"
    assert len(list((tmp_path / "states").iterdir())) == 2


def test_targets_read_in_whispers_window_say_what_its_own_states_misread(
    tmp_path: Path,
) -> None:
    """A short clip read from its own states alone comes out as another sentence; read as
    the finals read a segment, inside Whisper's padding to the bundle's window, it says what
    was said: the speller's targets, each reading in its own file."""
    from training.recipes.textnorm import normalize

    clip = one_clip(tmp_path, "test_short", 1)
    assert clip.row["text"] == "nineteen eighty three"
    window = clip.recognizer.config.decode.whisper_finals.window_s
    assert window == 10
    read = {}
    for window_s in (0.0, window):
        cache_words(clip.items, clip.finals, 16, "transcripts", "words", window_s)
        (item,) = clip.items
        assert item.words is not None
        with np.load(item.words) as data:
            read[window_s] = normalize(clip.finals.vocabulary.decode(data["tokens"].tolist()))
    assert read[window] == "nineteen eighty three"
    assert read[0.0] != read[window] and "nineteen" not in read[0.0]
    names = {p.name for p in (tmp_path / "teacher").iterdir() if ".spelled16" in p.name}
    assert len(names) == 2 and any(n.endswith("-w10.npz") for n in names)
