"""Pacing a fake model: held, it lets out one token per permit; freed, everything flows.
Each step a fake takes may be stamped with the time it went out (time.monotonic(),
CLOCK_MONOTONIC: one clock for every process on the machine), for a benchmark to set
beside its own times."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Throttled:
    held: bool = False
    permits: int = 0
    _cond: asyncio.Condition | None = None
    stamps: list[tuple[str, float, str]] = field(default_factory=list)  # (step, time, text)

    @property
    def cond(self) -> asyncio.Condition:
        # Made on first use, inside the event loop that waits on it.
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    def stamp(self, step: str, text: str = "") -> None:
        self.stamps.append((step, time.monotonic(), text))

    @staticmethod
    async def pause(seconds: float) -> None:
        """A real server's pace; none (not even a yield) when 0, as in the tests."""
        if seconds > 0:
            await asyncio.sleep(seconds)

    def hold(self) -> None:
        self.held = True

    async def release(self, n: int = 1) -> None:
        async with self.cond:
            self.permits += n
            self.cond.notify_all()

    async def free(self) -> None:
        async with self.cond:
            self.held = False
            self.cond.notify_all()

    async def permit(self, skip: Callable[[], bool] = lambda: False) -> None:
        """Wait until the next token may go out (or `skip()` holds), using a permit."""
        async with self.cond:
            await self.cond.wait_for(lambda: not self.held or self.permits > 0 or skip())
            if self.held and not skip():
                self.permits -= 1
