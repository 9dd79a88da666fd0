"""The ``asr`` console script: one subcommand per module, each with its own --help."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module exposing ``add_arguments(parser)`` and ``run(args) -> int``;
# the module docstring's first line is the subcommand's help.
COMMANDS: dict[str, str] = {
    "serve": "server.cli",
    "stream": "server.client",
    "prepare": "training.prepare",
    "tokenizer": "training.tokenizer_cli",
    "transcribe": "asr.transcribe",
    "train": "training.train",
    "eval": "training.evaluate",
    "lm": "training.lm_cli",
    "import-whisper": "training.whisper_import",
    "distill": "training.distill",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asr",
        description="Streaming speech recognition with hard monotonic attention.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or "").strip()
        cmd = sub.add_parser(
            name,
            help=doc.splitlines()[0] if doc else None,
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError) as err:
        print(f"asr {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
