"""Streaming benchmark: real-time factor, per-chunk latency, memory per session, streams per core, linear vs quadratic.

    python bench/streaming.py [--model DIR] [--seconds 60] [--batch 25] [--json PATH]
    python bench/streaming.py --streaming-decoder whisper   # the streaming pass by Whisper's decoder

Uses the bundled model (``models/default``) when it exists, otherwise a
randomly initialised model of the default :class:`Config` size whose monotonic
energy offset r is 0, so that it selects states and emits tokens as a trained
model does (with r = -4 an untrained model stays silent and decoding is
unrealistically cheap). Everything runs on one thread. Speech comes from
espeak-ng when it is installed, otherwise from a synthetic voiced signal.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import typing
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.audio import read_audio, resample  # noqa: E402
from asr.bundle import load_model  # noqa: E402
from asr.config import Config, StreamingDecoder  # noqa: E402
from asr.decoding import SegmentSearch, drain  # noqa: E402
from asr.features import CMVN, Fbank  # noqa: E402
from asr.frontend import frames_of_many  # noqa: E402
from asr.model import Seq2Seq  # noqa: E402
from asr.recognizer import Recognizer  # noqa: E402
from asr.streaming import step_sessions  # noqa: E402
from asr.tokenizer import SymbolTokenizer  # noqa: E402

# The goals by front end: the first bundled-model issue's for fbank models; issue #17's for
# the Whisper front end, whose chunk-causal encoder keeps a key/value ring of its left
# context per session (no per-chunk or memory goal there).
GOALS: dict[str, dict[str, float | None]] = {
    "fbank": {"rtf": 0.05, "p95_ms": 20.0, "session_mb": 2.0},
    "whisper": {"rtf": 0.1, "p95_ms": None, "session_mb": None},
}
CHUNK_S = 0.1
LOAD_CLIENTS = 50  # bench/load.py's goal: 50 real-time clients on this machine

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "she sells sea shells by the sea shore",
    "a stitch in time saves nine",
    "all that glitters is not gold",
    "actions speak louder than words",
    "every cloud has a silver lining",
    "where there is smoke there is fire",
    "the pen is mightier than the sword",
]


# -- inputs -------------------------------------------------------------------
def speech(seconds: float, rate: int = 16000) -> np.ndarray:
    """About ``seconds`` of speech at ``rate``: espeak-ng sentences with short pauses, repeated."""
    pieces = _espeak_sentences(rate) or [_synthetic_voice(rate, 2.0 + 0.3 * i) for i in range(4)]
    pause = np.zeros(int(0.4 * rate), dtype=np.float32)
    out, total, i = [], 0, 0
    while total < seconds * rate:
        piece = pieces[i % len(pieces)]
        out += [piece, pause]
        total += len(piece) + len(pause)
        i += 1
    return np.concatenate(out)[: int(seconds * rate)]


def _espeak_sentences(rate: int) -> list[np.ndarray]:
    if shutil.which("espeak-ng") is None:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        pieces = []
        for i, text in enumerate(SENTENCES):
            path = Path(tmp) / f"{i}.wav"
            subprocess.run(["espeak-ng", "-w", str(path), text], check=True, capture_output=True)
            samples, src = read_audio(path)
            pieces.append(resample(samples, src, rate))
        return pieces


def _synthetic_voice(rate: int, seconds: float) -> np.ndarray:
    """A pitch-gliding pulse train through a moving resonance: speech-like spectra without a TTS."""
    rng = np.random.default_rng(int(seconds * 10))
    t = np.arange(int(rate * seconds)) / rate
    f0 = 110 + 30 * np.sin(2 * np.pi * 0.7 * t)
    voiced = np.sign(np.sin(2 * np.pi * np.cumsum(f0) / rate))
    formant = np.sin(2 * np.pi * (500 + 1500 * (0.5 + 0.5 * np.sin(2 * np.pi * 2 * t))) * t)
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2
    x = 0.2 * envelope * voiced * formant + 0.01 * rng.standard_normal(len(t))
    return x.astype(np.float32)


def random_recognizer(config: Config, audio16k: np.ndarray, seed: int = 0) -> Recognizer:
    """A random-weight model of ``config``'s size with CMVN from ``audio16k`` and a symbol tokenizer."""
    torch.manual_seed(seed)
    n_symbols = config.model.tokenizer.vocab_size - 3
    tokenizer = SymbolTokenizer([f"s{i}" for i in range(n_symbols)])
    model = Seq2Seq(config.model, tokenizer.vocab_size)
    cmvn = CMVN()
    cmvn.accumulate(Fbank(config.model.features).compute(audio16k))
    cmvn.finalize()
    model.set_cmvn(torch.from_numpy(cmvn.mean), torch.from_numpy(cmvn.std))
    model.eval()
    return Recognizer(config, model, tokenizer)


def default_config(attention: str = "monotonic") -> Config:
    data = Config().to_dict()
    data["model"]["attention"].update(kind=attention, init_r=0.0)
    return Config.from_dict(data)


