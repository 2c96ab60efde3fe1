"""A snippet recognizer (engine/interruption.py) whose answers the test gives."""

from __future__ import annotations

import asyncio

import numpy as np
import numpy.typing as npt


class FakeSnippets:
    """Each transcription waits on a future the test resolves."""

    def __init__(self) -> None:
        self.calls: list[tuple[npt.NDArray[np.int16], asyncio.Future[str | None]]] = []

    async def transcribe(self, pcm: npt.NDArray[np.int16]) -> str | None:
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self.calls.append((pcm, future))
        return await future

    def pending(self) -> list[asyncio.Future[str | None]]:
        return [f for _, f in self.calls if not f.done()]

    def answer(self, text: str | None) -> bool:
        """Answer the oldest pending call; whether there was one."""
        pending = self.pending()
        if not pending:
            return False
        pending[0].set_result(text)
        return True
