"""The ``asr`` console script: one subcommand per module, each with its own --help."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import signal
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
    "blend-students": "training.blend",
    "pseudo-label": "training.pseudo_label",
    "train-speller": "training.speller",
    "tune-speller": "training.speller_adapter",
}


def docstring(module_name: str) -> str | None:
    """The module's docstring, read from its source without running it (None: the module is
    not installed). Listing the subcommands must not import them: the server image has no
    ``training`` package, and importing every module would make ``asr serve`` need it."""
    try:
        spec = importlib.util.find_spec(module_name)
    except ModuleNotFoundError:  # its package is missing
        return None
    if spec is None or spec.origin is None:
        return None
    with open(spec.origin, encoding="utf-8") as source:
        return ast.get_docstring(ast.parse(source.read())) or ""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand is listed; only ``command``'s module is imported, for its options."""
    parser = argparse.ArgumentParser(
        prog="asr",
        description="Streaming speech recognition with hard monotonic attention.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        doc = docstring(module_name)
        missing = f"not available: this installation has no {module_name}"
        cmd = sub.add_parser(
            name,
            help=(doc or "").splitlines()[0] if doc is not None else missing,
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name == command:
            if doc is None:
                parser.error(f"{name}: {missing}")
            module = importlib.import_module(module_name)
            module.add_arguments(cmd)
            cmd.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except ValueError as err:
        print(f"asr {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as `yes` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing to flush at exit
        return 128 + signal.SIGPIPE
    except OSError as err:  # a missing file, a directory where a file goes, no permission
        told = f"{err.filename}: {err.strerror}" if err.filename and err.strerror else err
        print(f"asr {args.command}: error: {told}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