# -- measurements -------------------------------------------------------------
def stream_timing(
    recognizer: Recognizer, audio16k: np.ndarray
) -> tuple[float, float, list[float], int]:
    """(real-time factor, CPU-time RTF, seconds per 100 ms chunk, tokens) for one stream."""
    chunk = int(16000 * CHUNK_S)
    session = recognizer.stream(16000)
    session.accept(audio16k[:chunk])  # warm-up outside the timed part
    session = recognizer.stream(16000)
    times, tokens = [], 0
    cpu = time.thread_time()
    start = time.perf_counter()
    for i in range(0, len(audio16k), chunk):
        t0 = time.perf_counter()
        events = session.accept(audio16k[i : i + chunk])
        times.append(time.perf_counter() - t0)
        tokens += sum(len(e.tokens) for e in events if e.final)
    tokens += sum(len(e.tokens) for e in session.finish() if e.final)
    total = time.perf_counter() - start
    cpu = time.thread_time() - cpu
    seconds = len(audio16k) / 16000
    return total / seconds, cpu / seconds, times, tokens


def batched_timing(recognizer: Recognizer, audio16k: np.ndarray, n: int) -> tuple[float, float]:
    """(wall seconds per stream per second of audio, and the front end's part of that) for
    n sessions stepped together in 100 ms chunks, as a server's model process steps the
    sessions it serves: its inverse is how many real-time streams one core carries."""
    chunk = int(16000 * CHUNK_S)
    shift = len(audio16k) // max(n, 1)
    clips = [np.roll(audio16k, k * shift) for k in range(n)]  # each session its own words
    starts = range(0, len(audio16k), chunk)
    step_sessions([recognizer.stream(16000)], [audio16k[:chunk]])  # warm-up

    sessions = [recognizer.stream(16000) for _ in range(n)]
    start = time.perf_counter()
    for i in starts:
        step_sessions(sessions, [c[i : i + chunk] for c in clips])
    step_sessions(sessions, [None] * n)
    whole = time.perf_counter() - start

    assert recognizer.frontend is not None
    streams = [recognizer.frontend.stream() for _ in range(n)]
    start = time.perf_counter()
    for i in starts:
        frames_of_many(streams, [c[i : i + chunk] for c in clips], [False] * n)
    frames_of_many(streams, [c[:0] for c in clips], [True] * n)
    front = time.perf_counter() - start
    seconds = n * len(audio16k) / 16000
    return whole / seconds, front / seconds


def rss_bytes() -> int:
    try:
        import psutil

        return psutil.Process(os.getpid()).memory_info().rss
    except ImportError:  # Linux fallback
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def idle_session_memory(recognizer: Recognizer, audio16k: np.ndarray, n: int = 50) -> float:
    """Mean RSS growth per idle session: ``n`` sessions, each fed one second and then left idle."""
    second = audio16k[:16000]
    warm = [recognizer.stream(16000) for _ in range(2)]
    for s in warm:
        s.accept(second)
    gc.collect()
    before = rss_bytes()
    sessions = []
    for _ in range(n):
        session = recognizer.stream(16000)
        session.accept(second)
        sessions.append(session)
    gc.collect()
    after = rss_bytes()
    del sessions, warm
    return (after - before) / n


def decode_time(model: Seq2Seq, config: Config, states: int, seed: int = 0) -> tuple[float, int]:
    """Decode-only seconds and tokens for a fixed random memory of ``states`` encoder states."""
    generator = torch.Generator().manual_seed(seed)
    memory = torch.randn(states, model.cfg.encoder.units, generator=generator).tanh()
    search = SegmentSearch(model, config.decode)
    start = time.perf_counter()
    search.append(memory)
    tokens = sum(len(s.tokens) for s in drain(search))
    return time.perf_counter() - start, tokens


