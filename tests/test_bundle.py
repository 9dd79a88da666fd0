"""Model bundles: a save/load round trip recognises exactly as the model in memory, and a
missing or mismatched file fails with an error that names it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from asr.audio import read_audio
from asr.bundle import load_model, save_bundle
from asr.config import FORMAT_VERSION, Config
from asr.features import CMVN
from asr.model import Seq2Seq
from asr.recognizer import Recognizer
from asr.tokenizer import SentencePieceTokenizer, SymbolTokenizer
from tests.conftest import SENTENCES

BUNDLE_FILES = ["config.json", "model.safetensors", "tokenizer.model", "cmvn.json"]


@pytest.fixture
def bundle(tiny_bundle: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny bundle to break."""
    return Path(shutil.copytree(tiny_bundle, tmp_path / "bundle"))


def test_round_trip_recognises_like_the_model_in_memory(
    tmp_path: Path, tiny_bundle: Path, speech_dir: Path
) -> None:
    torch.manual_seed(3)
    source = load_model(tiny_bundle)
    config = source.config
    # a fresh model (other weights than the tiny bundle's) that exists only in memory
    model = Seq2Seq(config.model, source.tokenizer.vocab_size).eval()
    cmvn = CMVN.load(tiny_bundle / "cmvn.json")
    model.set_cmvn(torch.from_numpy(cmvn.mean), torch.from_numpy(cmvn.std))
    in_memory = Recognizer(config, model, source.tokenizer)
    out = save_bundle(
        tmp_path / "saved", config, model, tiny_bundle / "tokenizer.model", cmvn, "# card\n"
    )
    assert sorted(p.name for p in out.iterdir()) == sorted([*BUNDLE_FILES, "README.md"])
    loaded = load_model(out)
    assert loaded.config == config
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name
    emitted = 0
    for i in range(3):
        samples, rate = read_audio(speech_dir / f"utt{i:02d}.wav")
        expected = in_memory.transcribe_segments(samples, rate)
        got = loaded.transcribe_segments(samples, rate)
        assert [(e.tokens, e.start, e.end) for e in got] == [
            (e.tokens, e.start, e.end) for e in expected
        ]
        assert loaded.transcribe(samples, rate) == in_memory.transcribe(samples, rate)
        emitted += sum(len(e.tokens) for e in got)
    assert emitted > 0


def test_symbol_tokenizer_bundle_round_trip(tmp_path: Path, speech_dir: Path) -> None:
    data = Config().to_dict()
    data["model"]["encoder"].update(layers=1, units=32, reductions=[4])
    data["model"]["decoder"].update(units=32, embed_dim=16)
    data["model"]["attention"].update(dim=16, init_r=0.0)
    data["model"]["tokenizer"].update(kind="symbols")
    config = Config.from_dict(data)
    tokenizer = SymbolTokenizer.build(SENTENCES)
    tokenizer.save(tmp_path / "tokens.txt")
    model = Seq2Seq(config.model, tokenizer.vocab_size).eval()
    cmvn = CMVN()
    cmvn.accumulate(np.random.default_rng(0).standard_normal((50, 80)).astype(np.float32))
    cmvn.finalize()
    out = save_bundle(tmp_path / "b", config, model, tmp_path / "tokens.txt", cmvn, "# card\n")
    loaded = load_model(out)
    samples, rate = read_audio(speech_dir / "utt00.wav")
    expected = Recognizer(config, model, tokenizer).transcribe(samples, rate)
    assert loaded.transcribe(samples, rate) == expected


@pytest.mark.parametrize("name", BUNDLE_FILES)
def test_missing_file_is_named(bundle: Path, name: str) -> None:
    (bundle / name).unlink()
    with pytest.raises(FileNotFoundError, match=name.replace(".", r"\.")):
        load_model(bundle)


def test_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_model(tmp_path / "nowhere")


