"""The end-of-turn model as the engine sees it (implemented in models/listening/smart_turn.py)."""

from typing import Protocol

import numpy as np
import numpy.typing as npt

END_OF_TURN_RATE = 16_000
END_OF_TURN_WINDOW_S = 8.0


class EndOfTurnModel(Protocol):
    async def probability(self, pcm: npt.NDArray[np.int16]) -> float | None:
        """Probability in [0, 1] that the user has finished their turn, from the
        turn's audio so far: mono int16 at 16 kHz, at most the last 8 s (the caller
        cuts it). None when the model cannot score (the caller falls back to fixed
        silence, with a warning logged once by the model)."""
        ...
