"""`asr prepare` on small corpus trees built here: TIMIT, Kaldi, WSJ and plain folders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from asr.cli import main
from asr.tokenizer import SentencePieceTokenizer, SymbolTokenizer
from tests.test_manifest import write_sphere
from training.manifest import read_manifest
from training.prepare import clean_wsj_transcript, prepare_kaldi

TONE = (3000 * np.sin(np.arange(8000) / 5)).astype(np.int16)  # 0.5 s at 16 kHz

PHN = "0 2000 h#\n2000 3000 sh\n3000 3500 ix\n3500 4000 q\n4000 5000 hv\n5000 6000 ao\n6000 7000 bcl\n7000 8000 h#\n"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def timit_utterance(speaker_dir: Path, name: str, upper: bool) -> None:
    speaker_dir.mkdir(parents=True, exist_ok=True)
    case = str.upper if upper else str.lower
    write_sphere(speaker_dir / case(f"{name}.wav"), TONE)
    (speaker_dir / case(f"{name}.phn")).write_text(PHN)
    (speaker_dir / case(f"{name}.wrd")).write_text("2000 8000 she\n")
    (speaker_dir / case(f"{name}.txt")).write_text("0 8000 She.\n")


def test_timit_splits_and_folded_phones(tmp_path: Path) -> None:
    root = tmp_path / "timit"
    # TRAIN in upper case, TEST in lower case: both layouts exist in the wild
    for name in ("SA1", "SI1027", "SX127"):
        timit_utterance(root / "TRAIN" / "DR1" / "FCJF0", name, upper=True)
    timit_utterance(root / "TRAIN" / "DR2" / "MABC0", "SI500", upper=True)
    for speaker in ("mdab0", "faks0", "mzzz0"):  # core test, dev, neither
        for name in ("sa2", "si1", "sx2"):
            timit_utterance(root / "test" / "dr1" / speaker, name, upper=False)
    out = tmp_path / "prepared"
    assert main(["prepare", "timit", str(root), "--out", str(out)]) == 0

    train, dev, test = (read_jsonl(out / f"{s}.jsonl") for s in ("train", "dev", "test"))
    assert [r["id"] for r in train] == ["fcjf0_si1027", "fcjf0_sx127", "mabc0_si500"]
    assert [r["id"] for r in dev] == ["faks0_si1", "faks0_sx2"]
    assert [r["id"] for r in test] == ["mdab0_si1", "mdab0_sx2"]
    # h# and q dropped, hv -> hh, bcl -> vcl; ao and ix stay distinct for training
    assert {r["text"] for r in train + dev + test} == {"sh ix hh ao vcl"}
    assert train[0]["duration"] == pytest.approx(0.5) and train[0]["speaker"] == "fcjf0"
    assert Path(train[0]["audio"]).is_file()
    phones = SymbolTokenizer.load(out / "phones.txt")
    assert phones.vocab_size == 3 + 48
    assert phones.decode(phones.encode(train[0]["text"])) == train[0]["text"]


def test_timit_converted_wav_copies(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Copies with X.WAV.wav (RIFF) beside the transcripts, as converters write them."""
    root = tmp_path / "timit"
    for speaker_dir, upper in (
        (root / "TRAIN" / "DR1" / "FCJF0", True),
        (root / "test" / "dr1" / "mdab0", False),
        (root / "test" / "dr1" / "faks0", False),
    ):
        for name in ("SA1", "SI1", "SX2"):
            timit_utterance(speaker_dir, name, upper=upper)
            audio = speaker_dir / (f"{name}.WAV" if upper else f"{name}.wav".lower())
            audio.unlink()  # only the converted copy is left
            soundfile.write(f"{audio}.wav", TONE, 16000)
    # both the original and its copy: one utterance, from the original
    timit_utterance(root / "TRAIN" / "DR1" / "FCJF0", "SX9", upper=True)
    soundfile.write(root / "TRAIN" / "DR1" / "FCJF0" / "SX9.WAV.wav", TONE, 16000)
    out = tmp_path / "prepared"
    assert main(["prepare", "timit", str(root), "--out", str(out)]) == 0
    train, dev, test = (read_jsonl(out / f"{s}.jsonl") for s in ("train", "dev", "test"))
    assert [r["id"] for r in train] == ["fcjf0_si1", "fcjf0_sx2", "fcjf0_sx9"]
    assert train[0]["audio"].endswith("SI1.WAV.wav") and train[2]["audio"].endswith("SX9.WAV")
    assert [r["id"] for r in dev] == ["faks0_si1", "faks0_sx2"]
    assert [r["id"] for r in test] == ["mdab0_si1", "mdab0_sx2"]
    assert train[0]["duration"] == pytest.approx(0.5) and train[0]["text"] == "sh ix hh ao vcl"
    assert "found 1 of the 24 standard speakers" in capsys.readouterr().err


