"""An end-of-turn model whose answers the test gives (engine/end_of_turn.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import numpy.typing as npt

from tests.support.harness import Harness


class FakeEndOfTurn:
    """Each call waits on a future the test resolves (or the session cancels)."""

    def __init__(self) -> None:
        self.calls: list[tuple[npt.NDArray[np.int16], asyncio.Future[float | None]]] = []

    async def probability(self, pcm: npt.NDArray[np.int16]) -> float | None:
        future: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()
        self.calls.append((pcm, future))
        return await future

    def live(self) -> list[asyncio.Future[float | None]]:
        return [f for _, f in self.calls if not f.done()]

    async def asked(self, h: Harness) -> asyncio.Future[float | None]:
        """The one call waiting for an answer, once the session has made it (the
        audio is resampled in a worker thread first)."""
        await h.run_until(lambda: len(self.live()) == 1)
        [future] = self.live()
        return future
