"""Per-key limits: how many sessions (WebSockets and calls) one client holds at once,
and how fast it opens new ones, so that one key cannot take the whole server.

A client is who presented the key (`client_of`): an API key (by a hash prefix,
never the key), an ephemeral key's id, or on an open server (no API keys) the
client's address. New sessions are paced by a token bucket per client (`Bucket`):
`burst` at once, then `per_minute`. The decisions are pure over an explicit clock,
tested directly (tests/server/test_key_limits.py); server/auth.py's KeyStore
applies them when a session opens, after the server's own capacity check.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from typing import Literal

from server.ephemeral_keys import EphemeralKey

# How often idle clients (nothing open, a full bucket) are forgotten.
PRUNE_EVERY_S = 60.0

# Why a session was refused, as /metrics counts it (server/auth.py adds `key_used`).
RefusalReason = Literal["key_sessions_open", "key_new_sessions_rate", "key_used"]


@dataclasses.dataclass(frozen=True)
class Refusal:
    reason: RefusalReason
    message: str  # for the client


def client_of(
    key: str | None, ephemeral: EphemeralKey | None, *, open_server: bool, address: str | None
) -> str:
    """Who a session counts against. On an open server anyone may mint keys, so the
    address is the one identity a client cannot change at will."""
    if open_server:
        return f"addr:{address or 'unknown'}"
    if ephemeral is not None:
        return f"ek:{ephemeral.key_id}"
    digest = hashlib.sha256((key or "").encode()).hexdigest()
    return f"key:{digest[:12]}"  # enough to tell keys apart in a log, useless to a thief


@dataclasses.dataclass
class Bucket:
    """A token bucket: `capacity` tokens, refilled at `rate_per_s`; a new session
    takes one."""

    capacity: float
    rate_per_s: float
    tokens: float
    stamp: float  # when `tokens` was counted

    @classmethod
    def full(cls, capacity: float, rate_per_s: float, now: float) -> Bucket:
        return cls(capacity, rate_per_s, capacity, now)

    def level(self, now: float) -> float:
        """The tokens at `now` (a clock going backwards adds none)."""
        elapsed = max(0.0, now - self.stamp)
        return min(self.capacity, self.tokens + elapsed * self.rate_per_s)

    def take(self, now: float) -> bool:
        """Take a token if there is one."""
        self.tokens, self.stamp = self.level(now), max(now, self.stamp)
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def wait_s(self, now: float) -> float:
        """How long until the next token."""
        return max(0.0, (1 - self.level(now)) / self.rate_per_s)


class KeyLimits:
    """Sessions open per client, and each client's bucket. `max_open` None: no limit
    per client (the server's `max_sessions` still holds); `per_minute` 0: no pacing."""

    def __init__(
        self,
        max_open: int | None,
        per_minute: int,
        burst: int,
        *,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_open = max_open
        self.per_minute = per_minute
        self.burst = burst
        self.now = now
        self._open: dict[str, int] = {}
        self._buckets: dict[str, Bucket] = {}
        self._pruned = now()

    def open(self, client: str) -> Refusal | None:
        """A session of `client` opens: None, and it is counted until `close`; or why
        it may not (nothing is counted)."""
        now = self.now()
        self._prune(now)
        held = self._open.get(client, 0)
        if self.max_open is not None and held >= self.max_open:
            return Refusal(
                "key_sessions_open",
                f"Too many sessions open for this key or client ({self.max_open}); "
                "close one first.",
            )
        if self.per_minute:
            bucket = self._buckets.get(client)
            if bucket is None:
                bucket = Bucket.full(self.burst, self.per_minute / 60, now)
                self._buckets[client] = bucket
            if not bucket.take(now):
                return Refusal(
                    "key_new_sessions_rate",
                    f"Too many new sessions for this key or client ({self.per_minute} a "
                    f"minute); try again in {bucket.wait_s(now):.1f} s.",
                )
        self._open[client] = held + 1
        return None

    def close(self, client: str) -> None:
        held = self._open.get(client, 0) - 1
        if held > 0:
            self._open[client] = held
        else:
            self._open.pop(client, None)

    def held(self, client: str) -> int:
        return self._open.get(client, 0)

    @property
    def clients(self) -> int:
        """Clients remembered (with a session open or a bucket not yet full)."""
        return len(self._open.keys() | self._buckets.keys())

    def _prune(self, now: float) -> None:
        """Forget the buckets that are full again: a full bucket is what a new
        client gets, so memory holds only the clients of the last minutes."""
        if now - self._pruned < PRUNE_EVERY_S:
            return
        self._pruned = now
        for client, bucket in list(self._buckets.items()):
            if bucket.level(now) >= bucket.capacity:
                del self._buckets[client]