def test_mismatched_vocabulary_names_the_weights(
    bundle: Path, tmp_path: Path, tiny_bundle: Path
) -> None:
    # a tokenizer with another vocabulary size than the weights were made for
    SentencePieceTokenizer.train(SENTENCES, tmp_path / "other", 30)
    shutil.copyfile(tmp_path / "other.model", bundle / "tokenizer.model")
    with pytest.raises(ValueError, match=r"model\.safetensors") as err:
        load_model(bundle)
    assert "tokenizer.model" in str(err.value) and "30" in str(err.value)


def test_weights_of_another_shape_are_named(bundle: Path) -> None:
    weights = load_file(str(bundle / "model.safetensors"))
    name = next(k for k in weights if k.endswith("weight"))
    weights[name] = torch.zeros(3, 3)
    save_file(weights, str(bundle / "model.safetensors"))
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        load_model(bundle)


def test_corrupt_weights_are_named(bundle: Path) -> None:
    (bundle / "model.safetensors").write_bytes(b"\x00" * 20)
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        load_model(bundle)


def _edit_config(bundle: Path, edit) -> None:
    path = bundle / "config.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 0, "1", None])
def test_wrong_format_version_is_named(bundle: Path, version) -> None:
    _edit_config(bundle, lambda d: d.update(format_version=version))
    with pytest.raises(ValueError, match=r"config\.json.*format_version"):
        load_model(bundle)


def test_missing_format_version_is_named(bundle: Path) -> None:
    _edit_config(bundle, lambda d: d.pop("format_version"))
    with pytest.raises(ValueError, match=r"config\.json.*format_version"):
        load_model(bundle)


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(colour="blue"),
        lambda d: d["model"]["encoder"].update(unitz=64),
        lambda d: d["decode"].update(beam="4"),
    ],
    ids=["top", "nested", "typo"],
)
def test_unknown_config_key_is_named(bundle: Path, edit) -> None:
    _edit_config(bundle, edit)
    with pytest.raises(ValueError, match=r"config\.json.*unknown key"):
        load_model(bundle)


def test_a_retired_key_at_its_old_default_loads_and_set_is_named(bundle: Path) -> None:
    """A config saved before decode.whisper_finals.padding_s gave way to window_s still
    loads (it held the default, which nothing chose); one that set it is refused, naming
    what replaced it."""
    _edit_config(bundle, lambda d: d["decode"].update(whisper_finals={"padding_s": 0.0}))
    assert load_model(bundle).config.decode.whisper_finals.window_s == 10.0
    _edit_config(bundle, lambda d: d["decode"].update(whisper_finals={"padding_s": 6.0}))
    with pytest.raises(ValueError, match=r"config\.json.*padding_s was retired: window_s"):
        load_model(bundle)


def test_bad_config_value_and_bad_json_are_named(bundle: Path) -> None:
    _edit_config(bundle, lambda d: d["decode"].update(beam_size="four"))
    with pytest.raises(ValueError, match=r"config\.json.*beam_size"):
        load_model(bundle)
    (bundle / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json.*JSON"):
        load_model(bundle)


def test_mismatched_or_corrupt_cmvn_is_named(bundle: Path) -> None:
    cmvn = CMVN()
    cmvn.accumulate(np.random.default_rng(0).standard_normal((20, 40)).astype(np.float32))
    cmvn.finalize()
    cmvn.save(bundle / "cmvn.json")
    with pytest.raises(ValueError, match=r"cmvn\.json.*40"):
        load_model(bundle)
    (bundle / "cmvn.json").write_text("[]")
    with pytest.raises(ValueError, match=r"cmvn\.json"):
        load_model(bundle)


def test_corrupt_tokenizer_is_named(bundle: Path) -> None:
    (bundle / "tokenizer.model").write_bytes(b"not a sentencepiece model")
    with pytest.raises(ValueError, match=r"tokenizer\.model"):
        load_model(bundle)
