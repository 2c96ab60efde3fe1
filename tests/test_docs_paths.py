"""The docs name files that exist: every repository path in README.md and docs/
(a module, a package folder, a script) is checked against the tree, so a move or a
rename cannot leave the design page or the guides pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# `engine/session.py`, `models/speech/`, `bench/speech/make_fixtures.sh`...
# A URL path (`GET /bench/stats`) has a slash before it: not a file.
PATH = re.compile(r"(?<![\w/])(?:engine|models|server|bench|tests|docker)/[\w/.-]*[\w/]")


def named_paths(text: str) -> set[str]:
    """Repository paths in `text`; a glob or a placeholder (`models/<executor>`,
    `bench/results/profile-*.json`) is not a path."""
    return {
        m.group(0)
        for m in PATH.finditer(text)
        if not re.search(r"[<*{]", text[m.start() : m.end() + 2])
    }


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    missing = sorted(p for p in named_paths(doc.read_text()) if not (ROOT / p).exists())
    assert missing == []


def test_paths_are_found_in_prose() -> None:
    text = (
        "See `engine/session.py`, models/speech/ and bench/load/, not `models/<executor>`,"
        " `bench/results/profile-*.json` or `GET /bench/stats`."
    )
    assert named_paths(text) == {"engine/session.py", "models/speech/", "bench/load/"}
