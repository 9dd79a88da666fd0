"""The Docker image's contents serve, checked without a Docker engine.

Exactly the files that ``docker/Dockerfile`` copies (read from its COPY lines and
filtered by its ``.dockerignore``, so the test and the image cannot drift) are
installed into a fresh virtual environment, which then runs the image's own CMD
on loopback and transcribes a shipped held-out file. The environment borrows the
already installed third-party packages (torch and the rest) through a path entry,
never this checkout: ``import training`` must fail there, as it does in the image.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import soundfile

from asr.cli import COMMANDS
from server.client import file_frames, stream
from tests.test_server_cli import serve_process
from tests.test_server_support import offline_text

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "docker" / "Dockerfile"
SPEECH = REPO / "tests" / "data" / "heldout" / "test_seen_voices" / "03.flac"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of this checkout


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def arguments(text: str) -> list[str]:
    """An instruction's arguments in JSON (exec) form or shell form."""
    return json.loads(text) if text.startswith("[") else shlex.split(text)


def ignore_rules(path: Path) -> list[tuple[re.Pattern[str], bool]]:
    """.dockerignore patterns as (regex, excludes): ``*`` stays within one path element,
    ``**`` spans any number, ``!`` re-includes; the last matching rule wins."""
    rules = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated, pattern = line.startswith("!"), line.lstrip("!").strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*")
        rules.append((re.compile(regex + r"\Z"), not negated))
    return rules


def in_context(relative: PurePosixPath, rules: list[tuple[re.Pattern[str], bool]]) -> bool:
    """Whether the build context holds this file: a rule matching the file or any folder
    above it decides, as in Docker."""
    candidates = [str(relative), *(str(parent) for parent in relative.parents if parent.parts)]
    included = True
    for regex, excludes in rules:
        if any(regex.match(candidate) for candidate in candidates):
            included = not excludes
    return included


def build_context(root: Path) -> list[str]:
    """Copy into ``root`` (standing for the image's WORKDIR) what the Dockerfile's COPY
    lines take from the build context; returns the CMD with its WORKDIR paths under root."""
    rules = ignore_rules(DOCKERFILE.with_name(DOCKERFILE.name + ".dockerignore"))
    workdir, cmd, copied = "/", [], 0
    for instruction, text in instructions(DOCKERFILE):
        if instruction == "WORKDIR":
            workdir = text
        elif instruction == "CMD":
            cmd = arguments(text)
        elif instruction in ("COPY", "ADD"):
            *sources, destination = arguments(text)
            assert not any(s.startswith("--") for s in sources), f"COPY flags: {text}"
            target = root / PurePosixPath(workdir, destination).relative_to(workdir)
            into = destination.endswith("/") or len(sources) > 1
            for source in sources:
                copied += copy_source(REPO / source, target, into, rules)
    assert copied and cmd
    return [
        str(root) + arg[len(workdir) :] if arg.startswith(workdir + "/") else arg for arg in cmd
    ]


def copy_source(origin: Path, target: Path, into: bool, rules) -> int:
    """Docker's COPY of one source: a folder's contents go into ``target``, a file to
    ``target`` (into it when ``into``); files the context leaves out are skipped."""
    files = sorted(p for p in origin.rglob("*") if p.is_file()) if origin.is_dir() else [origin]
    copied = 0
    for path in files:
        if not in_context(PurePosixPath(path.relative_to(REPO).as_posix()), rules):
            continue
        if origin.is_dir():
            destination = target / path.relative_to(origin)
        else:
            destination = target / path.name if into else target
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)
        copied += 1
    return copied


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """(the venv, the WORKDIR copy, the CMD with paths under it)."""
    tmp = tmp_path_factory.mktemp("image")
    app = tmp / "app"
    cmd = build_context(app)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run(
        [
            *pip,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            tmp / "wheels",
            app,
        ],
        check=True,
        capture_output=True,
    )
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    wheels = sorted((tmp / "wheels").glob("*.whl"))
    subprocess.run(
        [*pip, "--python", python, "install", "--no-deps", "--no-index", *wheels],
        check=True,
        capture_output=True,
    )
    # the third-party packages already installed, as plain path entries: their .pth
    # files (this checkout's editable install among them) are not run
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "installed-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv, app, cmd


def run_in(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=ENV, capture_output=True, text=True
    )


def test_image_has_no_training_package(image, tmp_path):
    venv, _, _ = image
    found = run_in(venv, "python", "-c", "import asr, server; print(asr.__file__)", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert found.stdout.startswith(str(venv))
    missing = run_in(venv, "python", "-c", "import training", cwd=tmp_path)
    assert "No module named 'training'" in missing.stderr


def test_image_cli_lists_every_subcommand(image, tmp_path):
    venv, _, _ = image
    shown = run_in(venv, "asr", "--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    for name in COMMANDS:
        assert re.search(rf"^\s+{name}\b", shown.stdout, re.MULTILINE), name
    assert "serve" in run_in(venv, "asr", "serve", "--help", cwd=tmp_path).stdout
    train = run_in(venv, "asr", "train", "--help", cwd=tmp_path)
    assert train.returncode == 2
    assert "no training.train" in train.stderr


def test_image_serves_a_stream(image, tmp_path):
    """The image's CMD, on loopback with one model process, transcribes a held-out file."""
    venv, app, cmd = image
    assert cmd[:2] == ["asr", "serve"]
    samples, rate = soundfile.read(SPEECH, dtype="float32")
    args = [str(venv / "bin" / "asr"), *cmd[1:], "--host", "127.0.0.1", "--workers", "1"]
    with serve_process(args, tmp_path, ENV) as served:
        url = f"ws://127.0.0.1:{served.port}/v1/stream"
        transcript = asyncio.run(stream(url, file_frames(samples, rate, paced=False), rate))
    output = served.output
    assert "Traceback" not in output, output
    assert transcript.text == offline_text(app / "models" / "default", samples, rate)
    assert transcript.text  # the bundled model says something for a held-out sentence
