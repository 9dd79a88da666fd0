"""Train a token n-gram language model into a model bundle, for shallow fusion.

Texts come from manifests (their "text" fields) and from plain text files with one
normalised sentence per line (lower case, no punctuation, as in the manifests). Any
sentence that occurs in an --exclude manifest is dropped, so a test set can never leak
into the language model. The model is written to BUNDLE/lm.npz (or --out); decoding uses
it once decode.lm_weight > 0 (`asr eval --lm-weight`, `asr transcribe --lm-weight`, or
the bundle's config.json).

Examples:
  asr lm --model models/default --text data/synth/lm_text.txt \\
      --exclude data/synth/test_seen_voices.jsonl --exclude data/synth/test_unseen_voices.jsonl
  asr lm --model exp/default/best_bundle --manifest data/train.jsonl --order 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from asr.bundle import TOKENIZER_FILES
from asr.config import Config
from asr.lm import LM_FILE, TokenLM
from asr.tokenizer import load_tokenizer
from training.manifest import read_manifest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, required=True, help="model bundle directory")
    parser.add_argument(
        "--manifest", type=Path, action="append", default=[], help="texts of a manifest (repeat)"
    )
    parser.add_argument(
        "--text", type=Path, action="append", default=[], help="one sentence per line (repeat)"
    )
    parser.add_argument(
        "--exclude",
        type=Path,
        action="append",
        default=[],
        help="drop every sentence of this manifest (repeat; e.g. the test sets)",
    )
    parser.add_argument("--order", type=int, default=5, help="n-gram order in tokens")
    parser.add_argument("--out", type=Path, help=f"output file (default: MODEL/{LM_FILE})")


def sentence_key(text: str) -> str:
    """A sentence as read_texts compares it: lower-cased, with single spaces."""
    return " ".join(text.lower().split())


def read_texts(manifests: list[Path], texts: list[Path]) -> list[str]:
    """Sentences of the manifests and text files, in order, lower-cased with single spaces;
    blank lines skipped."""
    sentences = [e.text for m in manifests for e in read_manifest(m, check_audio=False)[0]]
    for path in texts:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: not UTF-8 text ({err})") from None
        sentences += [line for line in lines if line.strip()]
    return [sentence_key(s) for s in sentences]


def run(args: argparse.Namespace) -> int:
    if not args.manifest and not args.text:
        raise ValueError("give the text to learn from: --manifest and/or --text")
    config = Config.load(args.model / "config.json")
    tokenizer_file = args.model / TOKENIZER_FILES[config.model.tokenizer.kind]
    tokenizer = load_tokenizer(tokenizer_file)
    sentences = read_texts(args.manifest, args.text)
    excluded = set(read_texts(args.exclude, []))
    kept = [s for s in sentences if s not in excluded]
    if not kept:
        raise ValueError("no sentences left to learn from")
    sequences = [
        tokenizer.encode(s) for s in tqdm(kept, desc="tokenizing", unit="sent", file=sys.stderr)
    ]
    lm = TokenLM.train(sequences, tokenizer.vocab_size, args.order)
    out = args.out or args.model / LM_FILE
    lm.save(out)
    print(
        f"{out}: {args.order}-gram over {tokenizer.vocab_size} tokens from {len(kept)} sentences "
        f"({len(sentences) - len(kept)} excluded), {out.stat().st_size / 1e6:.1f} MB"
    )
    return 0
