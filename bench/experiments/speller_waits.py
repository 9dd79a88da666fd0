"""Why the streaming speller's tokens wait: its learnt policy, or Whisper's decoder.

The speller asks its policy at each candidate boundary from the pointer on and lets the
decoder's likeliest token out at the first yes, unless that token is the end of text or
makes a loop (the decoder says the memory so far holds nothing more). A token can thus
wait for two reasons. For each clip of --manifest (its first --limit), the bundle's
student reads it whole, the bundle's speller spells it, and every boundary asked for a
token before the one it came from is counted as:

- *energy no, decoder settled*: the policy said no, while the decoder already read there
  the token it later let out;
- *energy no, decoder elsewhere*: the policy said no, the decoder read another token;
- *decoder waits*: the policy said yes, the decoder read the end of text or a loop.

It also prints how many tokens waited at least --long boundaries, by their main reason:

    python bench/experiments/speller_waits.py --manifest data/live/dev.jsonl --limit 50
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from asr.bundle import load_model  # noqa: E402
from asr.speller import NextToken, Policy, Speller, SpellerModel  # noqa: E402
from asr.whisper_features import SAMPLE_RATE  # noqa: E402
from training.dataset import entry_audio  # noqa: E402
from training.manifest import read_manifest  # noqa: E402

REASONS = ("energy no, decoder settled", "energy no, decoder elsewhere", "decoder waits")


@dataclass
class Asked:
    """A policy that answers as ``inner`` does, and keeps, per token index, each boundary
    it was asked at, its answer and the decoder's likeliest token read there."""

    inner: Policy
    asks: dict[int, list[tuple[int, bool, int]]] = field(default_factory=dict)
    reads_attention: ClassVar[bool] = False

    @property
    def stride(self) -> int:
        return self.inner.stride

    def emits(self, next_token: NextToken, boundary: int) -> bool:
        yes = self.inner.emits(next_token, boundary)
        token = next_token.read(boundary).token  # the inner policy's reading, memoised
        self.asks.setdefault(len(next_token.tokens), []).append((boundary, yes, token))
        return yes


def waits(model: SpellerModel, policy: Policy, states: np.ndarray) -> list[Counter[str]]:
    """Per token the speller let out of ``states`` (the last state given at the close),
    the boundaries it waited through, by reason."""
    asked = Asked(policy)
    speller = Speller(model, asked)
    speller.accept(states[:-1])
    speller.finish(states[-1:])
    out = []
    for i, (token, boundary) in enumerate(zip(speller.tokens, speller.boundaries)):
        counts: Counter[str] = Counter()
        for b, yes, read in asked.asks.get(i, []):
            if b >= boundary:
                break
            if yes:
                counts[REASONS[2]] += 1
            else:
                counts[REASONS[0] if read == token else REASONS[1]] += 1
        out.append(counts)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "default")
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=50, help="its first N clips (0: all)")
    parser.add_argument("--long", type=int, default=3, help="boundaries a long wait spans")
    args = parser.parse_args(argv)
    recognizer = load_model(args.model)
    model, policy = recognizer.speller()
    assert recognizer.frontend is not None
    entries = read_manifest(args.manifest, require_text=False)[0][: args.limit or None]
    per_token: list[Counter[str]] = []
    for entry in tqdm(entries, unit="utt", desc="spelling"):
        stream = recognizer.frontend.stream()
        samples = entry_audio(entry, SAMPLE_RATE)
        states = np.concatenate([stream.accept(samples), stream.finish()])
        if len(states) >= 2:
            per_token += waits(model, policy, states)
    total: Counter[str] = sum(per_token, Counter())
    print(f"{args.manifest}: {len(entries)} clips, {len(per_token)} tokens")
    for reason in REASONS:
        print(f"  boundaries waited, {reason}: {total[reason]}")
    long = [c for c in per_token if sum(c.values()) >= args.long]
    print(f"  tokens that waited >= {args.long} boundaries: {len(long)}, mostly:")
    for reason in REASONS:
        most = sum(1 for c in long if max(REASONS, key=lambda r: c[r]) == reason)
        print(f"    {reason}: {most}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
