"""One step of Whisper's text decoder (two-pass finals), this tree's against a git revision's.

A step reads one new token per row after a prefix, over a memory of a 30 s window (1,500
states, as a final reads its segment's states and then encoded silence), and scores the
alignment heads, as the finals' search asks. Rows are separate segments (``batch``) or
the hypotheses of one segment's beam (``beam``, rows selected from one memory row). The
two decoders step in turn, on one thread, and each row of the table is their medians.

    python bench/experiments/decoder_step.py --against 55d941c
    python bench/experiments/decoder_step.py --against 55d941c --precision float32
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from asr.whisper_decoder import load_decoder  # noqa: E402

DECODER = ROOT / "models" / "default" / "whisper_decoder.safetensors"


def module_at(revision: str) -> types.ModuleType:
    """``asr/whisper_decoder.py`` as it was at ``revision``, imported on its own."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{revision}:asr/whisper_decoder.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType(f"whisper_decoder_{revision}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{revision}:asr/whisper_decoder.py", "exec"), module.__dict__)
    return module


def prepared(decoder, cache_type, rows: int, beam: bool, prefix: int, states: int):
    """A cache of ``rows`` rows that has read ``prefix`` tokens, and the next tokens."""
    g = torch.Generator().manual_seed(rows)
    segments = 1 if beam else rows
    memory = decoder.memory(torch.randn(segments, states, 512, generator=g))
    tokens = torch.randint(0, 50000, (segments, prefix + 1), generator=g)
    cache = cache_type([], memory)
    if beam:
        cache = cache.select(torch.zeros(rows, dtype=torch.long))
        tokens = tokens.expand(rows, -1)
    return cache, tokens


@torch.inference_mode()
def compare(old, new, heads, rows: int, beam: bool, args) -> tuple[float, float]:
    """Median milliseconds of one step of ``old`` and ``new`` (module, decoder), in turn."""
    runs = []
    for module, decoder in (old, new):
        cache, tokens = prepared(decoder, module.DecoderCache, rows, beam, args.prefix, args.states)
        _, cache, _ = decoder.step(tokens[:, :-1], cache, scores_of=heads)
        runs.append((decoder, cache, tokens[:, -1:], []))
    for _ in range(args.repeats):
        for decoder, cache, token, times in runs:
            started = time.perf_counter()
            decoder.step(token, cache, scores_of=heads)
            times.append(time.perf_counter() - started)
    return tuple(1000 * statistics.median(times) for *_, times in runs)  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="git revision of the old decoder")
    parser.add_argument("--precision", choices=["float32", "bfloat16"], default="bfloat16")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--beams", type=int, nargs="+", default=[4])
    parser.add_argument("--prefix", type=int, default=20, help="tokens read before the step")
    parser.add_argument("--states", type=int, default=1500, help="memory states per segment")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    before = module_at(args.against)
    old_decoder, rules = before.load_decoder(DECODER)
    decoder, _ = load_decoder(DECODER)
    if args.precision == "bfloat16":
        decoder = decoder.in_bfloat16()
    old, new = (before, old_decoder), (sys.modules["asr.whisper_decoder"], decoder)
    print(f"| rows | {args.against} ms | this tree ({args.precision}) ms | speed-up |")
    print("|---|---|---|---|")
    cases = [(n, False) for n in args.batches] + [(n, True) for n in args.beams]
    for rows, beam in cases:
        was, now = compare(old, new, rules.alignment_heads, rows, beam, args)
        name = f"beam of {rows}" if beam else f"{rows} segment{'s' * (rows > 1)}"
        print(f"| {name} | {was:.1f} | {now:.1f} | {was / now:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
