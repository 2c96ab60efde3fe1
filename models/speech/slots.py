"""A bound on concurrent calls into one model stage."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass
class StageSlots:
    """A bound on concurrent calls into one model, with a count of who waits."""

    name: str
    limit: int
    queued: int = 0
    _sem: asyncio.Semaphore | None = None

    @property
    def idle(self) -> bool:
        """No call in the stage and none waiting."""
        return self.queued == 0 and (self._sem is None or not self._sem.locked())

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.limit)
        self.queued += 1
        try:
            await self._sem.acquire()
        finally:
            self.queued -= 1
        try:
            yield
        finally:
            self._sem.release()
