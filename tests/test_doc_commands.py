"""Every command README.md and docs/*.md name still exists, with flags that parse: `asr
SUBCOMMAND`, `python bench/X.py`, `python -m training.X` and `bash training/recipes/X.sh`.

A command in a code block must parse whole, as its parser would on the command line; one
quoted inline (`asr eval --train-manifest`) is often a fragment, so there only the program
and each --flag it names must exist. Parsing stops before the program runs."""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asr.cli import COMMANDS, build_parser
from tests.conftest import load_bench

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```")
INLINE = re.compile(r"`([^`\n]+)`")
OPERATORS = {"&&", "||", "|", ";", "&"}
REDIRECTS = {">", ">>", "<", "2>", "&>"}


def code_lines(text: str) -> Iterator[str]:
    """The lines of the code blocks (fenced, or indented four spaces after a blank line),
    with backslash continuations joined."""
    fenced = indented = False
    previous_blank = True
    pending = ""
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        blank = not line.strip()
        indented = (indented or previous_blank) and line.startswith("    ") and not blank
        indented = indented or (fenced and not blank)
        previous_blank = blank
        if not indented and not pending:
            continue
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        yield pending
        pending = ""


def commands(line: str) -> Iterator[list[str]]:
    """Each simple command of a shell line, as words (comments, redirections, leading
    VAR=value assignments and the operators between commands removed)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: prose, not a command
        return
    current: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in REDIRECTS:
            skip = True
        elif word in OPERATORS:
            yield current
            current = []
        elif not current and re.fullmatch(r"[A-Z_]+=\S*", word):
            continue
        else:
            current.append(word)
    yield current


class Parsed(Exception):
    """Raised in place of running a program once its parser has read the arguments."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def intercepted_parser(
    main: Any, argv: list[str], parse: bool, monkeypatch: pytest.MonkeyPatch
) -> argparse.ArgumentParser:
    """The parser ``main`` builds; with ``parse``, after it has parsed ``argv`` (an error is
    the usual SystemExit). ``main`` never runs past its parse_args."""
    real = argparse.ArgumentParser.parse_args

    def stop(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        if parse:
            real(self, args, namespace)
        raise Parsed(self)

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", stop)
        patch.setattr(sys, "argv", ["program", *argv])
        try:
            main(argv) if inspect.signature(main).parameters else main()
        except Parsed as done:
            return done.parser
    raise AssertionError(f"{main.__module__}.main returned without parsing its arguments")


def options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and of its subcommands' parsers."""
    found = set()
    for action in parser._actions:
        found |= set(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= options(sub)
    return found


def takes_no_options(program: Path, args: list[str]) -> bool:
    """Whether ``program`` has no argument parser (it would run, not parse); then the command
    must give it no arguments."""
    if "ArgumentParser" in program.read_text():
        return False
    assert not args, f"{program.name} takes no options: {args}"
    return True


def check(words: list[str], whole: bool, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Parse one command if it is one this test knows (None: not one of them); the program
    it ran, for the count of what was checked."""
    if words[:2] in (["asr", "--help"], ["asr", "-h"]):
        return "asr"
    if words[:1] == ["asr"] and len(words) > 1:
        assert words[1] in COMMANDS, f"no such subcommand: asr {words[1]}"
        parser = build_parser(words[1])
        if whole:
            parser.parse_args(words[1:])
        program, args = words[:2], words[2:]
    elif words[:1] == ["bash"] and len(words) > 1 and words[1].endswith(".sh"):
        assert (REPO / words[1]).is_file(), f"no such script: {words[1]}"
        return words[1]
    elif words[:1] == ["python"] and len(words) > 1 and words[1].startswith("bench/"):
        path = REPO / words[1]
        assert path.is_file(), f"no such benchmark: {words[1]}"
        program, args = words[:2], words[2:]
        if takes_no_options(path, args):
            return " ".join(program)
        bench = load_bench(str(path.relative_to(REPO / "bench").with_suffix("")))
        parser = intercepted_parser(bench.main, args, whole, monkeypatch)
    elif words[:2] == ["python", "-m"] and len(words) > 2 and words[2].startswith("training."):
        module = importlib.import_module(words[2])
        program, args = words[:3], words[3:]
        if takes_no_options(Path(module.__file__ or ""), args):
            return " ".join(program)
        parser = intercepted_parser(module.main, args, whole, monkeypatch)
    else:
        return None
    unknown = {w.split("=")[0] for w in args if w.startswith("--")} - options(parser) - {"--"}
    assert not unknown, f"{' '.join(words)}: no such option {sorted(unknown)}"
    return " ".join(program)


def named_commands(path: Path) -> Iterator[tuple[list[str], bool]]:
    """Each command ``path`` names: those of its code blocks (whole), then its inline ones."""
    text = path.read_text()
    for line in code_lines(text):
        for words in commands(line):
            yield words, True
    for span in INLINE.findall(text):
        for words in commands(span):
            yield words, False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_a_document_names_exists_and_parses(
    doc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = []
    for words, whole in named_commands(doc):
        try:
            program = check(words, whole, monkeypatch)
        except SystemExit as stop:
            pytest.fail(f"{doc.name}: `{' '.join(words)}` does not parse (exit {stop.code})")
        if program:
            checked.append(program)
    assert checked or doc.name == "CONTRACTS.md"


def test_a_misspelt_flag_or_a_missing_program_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    line = "asr eval --model m --manifest t.jsonl --beam 1 && python bench/load.py --clients 5"
    assert [check(w, True, monkeypatch) for w in commands(line)] == [
        "asr eval",
        "python bench/load.py",
    ]
    with pytest.raises(SystemExit):
        check(["asr", "eval", "--model", "m", "--manifest", "t", "--beams", "1"], True, monkeypatch)
    with pytest.raises(AssertionError, match="no such option"):
        check(["asr", "eval", "--beams"], False, monkeypatch)
    with pytest.raises(SystemExit):
        check(["python", "bench/streaming.py", "--seconds", "many"], True, monkeypatch)
    with pytest.raises(AssertionError, match="no such benchmark"):
        check(["python", "bench/student_drift.py"], False, monkeypatch)
    with pytest.raises(AssertionError, match="no such subcommand"):
        check(["asr", "speak"], False, monkeypatch)


def test_code_blocks_join_continued_lines_and_drop_comments() -> None:
    text = (
        "Run:\n\n    asr transcribe a.wav \\\n        --format srt > a.srt   # subtitles\n\nprose"
    )
    assert [list(commands(line)) for line in code_lines(text)] == [
        [["asr", "transcribe", "a.wav", "--format", "srt"]]
    ]
    assert list(commands("ASR_API_KEY=k asr stream x.wav --fast")) == [
        ["asr", "stream", "x.wav", "--fast"]
    ]
