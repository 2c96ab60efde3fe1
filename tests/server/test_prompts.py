"""The operator's prompt templates (server/prompts.py): read once at start, by plain
file names only, so a session's prompt id is a key and never a path."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.prompts import load_prompts, template_key


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("support.txt", "support"),
        ("pmpt_68ab-x.txt", "pmpt_68ab-x"),
        ("support@2.txt", "support@2"),
        ("support@2.1.txt", "support@2.1"),
        ("support.md", None),
        (".hidden.txt", None),
        ("two words.txt", None),
        ("a@.txt", None),
        ("a@.x.txt", None),
        ("@2.txt", None),
    ],
)
def test_which_files_are_prompts(name: str, key: str | None) -> None:
    assert template_key(name) == key


def test_only_plain_files_directly_in_the_directory_are_read(tmp_path: Path) -> None:
    (tmp_path / "support.txt").write_text("Help {{customer}}.\n")
    (tmp_path / "support@2.txt").write_text("Version two.")
    (tmp_path / "notes.md").write_text("not a prompt")
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "inner.txt").write_text("not read")
    outside = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    outside.write_text("the operator's secret")
    (tmp_path / "link.txt").symlink_to(outside)
    library = load_prompts(tmp_path)
    assert dict(library.templates) == {"support": "Help {{customer}}.", "support@2": "Version two."}


def test_a_missing_directory_stops_the_server_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        load_prompts(tmp_path / "absent")
