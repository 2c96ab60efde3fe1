"""A hearing recognizer (engine/interruption.py) whose answers the test gives."""

from __future__ import annotations

import asyncio

import numpy as np
import numpy.typing as npt

from models.listening.hearing import Hearing


class FakeHearing:
    """Each hearing waits on a future the test resolves."""

    def __init__(self) -> None:
        self.calls: list[tuple[npt.NDArray[np.int16], asyncio.Future[Hearing | None]]] = []

    async def transcribe(self, pcm: npt.NDArray[np.int16]) -> Hearing | None:
        future: asyncio.Future[Hearing | None] = asyncio.get_running_loop().create_future()
        self.calls.append((pcm, future))
        return await future

    def pending(self) -> list[asyncio.Future[Hearing | None]]:
        return [f for _, f in self.calls if not f.done()]

    def answer(self, text: str | None, *, sure: bool = True) -> bool:
        """Answer the oldest pending hearing (None: it could not hear); whether there
        was one."""
        pending = self.pending()
        if not pending:
            return False
        pending[0].set_result(None if text is None else Hearing(text, sure))
        return True
