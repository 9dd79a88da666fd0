"""Every link between README.md, docs/*.md and the files they name leads somewhere: the file
exists and, where the link names a section, the section does (as GitHub makes its anchor)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "bench/experiments/README.md",
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```", re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCED.sub("", path.read_text())
    return {anchor(m[1]) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def test_an_anchor_is_made_as_github_makes_it() -> None:
    assert anchor("`asr stream`: a streaming client") == "asr-stream-a-streaming-client"
    assert anchor("Prototype: when Whisper's decoder speaks (not yet)") == (
        "prototype-when-whispers-decoder-speaks-not-yet"
    )


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_section(doc: Path) -> None:
    links = [link for link in LINK.findall(doc.read_text()) if "://" not in link]
    for link in links:
        target, _, section = link.partition("#")
        path = (doc.parent / target).resolve() if target else doc
        assert path.exists(), f"{doc.name}: {link}: no such file"
        if section:
            assert section in anchors(path), f"{doc.name}: {link}: no such section"
    assert links or doc.name == "CONTRACTS.md"