def scaling_table(base_states: int) -> list[tuple[str, int, float, int]]:
    """Monotonic and softmax decode time at 1x, 4x and 16x memory, in one run."""
    rows = []
    for kind in ("monotonic", "softmax"):
        config = default_config(kind)
        config.decode.endpoint_on_eos = False
        torch.manual_seed(0)
        model = Seq2Seq(config.model, config.model.tokenizer.vocab_size).eval()
        for factor in (1, 4, 16):
            states = base_states * factor
            # softmax only stops at the token cap: let it grow with the input, as speech does
            config.decode.max_tokens = states // 2 if kind == "softmax" else 100 * states
            with torch.no_grad():
                seconds, tokens = decode_time(model, config, states)
            rows.append((kind, factor, seconds, tokens))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "default")
    parser.add_argument("--seconds", type=float, default=60.0, help="audio for the RTF run")
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument(
        "--batch",
        type=int,
        default=LOAD_CLIENTS // (os.cpu_count() or 1),
        help="sessions stepped together for the per-core capacity (default: the load goal's "
        "clients per core)",
    )
    parser.add_argument(
        "--batch-seconds", type=float, default=8.0, help="audio per session of that run"
    )
    parser.add_argument("--base-states", type=int, default=200, help="1x memory for the table")
    parser.add_argument("--json", type=Path, help="also write the printed figures here as JSON")
    parser.add_argument(
        "--streaming-decoder",
        choices=typing.get_args(StreamingDecoder),
        help="what writes the streaming pass (default: the bundle's decode.streaming_decoder)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)

    audio = speech(args.seconds)
    if (args.model / "config.json").is_file():
        recognizer = load_model(args.model)
        # the streaming pass alone: two-pass finals are bench/final_latency.py's
        recognizer.set_search(two_pass=False, streaming_decoder=args.streaming_decoder)
        what = f"bundled model {args.model}, {recognizer.config.decode.streaming_decoder} decoder"
    else:
        recognizer = random_recognizer(default_config(), audio)
        what = "random model of the default Config size (init_r=0; no bundle found)"
    cfg = recognizer.config.model
    print(f"model: {what}")
    print(
        f"  {recognizer.model.num_parameters() / 1e6:.2f} M parameters; encoder "
        f"{cfg.encoder.layers}x{cfg.encoder.units} reductions {cfg.encoder.reductions}; "
        f"decoder {cfg.decoder.units}; attention {cfg.attention.kind}; "
        f"beam {recognizer.config.decode.beam_size}; torch threads {torch.get_num_threads()}"
    )

    rtf, cpu_rtf, times, tokens = stream_timing(recognizer, audio)
    ms = np.array(times) * 1000
    p50, p95 = np.percentile(ms, 50), np.percentile(ms, 95)
    per_session = idle_session_memory(recognizer, audio, args.sessions)
    print(f"\none stream, {args.seconds:.0f} s of audio in 100 ms chunks ({tokens} tokens emitted)")
    load = os.getloadavg()[0]
    print(f"  machine load average {load:.2f} on {os.cpu_count()} cores")
    print(f"  {'figure':<32}{'measured':>12}{'goal':>12}  ok")
    goals = GOALS[cfg.frontend]
    for name, value, goal, unit in [
        ("real-time factor (wall clock)", rtf, goals["rtf"], ""),
        ("real-time factor (CPU time)", cpu_rtf, goals["rtf"], ""),
        ("p50 per 100 ms chunk", p50, None, " ms"),
        ("p95 per 100 ms chunk", p95, goals["p95_ms"], " ms"),
        ("max per 100 ms chunk", ms.max(), None, " ms"),
        (
            f"memory per idle session (RSS/{args.sessions})",
            per_session / 2**20,
            goals["session_mb"],
            " MB",
        ),
    ]:
        goal_text = f"<= {goal:g}{unit}" if goal is not None else ""
        ok = "" if goal is None else ("yes" if value <= goal else "NO")
        print(f"  {name:<32}{value:>9.3f}{unit:<3}{goal_text:>12}  {ok}")

    batch_audio = audio[: int(16000 * args.batch_seconds)]
    batch_rtf, batch_front = batched_timing(recognizer, batch_audio, args.batch)
    cores = LOAD_CLIENTS * batch_rtf
    print(
        f"\n{args.batch} sessions stepped together on one thread (as one model process of the "
        f"server), {len(batch_audio) / 16000:g} s each"
    )
    print(f"  {'per-stream real-time factor':<40}{batch_rtf:>8.3f}")
    print(f"  {'  of which the front end':<40}{batch_front:>8.3f}")
    print(f"  {'real-time streams one core carries':<40}{1 / batch_rtf:>8.1f}")
    print(f"  {f'cores {LOAD_CLIENTS} streams need at this rate':<40}{cores:>8.2f}")

    print(f"\ndecode only, fixed random memory ({args.base_states} states = 1x), one run")
    print(f"  {'attention':<10}{'length':>7}{'states':>8}{'tokens':>8}{'seconds':>10}{'x time':>8}")
    rows = scaling_table(args.base_states)
    base = {}
    for kind, factor, seconds, n_tokens in rows:
        base.setdefault(kind, seconds)
        print(
            f"  {kind:<10}{factor:>6}x{args.base_states * factor:>8}{n_tokens:>8}"
            f"{seconds:>10.3f}{seconds / base[kind]:>7.1f}x"
        )
    print("  goal: monotonic 16x length -> at most 20x time; softmax visibly worse than linear")
    if args.json:
        figures = {
            "model": what,
            "audio_seconds": args.seconds,
            "tokens": tokens,
            "load_average": load,
            "cores": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "rtf": rtf,
            "cpu_rtf": cpu_rtf,
            "chunk_ms": {"p50": float(p50), "p95": float(p95), "max": float(ms.max())},
            "session_mb": per_session / 2**20,
            "batched": {
                "sessions": args.batch,
                "audio_seconds": len(batch_audio) / 16000,
                "rtf": batch_rtf,
                "front_end_rtf": batch_front,
            },
            "scaling": [
                {"attention": kind, "length": factor, "tokens": n, "seconds": seconds}
                for kind, factor, seconds, n in rows
            ],
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
