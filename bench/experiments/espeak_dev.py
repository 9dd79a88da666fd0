"""A dev split in voices that neither the corpus's training nor its unseen-voices test
speaks: espeak-ng variants outside the corpus recipe's ESPEAK_VARIANTS and HELD_OUT, under
its accents, over sentences of other dev splits. Every dev split of the recipe is spoken by
voices it trains on, so none can tell whether a change costs voices never heard; the held
out unseen-voices test can, and is not for tuning. This is the nearest a dev split gets,
narrowly (one robotic engine).

    python bench/experiments/espeak_dev.py --manifest data/live/dev.jsonl \\
        /work/data/mix/synth-dev/dev.jsonl --limit 0 50 --out exp/espeak-dev
    python bench/real_speech.py --model models/default --streaming-decoder whisper \\
        --no-whisper --no-two-pass --beam 1 --lm-weight 0 --manifest exp/espeak-dev/dev.jsonl

Each --manifest gives its first sentences in order (--limit 0: all) or a random draw of
--limit of them (--seed); each sentence gets an accent, a variant and the engine's drawn
rate and pitch. OUT gets the 16 kHz WAVs and ``dev.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from training.recipes.engines import ESPEAK_ACCENTS, ESPEAK_VARIANTS, Espeak  # noqa: E402
from training.recipes.synth_corpus import HELD_OUT, RATE, cleaned, write_wav  # noqa: E402

# human-like variants the recipe leaves unused (its robots, whispers and croaks left out)
UNUSED = (
    "m8 f5 klatt5 klatt6 iven iven2 anika boris ed gene grandma grandpa gustave hugo lee "
    "marco michel quincy sandro edward2 pablo"
).split()
assert not set(UNUSED) & {*ESPEAK_VARIANTS, *HELD_OUT["espeak"]}, "a variant the corpus speaks"


def sentences(manifests: list[Path], limits: list[int], rng: random.Random) -> list[str]:
    """Each manifest's texts: all in order (limit 0 or at least its size), else a draw."""
    texts: list[str] = []
    for manifest, limit in zip(manifests, limits, strict=True):
        rows = [json.loads(line)["text"] for line in manifest.read_text().splitlines() if line]
        texts += rows if limit == 0 or limit >= len(rows) else rng.sample(rows, limit)
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", type=Path, nargs="+", required=True, help="sentences")
    parser.add_argument("--limit", type=int, nargs="+", required=True, help="per manifest")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=54)
    args = parser.parse_args(argv)
    if len(args.limit) != len(args.manifest) or min(args.limit) < 0:
        parser.error("--limit: one count of at least 0 per --manifest")
    engine = Espeak("espeak", apt=("espeak-ng",))
    if engine.missing():
        parser.error(f"{engine.missing()}: {engine.install_hint()}")
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, text in enumerate(sentences(args.manifest, args.limit, rng)):
        voice = f"{rng.choice(ESPEAK_ACCENTS)}+{rng.choice(UNUSED)}"
        ((samples, rate),) = engine.synthesize(voice, [(text, engine.params(rng))])
        samples = cleaned(samples, rate)
        path = args.out / f"espeak-dev-{i:03d}.wav"
        write_wav(path, samples)
        duration = round(len(samples) / RATE, 3)
        rows.append({"id": path.stem, "audio": path.name, "text": text, "duration": duration})
        rows[-1] |= {"engine": "espeak", "voice": voice}
    lines = "".join(json.dumps(row) + "\n" for row in rows)
    (args.out / "dev.jsonl").write_text(lines)
    print(f"{len(rows)} utterances, {sum(r['duration'] for r in rows) / 60:.1f} min in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
