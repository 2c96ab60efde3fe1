"""The record of used ephemeral keys (server/key_uses.py): one use each by default,
bounded by the keys' expiry, shared by processes through one SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from server.key_uses import KeyUses

T0 = 1_700_000_000.0


def test_a_key_is_claimed_once() -> None:
    uses = KeyUses()
    assert uses.claim("k1", T0 + 60, T0)
    assert not uses.claim("k1", T0 + 60, T0)
    assert not uses.claim("k1", T0 + 60, T0 + 59)
    assert uses.claim("k2", T0 + 60, T0)  # another key is another count


def test_a_key_may_be_given_several_uses() -> None:
    uses = KeyUses(uses_per_key=3)
    assert [uses.claim("k", T0 + 60, T0) for _ in range(5)] == [True] * 3 + [False] * 2
    with pytest.raises(ValueError):
        KeyUses(uses_per_key=0)  # unlimited is no record at all (server/app.py)


def test_expired_keys_are_forgotten_so_the_record_stays_bounded() -> None:
    uses = KeyUses()
    for n in range(100):
        assert uses.claim(f"old{n}", T0 + 10, T0)
    assert len(uses) == 100
    # Past their expiry (when verify refuses them anyway) they leave the record.
    assert uses.claim("new", T0 + 70, T0 + 10)
    assert len(uses) == 1


def test_processes_sharing_the_file_see_each_others_claims(tmp_path: Path) -> None:
    """Two workers of `parley serve --workers` open the same file: a key used on one
    is used on the other, whichever claims first."""
    path = tmp_path / "key-uses.sqlite3"
    first, second = KeyUses(path), KeyUses(path)
    try:
        assert first.claim("k", T0 + 60, T0)
        assert not second.claim("k", T0 + 60, T0)
        assert second.claim("j", T0 + 60, T0)
        assert not first.claim("j", T0 + 60, T0)
        mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
    finally:
        first.close()
        second.close()
