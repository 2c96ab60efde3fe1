"""How many sessions each ephemeral key has opened: one by default, so that a key
handed to a browser opens its one WebSocket or call and nothing more.

The record is a small SQLite table (stdlib sqlite3): in memory for one process, or
a file that every process on one host opens (`PARLEY_KEY_USES_DB`; `parley serve
--workers` makes a fresh one for its workers), where SQLite's locking makes one
claim win whichever worker takes the second connection. Replicas on other hosts
keep their own record: a key could open one session on each (docs/deploy.md).

A key's row lives until the key expires; each claim first drops the rows of expired
keys, so the table holds at most the keys used within the longest key lifetime.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

# How long a claim waits for another process's write (each takes microseconds).
_BUSY_TIMEOUT_S = 1.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS key_uses "
    "(key_id TEXT PRIMARY KEY, expires_at REAL NOT NULL, uses INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS key_uses_by_expiry ON key_uses (expires_at)",
)


class KeyUses:
    """The uses of ephemeral keys, `uses_per_key` each at most."""

    def __init__(self, path: Path | None = None, *, uses_per_key: int = 1) -> None:
        if uses_per_key < 1:
            raise ValueError("uses_per_key must be at least 1 (no record: unlimited)")
        self.uses_per_key = uses_per_key
        # Autocommit: each statement is its own transaction, and the upsert in
        # `claim` is atomic across processes.
        self._db = sqlite3.connect(
            ":memory:" if path is None else path,
            timeout=_BUSY_TIMEOUT_S,
            isolation_level=None,
            check_same_thread=False,
        )
        if path is not None:
            # Readers never block the writer; NORMAL: a crash of the host (not of a
            # process) may forget the last claims, which the keys' expiry bounds.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        for statement in _SCHEMA:
            self._db.execute(statement)

    def claim(self, key_id: str, expires_at: float, now: float) -> bool:
        """Count one use of the key: True if it had uses left (now one fewer), False
        if it was used up. Raises sqlite3.Error when the record cannot be written."""
        self._db.execute("DELETE FROM key_uses WHERE expires_at <= ?", (now,))
        cursor = self._db.execute(
            "INSERT INTO key_uses (key_id, expires_at, uses) VALUES (?, ?, 1) "
            "ON CONFLICT (key_id) DO UPDATE SET uses = uses + 1 WHERE uses < ?",
            (key_id, expires_at, self.uses_per_key),
        )
        return cursor.rowcount == 1

    def __len__(self) -> int:
        """Keys recorded (used and not yet expired)."""
        (count,) = self._db.execute("SELECT count(*) FROM key_uses").fetchone()
        return int(count)

    def close(self) -> None:
        self._db.close()
