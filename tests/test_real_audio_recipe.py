"""The real-audio recipe without the network: the loose-file sources on small package trees
built here (Warzone 2100's zip, Hedgewars, MegaGlest, Fish Fillets, Tux Paint, Asterisk's
G.722 prompts with their text listing, Codec 2), the refusals (a source off the allowed
list, a package whose hash differs, each named), and a rerun that decodes nothing twice."""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile

from training.real_audio import asterisk, codec2, debs, games, tuxpaint
from training.real_audio.clip import Clip
from training.real_audio.extract import extract
from training.real_audio.sources import PACKAGES, SOURCES, Source
from training.recipes import real_audio


def tone(rate: int = 22050, seconds: float = 0.3, frequency: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.3 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


def ogg(path: Path | None = None, frequency: float = 440.0) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, tone(frequency=frequency), 22050, format="OGG")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(out.getvalue())
    return out.getvalue()


def test_warzone_takes_speech_from_the_zip_not_effects(tmp_path: Path) -> None:
    wz = tmp_path / "usr" / "share" / "games" / "warzone2100" / "base.wz"
    wz.parent.mkdir(parents=True)
    with zipfile.ZipFile(wz, "w") as z:
        for name in (
            "audio/memressp/pcv450.ogg",
            "audio/sfx/weapons/gun.ogg",
            "audio/radclick/radclik1.ogg",
            "sequenceaudio/np1.ogg",
            "audio/x.txt",
        ):
            z.writestr(name, ogg())
    clips = list(games.warzone(tmp_path))
    assert [c.id for c in clips] == ["audio-memressp-pcv450", "sequenceaudio-np1"]
    samples, rate = clips[0].load()
    assert rate == 22050 and len(samples) == len(tone())


def test_hedgewars_marks_each_pack_with_its_language(tmp_path: Path) -> None:
    voices = tmp_path / "Data" / "Sounds" / "voices"
    for pack in ("Default", "Default_es", "Pirate"):
        ogg(voices / pack / "Hello.ogg")
    clips = list(games.hedgewars(tmp_path))
    assert [(c.id, c.language, c.speaker, c.text) for c in clips] == [
        ("Default-Hello", "en", "hedgewars-Default", ""),
        ("Default_es-Hello", "es", "hedgewars-Default_es", ""),
        ("Pirate-Hello", "en", "hedgewars-Pirate", ""),
    ]


def test_megaglest_keeps_spoken_replies_once(tmp_path: Path) -> None:
    units = tmp_path / "techs" / "megapack" / "factions"
    reply = ogg(units / "magic" / "units" / "mage" / "sounds" / "mage_ack1.wav")
    (units / "tech" / "units" / "mage" / "sounds").mkdir(parents=True)
    (units / "tech" / "units" / "mage" / "sounds" / "mage_ack1.wav").write_bytes(reply)  # shared
    ogg(units / "tech" / "units" / "mage" / "sounds" / "mage_select2.wav", 600.0)
    ogg(units / "tech" / "units" / "mage" / "sounds" / "mage_attack1.wav")  # a sword, not words
    assert [c.id for c in games.megaglest(tmp_path)] == [
        "megapack-factions-magic-units-mage-sounds-mage_ack1",
        "megapack-factions-tech-units-mage-sounds-mage_select2",
    ]


def test_fillets_takes_one_language(tmp_path: Path) -> None:
    sound = tmp_path / "fillets-ng" / "sound"
    ogg(sound / "city" / "cs" / "vit-m-hlava.ogg")
    ogg(sound / "city" / "nl" / "vit-m-hlava.ogg")
    assert [c.id for c in games.fillets(tmp_path, "cs")] == ["city-cs-vit-m-hlava"]


