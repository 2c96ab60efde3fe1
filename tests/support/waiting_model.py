"""A model stand-in whose every call waits on a future the test resolves (or the
session cancels): the fakes of the end-of-turn model and the snippet recognizer."""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

T = TypeVar("T")


class WaitingModel(Generic[T]):
    def __init__(self) -> None:
        self.calls: list[tuple[npt.NDArray[np.int16], asyncio.Future[T | None]]] = []

    async def _wait(self, pcm: npt.NDArray[np.int16]) -> T | None:
        future: asyncio.Future[T | None] = asyncio.get_running_loop().create_future()
        self.calls.append((pcm, future))
        return await future

    def pending(self) -> list[asyncio.Future[T | None]]:
        """The calls not answered yet, oldest first."""
        return [f for _, f in self.calls if not f.done()]
