"""Real human speech from the packages of the allowed list, as 16 kHz WAV with manifests.

    python -m training.recipes.real_audio --out DIR [--sources NAME ...] [--cache DIR]
    python -m training.recipes.real_audio --list

For each source (default: all of ``training/real_audio/sources.py``, English first) it
fetches the pinned ``.deb`` files with ``apt-get download``, checks their SHA-256, unpacks
them with ``dpkg-deb -x`` into the cache (``$ASR_REAL_AUDIO_CACHE``, default
``~/.cache/monotonic-asr/real-audio``), reads the recordings with this project's own
readers of the games' archives and writes DIR/<source>/audio/*.wav and
DIR/<source>/manifest.jsonl: one line per clip with id, audio, text ("" where the package
has no text that is clearly the words spoken), duration, source, language and speaker where
known. Non-English clips say so in ``language``: keep them out of anything that learns
English text. A rerun skips finished clips and sources. A source that is not on the allowed
list, or a package whose hash differs from its pin, stops the run with an error naming it.
No recording belongs in the repository: DIR and the cache are outside it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from training.real_audio.debs import unpack
from training.real_audio.extract import Summary, extract
from training.real_audio.sources import SOURCES, allowed


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "monotonic-asr" / "real-audio"
    return Path(os.environ.get("ASR_REAL_AUDIO_CACHE", default))


def run(names: list[str], out: Path, cache: Path) -> list[Summary]:
    """Extract the named sources into ``out``; every name is checked before anything is
    fetched."""
    sources = [allowed(name) for name in names]
    summaries = []
    for source in sources:
        roots = [unpack(package, cache) for package in source.packages]
        summaries.append(extract(source, roots, out))
    return summaries


def table(summaries: list[Summary]) -> str:
    """The per-source figures as a Markdown table."""
    rows = ["| source | language | hours | clips | with text |", "|---|---|---|---|---|"]
    for s in summaries:
        language = SOURCES[s.source].language
        rows.append(
            f"| {s.source} | {language} | {s.seconds / 3600:.2f} | {s.clips} | {s.with_text} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="output directory (outside the repository)")
    parser.add_argument("--sources", nargs="+", default=list(SOURCES), metavar="NAME")
    parser.add_argument("--cache", type=Path, default=None, help="where .deb files are kept")
    parser.add_argument("--list", action="store_true", help="print the allowed list and exit")
    args = parser.parse_args(argv)
    if args.list:
        for source in SOURCES.values():
            pins = ", ".join(f"{p.name}={p.version}" for p in source.packages)
            print(f"{source.name}\t{source.language}\t{pins}")
        return 0
    if args.out is None:
        parser.error("--out is required")
    try:
        summaries = run(args.sources, args.out, args.cache or cache_dir())
    except (ValueError, RuntimeError) as err:
        print(f"real_audio: {err}", file=sys.stderr)
        return 1
    print(table(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