def test_timit_without_usable_audio_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root = tmp_path / "timit"
    for speaker_dir in (root / "TRAIN" / "DR1" / "FCJF0", root / "TEST" / "DR1" / "MDAB0"):
        timit_utterance(speaker_dir, "SI1", upper=True)
        (speaker_dir / "SI1.WAV").rename(speaker_dir / "SI1.FLAC")  # not a TIMIT audio name
    out = tmp_path / "prepared"
    assert main(["prepare", "timit", str(root), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no TIMIT utterances for train, dev, test" in err and ".WAV.wav" in err
    assert "found 0 of the 24 standard speakers" in err  # speakers without utterances
    assert not (out / "train.jsonl").exists()


def test_timit_needs_original_layout(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["prepare", "timit", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "expected TRAIN and TEST folders" in capsys.readouterr().err


def make_kaldi_dir(tmp_path: Path) -> Path:
    soundfile.write(tmp_path / "rec1.wav", np.zeros(16000, np.float32), 16000)
    soundfile.write(tmp_path / "rec2.flac", np.full(8000, 0.1, np.float32), 16000)
    # the pipe's output is FLAC here: it is decoded and saved as a WAV either way
    data = tmp_path / "data"
    data.mkdir()
    (data / "wav.scp").write_text(
        f"rec1 {tmp_path / 'rec1.wav'}\nrec2 cat {tmp_path / 'rec2.flac'} |\n"
    )
    (data / "segments").write_text("utt1 rec1 0.0 0.4\nutt2 rec1 0.4 -1\nutt3 rec2 0.1 0.3\n")
    (data / "text").write_text("utt1 hello there\nutt2 general kenobi\nutt3 bold one\nutt4\n")
    (data / "utt2spk").write_text("utt1 spk1\nutt2 spk1\nutt3 spk2\nutt4 spk2\n")
    return data


def test_kaldi_pipes_refused_without_flag(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = make_kaldi_dir(tmp_path)
    out = tmp_path / "m.jsonl"
    assert main(["prepare", "kaldi", str(data), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{data / 'wav.scp'}:2: recording 'rec2' is a shell pipe" in err
    assert "--allow-pipes" in err and not out.exists()


def test_kaldi_segments_speakers_and_pipes(tmp_path: Path) -> None:
    data = make_kaldi_dir(tmp_path)
    out = tmp_path / "m.jsonl"
    args = ["prepare", "kaldi", str(data), "--out", str(out), "--allow-pipes"]
    assert main([*args, "--audio-dir", str(tmp_path / "piped")]) == 0
    rows = {r["id"]: r for r in read_jsonl(out)}
    assert set(rows) == {"utt1", "utt2", "utt3"}  # utt4 has no text
    assert (rows["utt1"]["offset"], rows["utt1"]["end"], rows["utt1"]["duration"]) == (0, 0.4, 0.4)
    assert (rows["utt2"]["end"], rows["utt2"]["duration"]) == (1.0, 0.6)  # -1: to the end
    assert rows["utt3"]["speaker"] == "spk2" and rows["utt3"]["duration"] == pytest.approx(0.2)
    piped = tmp_path / "piped" / "rec2.wav"
    assert out.parent / rows["utt3"]["audio"] == piped
    samples, rate = soundfile.read(piped)
    assert rate == 16000 and len(samples) == 8000


def test_kaldi_without_segments(tmp_path: Path) -> None:
    soundfile.write(tmp_path / "a.wav", np.zeros(4000, np.float32), 8000)
    data = tmp_path / "d"
    data.mkdir()
    (data / "wav.scp").write_text(f"a {tmp_path / 'a.wav'}\nb {tmp_path / 'missing.wav'}\n")
    (data / "text").write_text("a Some Words\nb more\n")
    entries = prepare_kaldi(data)
    assert [(e.id, e.text, e.duration, e.offset) for e in entries] == [
        ("a", "Some Words", 0.5, None)
    ]


def test_folder_mode(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    soundfile.write(corpus / "one.wav", np.zeros(1600, np.float32), 16000)
    (corpus / "one.txt").write_text("first  line\n")
    soundfile.write(corpus / "sub" / "two.flac", np.zeros(3200, np.float32), 16000)
    (corpus / "sub" / "two.lab").write_text("second")
    write_sphere(corpus / "sub" / "three.sph", TONE)
    (corpus / "sub" / "three.TXT").write_text("third\n")
    soundfile.write(corpus / "orphan.wav", np.zeros(1600, np.float32), 16000)
    out = tmp_path / "m.jsonl"
    assert main(["prepare", "folder", str(corpus), "--out", str(out)]) == 0
    rows = read_jsonl(out)
    assert [(r["id"], r["text"], r["duration"]) for r in rows] == [
        ("one", "first line", 0.1),
        ("sub-three", "third", 0.5),
        ("sub-two", "second", 0.2),
    ]


def test_folder_mode_transcript_encodings_and_shared_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    corpus = tmp_path / "corpus"
    for name in ("bom.wav", "latin.wav", "x.flac", "x.wav", "a-b/c.wav", "a/b-c.wav"):
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        soundfile.write(corpus / name, np.zeros(1600, np.float32), 16000)
        (corpus / name).with_suffix(".txt").write_text("some words")
    (corpus / "bom.txt").write_bytes(b"\xef\xbb\xbfone two")  # as some editors save
    (corpus / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    out = tmp_path / "m.jsonl"
    assert main(["prepare", "folder", str(corpus), "--out", str(out)]) == 0
    rows = read_jsonl(out)
    assert [(r["id"], r["text"]) for r in rows] == [
        ("a-b-c", "some words"),
        ("bom", "one two"),
        ("x", "some words"),
    ]
    assert rows[2]["audio"].endswith("x.flac")
    err = capsys.readouterr().err
    assert (
        f"skipping {corpus / 'a-b' / 'c.wav'}: its id 'a-b-c' is already {corpus / 'a' / 'b-c.wav'}'s"
        in err
    )
    assert f"skipping {corpus / 'x.wav'}: its id 'x' is already {corpus / 'x.flac'}'s" in err
    assert f"skipping {corpus / 'latin.wav'}: latin.txt is not UTF-8 text" in err
    assert read_manifest(out)[1] == []  # every line it wrote is one training keeps


def test_merge_rewrites_paths_and_refuses_shared_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    for corpus, name in (("a", "one"), ("b", "two")):
        (tmp_path / corpus / "wavs").mkdir(parents=True)
        soundfile.write(tmp_path / corpus / "wavs" / f"{name}.wav", TONE, 16000)
        rows = [{"id": name, "audio": f"wavs/{name}.wav", "text": name, "duration": 0.5}]
        rows.append({"id": f"{name}-gone", "audio": "wavs/gone.wav", "text": "x", "duration": 1})
        (tmp_path / corpus / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "train.jsonl"  # the corpora's parent: paths stay relative, the tree movable
    inputs = [str(tmp_path / c / "train.jsonl") for c in "ab"]
    assert main(["prepare", "merge", *inputs, "--out", str(out)]) == 0
    rows = read_jsonl(out)
    assert [(r["id"], r["audio"], r["text"]) for r in rows] == [
        ("one", "a/wavs/one.wav", "one"),
        ("two", "b/wavs/two.wav", "two"),
    ]
    err = capsys.readouterr().err
    assert "one-gone" in err and "two-gone" in err  # skipped lines are named
    again = tmp_path / "again.jsonl"
    assert main(["prepare", "merge", inputs[0], inputs[0], "--out", str(again)]) == 2
    assert f"id 'one' is in both {inputs[0]} and {inputs[0]}" in capsys.readouterr().err
    assert not again.exists()
    assert main(["prepare", "merge", str(tmp_path / "nope.jsonl"), "--out", str(again)]) == 2
    assert "nope.jsonl: no such manifest" in capsys.readouterr().err


def wsj_audio(path: Path, shorten: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_sphere(path, TONE)
    if shorten:  # same header, compressed coding: only the header is looked at
        raw = path.read_bytes().replace(
            b"sample_coding -s3 pcm", b"sample_coding -s26 pcm,embedded-shorten-v2.00"
        )
        path.write_bytes(raw[:1024] + b"\x00" * 100)


def test_wsj_original_folders(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "wsj"
    wsj0, wsj1 = root / "11-1.1" / "wsj0", root / "13-1.1" / "wsj1"
    wsj_audio(wsj0 / "si_tr_s" / "011" / "011c0201.wv1")
    wsj_audio(wsj0 / "si_tr_s" / "011" / "011c0201.wv2")  # second microphone: ignored
    wsj_audio(wsj0 / "si_tr_s" / "401" / "401c0201.wv1")  # not in the standard si84 list
    wsj_audio(wsj1 / "SI_TR_S" / "4A0" / "4A0C0201.WV1")
    wsj_audio(wsj1 / "si_dt_20" / "4k0" / "4k0c0301.wv1")
    wsj_audio(wsj1 / "si_dt_20" / "4k0" / "4k0c0302.wv1")
    wsj_audio(wsj0 / "si_et_20" / "440" / "440c0201.wv1", shorten=True)
    wsj_audio(wsj0 / "si_et_05" / "440" / "440c0401.wv1")  # 5k set: not eval92
    dots = root / "11-4.1" / "wsj0" / "transcrp" / "dots"
    (dots / "si_tr_s" / "011").mkdir(parents=True)
    (dots / "si_tr_s" / "011" / "011c0200.dot").write_text(
        "[loud_breath] The *company's* ,COMMA shares rose ~ ten %PERCENT .PERIOD (011c0201)\n"
    )
    (dots / "si_tr_s" / "401").mkdir(parents=True)
    (dots / "si_tr_s" / "401" / "401c0200.dot").write_text("Excluded (401c0201)\n")
    (wsj1 / "SI_TR_S" / "4A0" / "4A0C0200.DOT").write_text(
        "<The> U.S. DON'T [door_slam>] isn\\'t I\\. B\\. M\\. (4A0C0201)\n"
    )
    (wsj1 / "si_dt_20" / "4k0" / "4k0c0300.dot").write_text(
        "First one (4k0c0301)\nSecond one (4k0c0302)\n"
    )
    (wsj0 / "si_et_20" / "440" / "440c0200.dot").write_text("'Em \"DOUBLE-QUOTE all (440c0201)\n")
    (wsj0 / "si_et_05" / "440" / "440c0400.dot").write_text("Five k (440c0401)\n")
    # an index file present for dev93 selects from it; the other splits use folder names
    index = wsj1 / "doc" / "indices"
    index.mkdir(parents=True)
    (index / "h1_p0.ndx").write_text(";; dev93 index\n13_16_1:wsj1/si_dt_20/4k0/4k0c0302.wv1\n")

    out = tmp_path / "prepared"
    assert main(["prepare", "wsj", str(root), "--out", str(out)]) == 0
    train = read_jsonl(out / "train_si284.jsonl")
    assert [(r["id"], r["text"], r["speaker"]) for r in train] == [
        ("011c0201", "the company's comma shares rose ten percent period", "011"),
        ("4a0c0201", "the us don't isn't i b m", "4a0"),
    ]
    assert [r["id"] for r in read_jsonl(out / "test_dev93.jsonl")] == ["4k0c0302"]
    eval92 = read_jsonl(out / "test_eval92.jsonl")
    assert [(r["id"], r["text"], r["duration"]) for r in eval92] == [
        ("440c0201", "'em double-quote all", 0.5)
    ]
    err = capsys.readouterr().err
    assert "test_dev93: 1 utterances selected by index files" in err
    assert "test_eval92: 1 utterances selected by folders si_et_20" in err
    assert "1 utterances are shorten-compressed SPHERE" in err and "sph2pipe" in err


def test_wsj_transcript_cleanup() -> None:
    """The LDC .dot conventions: escapes are part of the word, verbal punctuation is
    spoken, a cut-off word keeps its spoken part, noise and truncation marks go."""
    cases = {
        # WSJ's own examples: the escaped apostrophe and abbreviation periods
        "Of course there isn\\'t any guarantee [misc_noise]": "of course there isn't any guarantee",
        "[loud_breath] I\\. B\\. M\\. said [door_slam]": "i b m said",
        # verbal punctuation is what the reader said
        "Rates rose three .POINT five %PERCENT": "rates rose three point five percent",
        'Sales ,COMMA he said "DOUBLE-QUOTE up --DASH (LEFT-PAREN a )RIGHT-PAREN .PERIOD': (
            "sales comma he said double-quote up dash left-paren a right-paren period"
        ),
        "'Em 'SINGLE-QUOTE": "'em single-quote",  # a contraction, then punctuation
        # REVO(LUTIONARY)-: only "revo" was said
        "REVO(LUTIONARY)- change": "revo change",
        # *mispronounced* and <verbally deleted> words were spoken; ~ and a lone . were not
        "[<door_slam] IT'S ~ OK . <The> *SMITH* AT\\&T [phone_ring/] Co [/phone_ring]": (
            "it's ok the smith at&t co"
        ),
    }
    assert {dot: clean_wsj_transcript(dot) for dot in cases} == cases


def test_tokenizer_train_command(tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    words = "the quick brown fox jumps over a lazy dog while seven wizards hum".split()
    rows = [
        {
            "id": f"u{i}",
            "audio": "absent.wav",
            "text": " ".join(words[i:] + words[:i]),
            "duration": 1,
        }
        for i in range(len(words))
    ]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prefix = tmp_path / "sp" / "model"
    args = ["tokenizer", "train", "--manifest", str(manifest), "--manifest", str(manifest)]
    assert main([*args, "--out", str(prefix), "--vocab-size", "40", "--model-type", "bpe"]) == 0
    tokenizer = SentencePieceTokenizer(prefix.with_suffix(".model"))
    assert 3 < tokenizer.vocab_size <= 40
    assert tokenizer.decode(tokenizer.encode("the lazy fox")) == "the lazy fox"


def test_nothing_usable_is_an_error_and_writes_no_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    soundfile.write(corpus / "orphan.wav", np.zeros(1600, np.float32), 16000)  # no transcript
    gone = tmp_path / "gone.jsonl"
    gone.write_text(json.dumps({"id": "g", "audio": "g.wav", "text": "x", "duration": 1}) + "\n")
    out = tmp_path / "m.jsonl"
    for args in (["folder", str(corpus)], ["merge", str(gone)]):
        assert main(["prepare", *args, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"no usable utterances (the reasons are above); {out} was not written" in err
        assert "skipping" in err and not out.exists()