def test_tuxpaint_pairs_each_reading_with_its_language_line(tmp_path: Path) -> None:
    birds = tmp_path / "tuxpaint" / "stamps" / "animals" / "birds"
    ogg(birds / "rosella_desc.ogg")
    ogg(birds / "rosella_desc_fr.ogg")
    ogg(birds / "rosella_desc_lt.ogg")
    ogg(birds / "rosella.ogg")  # the stamp's sound effect
    (birds / "rosella.txt").write_text(
        "An Adelaide Rosella.\nfr.utf8=Une  perruche.\nde.utf8=Ein Sittich.\n"
    )
    clips = list(tuxpaint.clips(tmp_path))
    assert [(c.id, c.language, c.text) for c in clips] == [
        ("animals-birds-rosella_desc", "en", "An Adelaide Rosella."),
        ("animals-birds-rosella_desc_fr", "fr", "Une perruche."),
        ("animals-birds-rosella_desc_lt", "lt", ""),
    ]


def g722(path: Path, seconds: float) -> None:
    """Headerless G.722 made by FFmpeg's encoder."""
    pcm = (tone(16000, seconds) * 32767).astype(np.int16)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format="g722") as container:
        stream = container.add_stream("g722", rate=16000)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(pcm[None, :], format="s16", layout="mono")
        frame.sample_rate = 16000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)


def test_asterisk_core_prompts_get_their_listed_words(tmp_path: Path) -> None:
    sounds = tmp_path / "audio" / "usr" / "share" / "asterisk" / "sounds" / "fr_CA_f_June"
    g722(sounds / "activated.g722", 0.5)
    g722(sounds / "digits" / "1.g722", 0.25)
    g722(sounds / "beeperr.g722", 0.25)
    g722(sounds / "unlisted.g722", 0.25)
    listing = (
        "; Core Asterisk Sounds in French\n\nactivated: activé\ndigits/1: un\nbeeperr: (ahooga)\n"
    )
    doc = tmp_path / "text" / "usr" / "share" / "doc" / "core-sounds-fr.txt.gz"
    doc.parent.mkdir(parents=True)
    doc.write_bytes(gzip.compress(listing.encode()))
    clips = list(asterisk.core(tmp_path / "audio", tmp_path / "text"))
    assert [(c.id, c.text, c.speaker) for c in clips] == [
        ("fr_CA_f_June-activated", "activé", "fr_CA_f_June"),
        ("fr_CA_f_June-beeperr", "", "fr_CA_f_June"),  # a described sound, not words
        ("fr_CA_f_June-digits-1", "un", "fr_CA_f_June"),
        ("fr_CA_f_June-unlisted", "", "fr_CA_f_June"),
    ]
    samples, rate = clips[0].load()
    assert rate == 16000 and len(samples) == 8000 and 0.2 < np.abs(samples).max() < 0.4


def test_asterisk_prompt_sets_read_wav_and_headerless_gsm(tmp_path: Path) -> None:
    sounds = tmp_path / "usr" / "share" / "asterisk" / "sounds" / "fr"
    sounds.mkdir(parents=True)
    soundfile.write(sounds / "vm-intro.wav", tone(8000), 8000)
    soundfile.write(sounds / "agent-pass.gsm", tone(8000), 8000, format="RAW", subtype="GSM610")
    clips = list(asterisk.prompts(tmp_path))
    assert [(c.id, c.speaker, c.text) for c in clips] == [
        ("fr-agent-pass", "fr", ""),
        ("fr-vm-intro", "fr", ""),
    ]
    samples, rate = clips[0].load()
    assert rate == 8000 and abs(len(samples) - len(tone(8000))) < 160


def test_codec2_leaves_out_the_compilation(tmp_path: Path) -> None:
    folder = tmp_path / "usr" / "share" / "codec2" / "wav"
    folder.mkdir(parents=True)
    for name in ("hts1a.wav", "all.wav", "vk5qi.wav"):
        soundfile.write(folder / name, tone(8000), 8000)
    assert [c.id for c in codec2.clips(tmp_path)] == ["hts1a", "vk5qi"]


