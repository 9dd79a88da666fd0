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

It also prints how many tokens waited at least --long boundaries, by their main reason,
and, for the last token of each word that matches the clip's text (its end aligned by
the bundle's CTC head, as ``bench/word_latency.py`` aligns it), the boundaries it waited
through after its word had ended, by reason: the word latency's tail.

    python bench/experiments/speller_waits.py --manifest data/live/dev.jsonl --limit 50
"""

from __future__ import annotations

import argparse
import difflib
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
from asr.frontend import STATE_SECONDS  # noqa: E402
from asr.speller import NextToken, Policy, Speller, SpellerModel  # noqa: E402
from asr.whisper_features import SAMPLE_RATE  # noqa: E402
from bench.word_latency import Aligner  # noqa: E402
from training.dataset import entry_audio  # noqa: E402
from training.manifest import read_manifest  # noqa: E402
from training.recipes.textnorm import normalize  # noqa: E402

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


@dataclass
class Spelled:
    """A clip's tokens as the speller let them out, and per token the boundaries it waited
    through before its own, each with its reason (one of ``REASONS``)."""

    tokens: list[int]
    waits: list[list[tuple[int, str]]]

    def counts(self) -> list[Counter[str]]:
        return [Counter(reason for _, reason in token) for token in self.waits]


def waits(model: SpellerModel, policy: Policy, states: np.ndarray) -> Spelled:
    """The speller's reading of ``states`` (the last state given at the close) and the
    boundaries each token waited through, by reason."""
    asked = Asked(policy)
    speller = Speller(model, asked)
    speller.accept(states[:-1])
    speller.finish(states[-1:])
    out = []
    for i, (token, boundary) in enumerate(zip(speller.tokens, speller.boundaries)):
        reasons = []
        for b, yes, read in asked.asks.get(i, []):
            if b >= boundary:
                break
            reason = REASONS[2] if yes else REASONS[0] if read == token else REASONS[1]
            reasons.append((b, reason))
        out.append(reasons)
    return Spelled(list(speller.tokens), out)


def word_final_tokens(model: SpellerModel, tokens: list[int]) -> list[tuple[str, int]]:
    """The speller's words as references spell them (normalised), each with the index of
    the last token of the word it came from."""
    pieces = model.vocabulary.pieces(tokens)
    out: list[tuple[str, int]] = []
    start = 0
    for k in range(len(pieces)):
        if k + 1 == len(pieces) or pieces[k + 1].startswith(" "):
            out += [(w, k) for w in normalize("".join(pieces[start : k + 1])).split()]
            start = k + 1
    return out


def late_waits(
    model: SpellerModel, spelled: Spelled, reference: list[str], ends: list[float]
) -> list[Counter[str]]:
    """Per right word (matched to ``reference``, whose words end at ``ends`` s), the
    boundaries its last token waited through after the word had ended, by reason."""
    words = word_final_tokens(model, spelled.tokens)
    match = difflib.SequenceMatcher(a=reference, b=[w for w, _ in words], autojunk=False)
    out = []
    for a, b, n in match.get_matching_blocks():
        for k in range(n):
            token = words[b + k][1]
            end = ends[a + k]
            late = [r for at, r in spelled.waits[token] if at * STATE_SECONDS > end]
            out.append(Counter(late))
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
    aligner = Aligner.of(recognizer)
    per_token: list[Counter[str]] = []
    per_word: list[Counter[str]] = []
    for entry in tqdm(entries, unit="utt", desc="spelling"):
        stream = recognizer.frontend.stream()
        samples = entry_audio(entry, SAMPLE_RATE)
        states = np.concatenate([stream.accept(samples), stream.finish()])
        if len(states) < 2:
            continue
        spelled = waits(model, policy, states)
        per_token += spelled.counts()
        ends = aligner.word_ends(samples, entry.text) if entry.text else None
        if ends is not None:
            per_word += late_waits(model, spelled, entry.text.split(), ends)
    total: Counter[str] = sum(per_token, Counter())
    print(f"{args.manifest}: {len(entries)} clips, {len(per_token)} tokens")
    for reason in REASONS:
        print(f"  boundaries waited, {reason}: {total[reason]}")
    long = [c for c in per_token if sum(c.values()) >= args.long]
    print(f"  tokens that waited >= {args.long} boundaries: {len(long)}, mostly:")
    for reason in REASONS:
        most = sum(1 for c in long if max(REASONS, key=lambda r: c[r]) == reason)
        print(f"    {reason}: {most}")
    late: Counter[str] = sum(per_word, Counter())
    held = sum(1 for c in per_word if c)
    print(f"  right words (aligned): {len(per_word)}; their last token waited past the word's")
    print(f"  end at one boundary or more: {held}; boundaries waited past the end:")
    for reason in REASONS:
        print(f"    {reason}: {late[reason]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
