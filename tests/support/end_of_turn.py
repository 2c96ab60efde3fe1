"""An end-of-turn model whose answers the test gives (engine/end_of_turn.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import numpy.typing as npt

from tests.support.harness import Harness
from tests.support.waiting_model import WaitingModel


class FakeEndOfTurn(WaitingModel[float]):
    """Each call waits on a future the test resolves (or the session cancels)."""

    async def probability(self, pcm: npt.NDArray[np.int16]) -> float | None:
        return await self._wait(pcm)

    async def asked(self, h: Harness) -> asyncio.Future[float | None]:
        """The one call waiting for an answer, once the session has made it (the
        audio is resampled in a worker thread first)."""
        await h.run_until(lambda: len(self.pending()) == 1)
        [future] = self.pending()
        return future
