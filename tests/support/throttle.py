"""Pacing a fake model: held, it lets out one token per permit; freed, everything flows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Throttled:
    held: bool = False
    permits: int = 0
    _cond: asyncio.Condition | None = None

    @property
    def cond(self) -> asyncio.Condition:
        # Made on first use, inside the event loop that waits on it.
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

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
