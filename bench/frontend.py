"""Front-end benchmark: each encoder variant's cost, latency and how much a fixed probe hears.

    python bench/frontend.py --variants fbank teacher masked:8 student:exp/distill-c8/student \\
        --probe-train data/synth/train.jsonl --probe-hours 2.35 --probe-epochs 10 \\
        --probe-test data/synth/test_seen_voices.jsonl data/synth/test_unseen_voices.jsonl

Variants: ``fbank`` (80-dim filterbank, 10 ms); ``teacher`` (Whisper-base with full
attention over each utterance: offline, the upper bound); ``masked:C`` (the same
weights under the streaming mask with chunks of C states of 20 ms); ``student:DIR``
(a distilled student, at the chunk it was distilled for, or ``student:DIR:C``).
A two-pass final reads the teacher over its segment: on whole utterances, as the
probe is scored, that is the ``teacher`` row.

For each it prints the algorithmic latency (how long after a piece of audio its
frame exists, at worst), the one-thread real-time factor of the front end in float
and with int8 linear layers (medians of interleaved repeats), and, with --probe-*,
the greedy CER of a fixed probe on the test manifests: a 1-layer 256-unit LSTM with
a CTC character head trained on the variant's frames for a fixed number of epochs
(the same seed, data and budget for every variant). Frames and finished scores are kept
under --work, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.audio import read_audio, resample  # noqa: E402
from asr.config import ModelConfig, WhisperConfig  # noqa: E402
from asr.features import Fbank  # noqa: E402
from asr.scoring import cer  # noqa: E402
from asr.whisper_encoder import (  # noqa: E402
    Streaming,
    WhisperEncoder,
    load_encoder,
    quantized,
    weights_file,
    weights_metadata,
)
from asr.whisper_features import SAMPLE_RATE, StreamingWhisperMel, log_mel  # noqa: E402
from training.dataset import entry_audio, make_batches  # noqa: E402
from training.manifest import read_manifest  # noqa: E402

TEACHER = ROOT / "models" / "whisper-base"
CHARS = " abcdefghijklmnopqrstuvwxyz'"
STFT_LOOKAHEAD_MS = 12.5  # a log-mel frame needs 200 samples after its centre


class Variant:
    """Audio -> frames for one encoder variant, float or int8."""

    def __init__(self, spec: str, int8: bool = False) -> None:
        self.spec = spec
        kind, _, rest = spec.partition(":")
        self.kind = kind
        self.streaming: Streaming | None = None
        self.encoder: WhisperEncoder | None = None
        if kind == "fbank":
            self.fbank = Fbank(ModelConfig().features)
            return
        if kind == "teacher":
            self.encoder = load_encoder(TEACHER)
        elif kind == "masked":
            self.encoder = load_encoder(TEACHER)
            self.streaming = Streaming(chunk=int(rest), left_context=500)
        elif kind == "student":
            path, _, chunk = rest.partition(":")
            self.encoder = load_encoder(path)
            saved = json.loads(weights_metadata(weights_file(path)).get("streaming", "{}"))
            self.streaming = Streaming(**saved) if saved else Streaming()
            if chunk:
                self.streaming = Streaming(int(chunk), self.streaming.left_context)
        else:
            raise SystemExit(f"unknown variant {spec!r}")
        if int8:
            self.encoder = quantized(self.encoder)

    @property
    def latency_ms(self) -> float:
        """Worst case: the first audio of a chunk waits for the chunk, then the lookahead."""
        if self.kind == "fbank":
            return 25.0  # one 25 ms window
        if self.streaming is None:
            return float("inf")  # needs the whole utterance
        return self.streaming.chunk * 20 + STFT_LOOKAHEAD_MS

    @torch.no_grad()
    def frames(self, samples: np.ndarray) -> np.ndarray:
        if self.kind == "fbank":
            return self.fbank.compute(samples)
        assert self.encoder is not None
        mel = torch.from_numpy(log_mel(samples, WhisperConfig().floor))
        return self.encoder.encode_whole(mel, self.streaming).numpy()

    @torch.no_grad()
    def served(self, samples: np.ndarray) -> np.ndarray:
        """The same frames the way serving makes them, whose cost the RTF is: streaming
        variants through the log-mel stream and the encoder's key/value ring."""
        if self.encoder is None or self.streaming is None:
            return self.frames(samples)
        mel = StreamingWhisperMel(WhisperConfig().floor)
        stream = self.encoder.stream(self.streaming)
        first = stream.accept(torch.from_numpy(mel.accept(samples)))
        rest = stream.accept(torch.from_numpy(mel.finish()))
        return torch.cat([first, rest, stream.finish()]).numpy()


