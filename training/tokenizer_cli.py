"""Train a sentencepiece tokenizer on the texts of one or more manifests.

Examples:
  asr tokenizer train --manifest data/train.jsonl --out data/sp256 --vocab-size 256
  asr tokenizer train --manifest a.jsonl --manifest b.jsonl --out data/bpe500 \\
      --vocab-size 500 --model-type bpe
"""

from __future__ import annotations

import argparse
from pathlib import Path

from asr.tokenizer import SentencePieceTokenizer
from training.manifest import read_manifest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = sub.add_parser("train", help="train a sentencepiece model from manifest texts")
    p.add_argument(
        "--manifest", type=Path, action="append", required=True, help="repeat for several"
    )
    p.add_argument("--out", type=Path, required=True, help="model prefix: writes PREFIX.model")
    p.add_argument("--vocab-size", type=int, required=True, help="upper bound on pieces")
    p.add_argument("--model-type", choices=("unigram", "bpe"), default="unigram")


def run(args: argparse.Namespace) -> int:
    # Texts only: the audio is not opened, so a tokenizer can be built before the audio is.
    texts = [e.text for m in args.manifest for e in read_manifest(m, check_audio=False)[0]]
    tokenizer = SentencePieceTokenizer.train(texts, args.out, args.vocab_size, args.model_type)
    print(f"{tokenizer.path}: {tokenizer.vocab_size} pieces from {len(texts)} texts")
    return 0
