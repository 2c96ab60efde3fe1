"""Resume tokens: how a client whose connection dropped gets its session back
(Parley's resume extension, off unless the client asks).

A session that asked is announced a token while it is attached. When its connection
drops it is detached, not closed, for `window_s`; a new connection that presents the
token, with the same key, within the window takes it over. It may also take over a
session the server still thinks attached: a phone that left Wi-Fi reconnects before
the server notices its old connection is dead, and token and key prove it is the
same client (the old connection is cut). A token is good once: the
session taking it over is announced a new one. It is kept hashed (a leaked memory
dump or log line reveals no usable token) and bound to its key: an ephemeral key's
id, or the API key's hash, so a token stolen without its key is useless. Detached
sessions are bounded (`max_detached`): past it the oldest is closed at once.

Pure bookkeeping on an injected clock; the server closes what `expired` returns.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

WINDOW_S = 30.0
MAX_DETACHED = 256

Refusal = Literal["unknown_token", "expired", "wrong_key"]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class _Entry:
    session_id: str
    owner: str  # the key the session was opened with (an id or a hash, never the key)
    detached_at: float | None = None  # None: attached to a connection now


@dataclass(frozen=True)
class Claimed:
    session_id: str
    attached: bool = False  # its old connection still holds it: cut that one off


@dataclass(frozen=True)
class Refused:
    reason: Refusal


class ResumeTokens:
    def __init__(
        self,
        window_s: float = WINDOW_S,
        max_detached: int = MAX_DETACHED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.max_detached = max_detached
        self.clock = clock
        self._by_digest: dict[str, _Entry] = {}
        self._token_of: dict[str, str] = {}  # session id -> its token's digest
        self._detached: OrderedDict[str, float] = OrderedDict()  # session id -> when

    def issue(self, session_id: str, owner: str) -> str:
        """A new token for an attached session (the one before it, if any, is void)."""
        self._void(session_id)
        token = "rt_" + secrets.token_urlsafe(32)
        digest = _digest(token)
        self._by_digest[digest] = _Entry(session_id, owner)
        self._token_of[session_id] = digest
        return token

    def detach(self, session_id: str) -> list[str]:
        """The session's connection dropped: its token may be claimed within the
        window. The sessions to close now: the oldest detached, past the bound."""
        digest = self._token_of.get(session_id)
        if digest is None:
            return []
        now = self.clock()
        self._by_digest[digest].detached_at = now
        self._detached[session_id] = now
        evicted = []
        while len(self._detached) > self.max_detached:
            oldest, _ = self._detached.popitem(last=False)
            self._void(oldest)
            evicted.append(oldest)
        return evicted

    def claim(self, token: str, owner: str) -> Claimed | Refused:
        """Take over a detached session. The token is spent whatever the answer but
        a wrong key's (so a stranger cannot burn another's token by guessing it)."""
        entry = self._by_digest.get(_digest(token))
        if entry is None:
            return Refused("unknown_token")
        if not secrets.compare_digest(entry.owner, owner):
            return Refused("wrong_key")
        session_id, detached_at = entry.session_id, entry.detached_at
        expired = detached_at is not None and self.clock() - detached_at > self.window_s
        self._void(session_id)
        return Refused("expired") if expired else Claimed(session_id, detached_at is None)

    def expired(self) -> list[str]:
        """Detached sessions whose window has passed: the server closes them."""
        now = self.clock()
        gone = [s for s, at in self._detached.items() if now - at > self.window_s]
        for session_id in gone:
            self._void(session_id)
        return gone

    def forget(self, session_id: str) -> None:
        """The session closed (its client ended it, or the server did)."""
        self._void(session_id)

    @property
    def detached(self) -> int:
        return len(self._detached)

    def _void(self, session_id: str) -> None:
        digest = self._token_of.pop(session_id, None)
        if digest is not None:
            self._by_digest.pop(digest, None)
        self._detached.pop(session_id, None)