def real_time_factors(
    floats: dict[str, Variant], audio: list[np.ndarray], repeats: int
) -> dict[str, tuple[float, float]]:
    """Median one-thread RTF per variant, float and int8, repeats interleaved across variants."""
    torch.set_num_threads(1)
    seconds = sum(len(a) for a in audio) / SAMPLE_RATE
    specs = list(floats)
    variants = {(s, False): v for s, v in floats.items()}
    variants.update({(s, True): Variant(s, True) for s in specs if s != "fbank"})
    times: dict[tuple[str, bool], list[float]] = {k: [] for k in variants}
    for _ in range(repeats):
        for key, variant in variants.items():
            start = time.perf_counter()
            for samples in audio:
                variant.served(samples)
            times[key].append((time.perf_counter() - start) / seconds)
    return {
        s: (
            statistics.median(times[(s, False)]),
            statistics.median(times[(s, True)]) if (s, True) in times else float("nan"),
        )
        for s in specs
    }


class Probe(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.lstm = nn.LSTM(dim, 256, batch_first=True)
        self.out = nn.Linear(256, len(CHARS) + 1)  # + blank (0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.lstm(self.norm(x))[0]).log_softmax(-1)


def _targets(text: str) -> list[int]:
    return [CHARS.index(c) + 1 for c in text.lower() if c in CHARS]


def train_probe(
    feats: list[torch.Tensor], texts: list[str], frame_seconds: float, epochs: int, seed: int = 0
) -> tuple[Probe, list[float]]:
    """The probe trained for ``epochs`` (a count, not a time, so a busy machine measures the
    same thing) on frames and their texts -> (probe, mean CTC loss per epoch)."""
    torch.manual_seed(seed)
    targets = [torch.tensor(_targets(t)) for t in texts]
    probe = Probe(feats[0].shape[1])
    optimizer = torch.optim.Adam(probe.parameters(), lr=1e-3)
    max_frames = int(40 / frame_seconds)
    losses = []
    for epoch in tqdm(range(epochs), desc="probe epochs", unit="epoch", leave=False):
        total = []
        for batch in make_batches([len(f) for f in feats], max_frames, seed, epoch):
            x = nn.utils.rnn.pad_sequence([feats[i] for i in batch], batch_first=True)
            y = [targets[i] for i in batch]
            loss = nn.functional.ctc_loss(
                probe(x).transpose(0, 1),
                torch.cat(y),
                torch.tensor([len(feats[i]) for i in batch]),
                torch.tensor([len(t) for t in y]),
                zero_infinity=True,
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total.append(float(loss.detach()))
        losses.append(sum(total) / len(total))
    return probe.eval(), losses


@torch.no_grad()
def probe_cer(probe: Probe, feats: list[torch.Tensor], texts: list[str]) -> float:
    """Greedy CTC decoding of each utterance's frames; CER against the texts."""
    refs, hyps = [], []
    for x, text in zip(feats, texts):
        best = probe(x[None])[0].argmax(-1).tolist()
        kept = [t for i, t in enumerate(best) if t and (i == 0 or t != best[i - 1])]
        refs.append("".join(CHARS[t - 1] for t in _targets(text)).strip())
        hyps.append("".join(CHARS[t - 1] for t in kept).strip())
    return cer(refs, hyps).rate


def probe_scores(
    variant: Variant, train: list, setting: str, tests: dict[str, list], epochs: int, work: Path
) -> dict[str, float]:
    """Train the probe on the variant's frames of ``train`` (described by ``setting``); its CER
    on each test set.

    Frames (float16) and the trained probe are kept under ``work`` per variant, so a rerun
    after an interruption, or with another test set, computes only what is missing."""
    torch.set_num_threads(2)
    slug = variant.spec.replace("/", "_").replace(":", "-")
    seconds = 0.01 if variant.kind == "fbank" else 0.02

    def frames(name: str, entries: list) -> list[torch.Tensor]:
        path = work / slug / f"{name.replace('/', '_')}-{len(entries)}.npz"
        if path.exists():
            with np.load(path) as saved:
                return [
                    torch.from_numpy(saved[str(i)].astype(np.float32)) for i in range(len(entries))
                ]
        out = [
            variant.frames(entry_audio(e, SAMPLE_RATE))
            for e in tqdm(entries, desc=f"{variant.spec} frames of {name}", unit="utt")
        ]
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.npz")
        np.savez(partial, **{str(i): f.astype(np.float16) for i, f in enumerate(out)})
        partial.replace(path)
        return [torch.from_numpy(f) for f in out]

    digest = hashlib.sha1(setting.encode()).hexdigest()[:12]
    probe_path = work / slug / f"probe-{digest}.pt"
    if probe_path.exists():
        state = torch.load(probe_path, weights_only=True)
        probe = Probe(state["norm.weight"].shape[0])  # the frames' width, as it was trained
        probe.load_state_dict(state)
        probe.eval()
    else:
        probe, losses = train_probe(
            frames("train", train), [e.text for e in train], seconds, epochs
        )
        print(f"{variant.spec}: probe CTC loss per epoch {[round(x, 3) for x in losses]}")
        torch.save(probe.state_dict(), probe_path)
    return {
        name: probe_cer(probe, frames(name, entries), [e.text for e in entries])
        for name, entries in tests.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variants", nargs="+", default=["fbank", "teacher", "masked:8"])
    parser.add_argument(
        "--audio", nargs="*", type=Path, help="files for the RTF (default: shipped held-out)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probe-train", type=Path)
    parser.add_argument(
        "--probe-hours", type=float, default=2.35, help="first N hours of --probe-train"
    )
    parser.add_argument("--probe-epochs", type=int, default=10)
    parser.add_argument("--probe-test", nargs="*", type=Path, default=[])
    parser.add_argument("--probe-test-limit", type=int, default=300)
    parser.add_argument(
        "--work",
        type=Path,
        default=ROOT / "exp" / "bench-frontend",
        help="frames and finished probe scores, kept so a rerun resumes",
    )
    args = parser.parse_args()

    files = args.audio or sorted((ROOT / "tests" / "data" / "heldout").glob("*/*.flac"))
    audio = []
    for f in files:
        samples, rate = read_audio(f)
        audio.append(resample(samples, rate, SAMPLE_RATE))
    floats = {spec: Variant(spec) for spec in args.variants}
    rtf = real_time_factors(floats, audio, args.repeats)
    cers: dict[str, dict[str, float]] = {}
    if args.probe_train:
        train, hours = [], 0.0
        for entry in read_manifest(args.probe_train)[0]:
            if hours >= args.probe_hours:
                break
            train.append(entry)
            hours += (entry.duration or 0.0) / 3600
        tests = {str(p): read_manifest(p)[0][: args.probe_test_limit] for p in args.probe_test}
        done_path = args.work / "scores.json"
        done = json.loads(done_path.read_text()) if done_path.exists() else {}
        setting = f"{args.probe_train}:{args.probe_hours}h:{args.probe_epochs}ep"
        for spec in args.variants:
            keys = {
                name: f"{spec} @ {setting} @ {name}[:{args.probe_test_limit}]" for name in tests
            }
            missing = {name: tests[name] for name, key in keys.items() if key not in done}
            if missing:
                found = probe_scores(
                    floats[spec], train, setting, missing, args.probe_epochs, args.work
                )
                done.update({keys[name]: cer_ for name, cer_ in found.items()})
                args.work.mkdir(parents=True, exist_ok=True)
                done_path.write_text(json.dumps(done, indent=1))
            cers[spec] = {name: done[key] for name, key in keys.items()}
            print(f"{spec}: probe CER {cers[spec]}", flush=True)
    names = [str(p) for p in args.probe_test]
    print(
        f"\n{sum(len(a) for a in audio) / SAMPLE_RATE:.0f} s of audio, one thread, median of {args.repeats}"
    )
    print(
        "| variant | latency (ms) | RTF float | RTF int8 |"
        + "".join(f" CER {Path(n).parent.name}/{Path(n).stem} |" for n in names)
    )
    print("|---|---|---|---|" + "---|" * len(names))
    for spec in args.variants:
        latency = floats[spec].latency_ms
        cells = [f"{100 * cers[spec][n]:.1f}%" if spec in cers else "-" for n in names]
        shown = "offline" if latency == float("inf") else f"{latency:.1f}"
        int8 = "-" if np.isnan(rtf[spec][1]) else f"{rtf[spec][1]:.3f}"
        print(
            f"| {spec} | {shown} | {rtf[spec][0]:.3f} | {int8} |"
            + "".join(f" {c} |" for c in cells)
        )


if __name__ == "__main__":
    main()
