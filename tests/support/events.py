"""Reading server events on a client: each frame parsed and validated against the SDK,
within a safety limit per event."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.sdk_check import assert_sdk_event

TIMEOUT_S = 10.0  # per event: a safety net, not a pace

Receive = Callable[[], Awaitable[str | bytes]]
Check = Callable[[dict[str, Any]], Any]


async def read_event(recv: Receive, check: Check = assert_sdk_event) -> dict[str, Any]:
    """The next server event, parsed and checked."""
    raw: dict[str, Any] = json.loads(await asyncio.wait_for(recv(), TIMEOUT_S))
    check(raw)
    return raw


def matches(event: dict[str, Any], kind: str, match: dict[str, Any]) -> bool:
    """`event` is of `kind` and its fields, or its `response`'s fields, hold `match`."""
    if event["type"] != kind:
        return False
    fields = {**event, **event.get("response", {})}
    return all(fields.get(k) == v for k, v in match.items())


class Events:
    """Every event received so far, validated; `until` waits for one to arrive."""

    def __init__(self, recv: Receive, check: Check = assert_sdk_event) -> None:
        self.recv = recv
        self.check = check
        self.all: list[dict[str, Any]] = []

    async def next(self) -> dict[str, Any]:
        raw = await read_event(self.recv, self.check)
        self.all.append(raw)
        return raw

    async def until(self, kind: str, **match: Any) -> dict[str, Any]:
        """Read up to the next event of `kind` whose fields (or whose `response`'s
        fields) match; safety net: TIMEOUT_S per event."""
        while not matches(event := await self.next(), kind, match):
            pass
        return event

    def of(self, kind: str, since: int = 0) -> list[dict[str, Any]]:
        return [e for e in self.all[since:] if e["type"] == kind]

    def types(self, since: int = 0) -> list[str]:
        return [e["type"] for e in self.all[since:]]

    def index(self, event: dict[str, Any]) -> int:
        return next(i for i, e in enumerate(self.all) if e is event)
