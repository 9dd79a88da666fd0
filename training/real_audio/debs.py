"""Pinned Debian packages, fetched with apt's own client and unpacked outside the repository.

``apt-get download NAME=VERSION`` keeps the machine's mirrors, proxies and pinning working;
the ``.deb`` then counts only once its SHA-256 is the pinned one (``check_sha256``, as for
wheels), and only then does ``dpkg-deb -x`` unpack it. A kept ``.deb`` or tree is a checked
one, so a rerun fetches and unpacks only what is missing. Only packages of the allowed list
are fetched at all.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from training.packages import check_sha256, run_tool
from training.real_audio.sources import PACKAGES, Package

DONE = ".unpacked"


def apt_download(spec: str, directory: Path) -> None:
    """``apt-get download spec`` into ``directory``."""
    run_tool(["apt-get", "download", "-q", spec], f"apt-get download {spec}", cwd=directory)


def fetch(
    package: Package, cache: Path, download: Callable[[str, Path], None] = apt_download
) -> Path:
    """The checked ``.deb`` of ``package`` in ``cache``; ValueError naming the package if it is
    not on the allowed list or its hash differs (the download is then not kept)."""
    if PACKAGES.get(package.name) != package:
        raise ValueError(f"{package.name}={package.version}: not a package of the allowed list")
    deb = cache / "debs" / f"{package.name}_{package.version.replace(':', '%3a')}.deb"
    if deb.is_file():
        return deb
    deb.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=deb.parent) as tmp:
        download(f"{package.name}={package.version}", Path(tmp))
        found = list(Path(tmp).glob("*.deb"))
        if len(found) != 1:
            raise RuntimeError(f"apt-get download {package.name} left {len(found)} .deb files")
        check_sha256(
            found[0],
            package.sha256,
            f"package {package.name}={package.version} is not the pinned one; not used",
        )
        found[0].replace(deb)
    return deb


def unpack(
    package: Package, cache: Path, download: Callable[[str, Path], None] = apt_download
) -> Path:
    """The package's files, unpacked from its checked ``.deb`` into ``cache/trees``."""
    tree = cache / "trees" / f"{package.name}_{package.version.replace(':', '%3a')}"
    if (tree / DONE).is_file():
        return tree
    deb = fetch(package, cache, download)
    shutil.rmtree(tree, ignore_errors=True)  # a half-unpacked tree from a killed run
    tree.mkdir(parents=True)
    run_tool(["dpkg-deb", "-x", str(deb), str(tree)], f"dpkg-deb -x {deb.name}")
    (tree / DONE).touch()
    return tree