def test_a_source_off_the_allowed_list_is_refused_by_name(tmp_path: Path) -> None:
    for held_out in ("asterisk-core-sounds-es-g722", "espeak-ng-data"):
        with pytest.raises(ValueError, match=f"{held_out}: not on the allowed list"):
            real_audio.run(["drascula", held_out], tmp_path / "out", tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # refused before anything was fetched
    assert real_audio.main(["--out", str(tmp_path / "out"), "--sources", "held-out"]) == 1
    stranger = debs.Package("asterisk-core-sounds-es-g722", "1.6.1-1", "0" * 64)
    with pytest.raises(ValueError, match="asterisk-core-sounds-es-g722=1.6.1-1: not a package"):
        debs.fetch(stranger, tmp_path / "cache", lambda spec, folder: pytest.fail("fetched"))


def test_a_package_whose_hash_differs_is_refused_by_name(tmp_path: Path) -> None:
    package = PACKAGES["codec2-examples"]

    def download(spec: str, folder: Path) -> None:
        assert spec == f"codec2-examples={package.version}"
        (folder / "codec2-examples_1.0.5-1_all.deb").write_bytes(b"a different package")

    with pytest.raises(ValueError, match="package codec2-examples=1.0.5-1 is not the pinned one"):
        debs.fetch(package, tmp_path, download)
    assert list((tmp_path / "debs").iterdir()) == []  # the wrong file is not kept


def test_extraction_writes_16k_wavs_and_a_rerun_decodes_nothing(tmp_path: Path) -> None:
    loads: list[str] = []

    def clips(roots: list[Path]) -> list[Clip]:
        def load(name: str, rate: int):
            loads.append(name)
            if name == "broken":
                raise ValueError("not audio")
            return tone(rate, 0.5), rate

        return [
            Clip("a", lambda: load("a", 11025), text="hello there", speaker="s1"),
            Clip("b", lambda: load("b", 44100), language="fr"),
            Clip("broken", lambda: load("broken", 8000)),
        ]

    source = Source("toy", "en", (), clips)
    first = extract(source, [], tmp_path)
    assert loads == ["a", "b", "broken"]
    assert (first.clips, first.with_text) == (2, 1) and abs(first.seconds - 1.0) < 0.01
    rows = [
        json.loads(line) for line in (tmp_path / "toy" / "manifest.jsonl").read_text().splitlines()
    ]
    assert rows[0] == {
        "id": "toy-a",
        "audio": "audio/a.wav",
        "text": "hello there",
        "duration": rows[0]["duration"],
        "source": "toy",
        "language": "en",
        "speaker": "s1",
    }
    assert rows[1]["language"] == "fr" and "speaker" not in rows[1]
    info = soundfile.info(str(tmp_path / "toy" / "audio" / "b.wav"))
    assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
    (tmp_path / "toy" / "manifest.jsonl").unlink()  # as if killed before the manifest
    (tmp_path / "toy" / "audio" / "a.wav").unlink()
    loads.clear()
    assert extract(source, [], tmp_path) == first
    assert loads == ["a", "broken"]  # b's WAV was finished: not decoded again
    loads.clear()
    again = extract(source, [], tmp_path)  # a finished source: read from its manifest
    assert loads == [] and (again.clips, again.with_text) == (2, 1)
    assert again.seconds == pytest.approx(first.seconds, abs=1e-3)


def test_every_allowed_source_is_pinned_by_hash() -> None:
    assert list(SOURCES)[:7] == [
        "flight-of-the-amazon-queen",
        "beneath-a-steel-sky",
        "drascula",
        "warzone2100-data",
        "hedgewars-data",
        "megaglest-data",
        "codec2-examples",
    ]
    assert all(len(p.sha256) == 64 and p.version for p in PACKAGES.values())
    assert not [name for name in PACKAGES if name.startswith("asterisk-core-sounds-es")]
