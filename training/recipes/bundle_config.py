"""Settings written into a bundle's config.json, as ``section.key=value`` overrides (those
``asr train`` takes, checked the same way): a recipe's candidate bundle that differs from
its base by a setting, e.g. the prime its streams begin from.

    python -m training.recipes.bundle_config exp/real/bundle model.whisper.prime=16
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from asr.config import Config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", type=Path, help="the bundle whose config.json changes")
    parser.add_argument("overrides", nargs="+", metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    path = args.bundle / "config.json"
    if not path.is_file():
        parser.error(f"{args.bundle}: no bundle there (config.json)")
    try:
        config = Config.load(path, args.overrides)
    except (ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    config.save(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
