"""A hearing recognizer (engine/interruption.py) whose answers the test gives."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from models.listening.hearing import Hearing
from tests.support.waiting_model import WaitingModel


class FakeHearing(WaitingModel[Hearing]):
    """Each hearing waits on a future the test resolves."""

    async def transcribe(self, pcm: npt.NDArray[np.int16]) -> Hearing | None:
        return await self._wait(pcm)

    def answer(self, text: str | None, *, sure: bool = True) -> bool:
        """Answer the oldest pending hearing (None: it could not hear); whether there
        was one."""
        pending = self.pending()
        if not pending:
            return False
        pending[0].set_result(None if text is None else Hearing(text, sure))
        return True
