"""semantic_vad's end-of-turn model, asked at a pause: one scoring at a time, off the
event loop, its answer posted to the session's mailbox as `EndOfTurnScored`.

A result counts only if it answers the scoring in flight: a cancelled one may have
posted already, and pause ids restart with a new detector.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.end_of_turn import EndOfTurnModel
from engine.semantic_turns import turn_audio
from engine.turn_fusion import SoundAndWords, Transcript
from models.base import PCM_RATE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EndOfTurnScored:
    """The end-of-turn model's probability for a semantic_vad pause (None: the
    model could not score it)."""

    request: int  # which scoring request of the session this answers
    pause_id: int
    probability: float | None


class PauseScoring:
    def __init__(
        self, model: EndOfTurnModel | None, post: Callable[[EndOfTurnScored], None], name: str
    ) -> None:
        self.model = model  # None: semantic_vad ends turns after a fixed silence
        self._post = post
        self._name = name
        self._requests = 0
        # The one scoring in flight: (request number, pause id, task).
        self._scoring: tuple[int, int, asyncio.Task[None]] | None = None

    def score(
        self, pause_id: int, audio: npt.NDArray[np.int16], transcript: Transcript | None = None
    ) -> None:
        """Ask the model about the turn so far (`audio`, its latest window, and its
        words once `transcript()` has them, if the model reads words)."""
        model = self.model
        if model is None:
            return
        self.reset()
        self._requests += 1
        request, name = self._requests, self._name

        async def score() -> None:
            try:
                pcm = await asyncio.to_thread(turn_audio, audio, PCM_RATE)
                if transcript is not None and isinstance(model, SoundAndWords):
                    probability = await model.probability_with_words(pcm, transcript)
                else:
                    probability = await model.probability(pcm)
            except asyncio.CancelledError:
                raise
            except Exception:
                # The model's own failures are its to report; this one is a bug.
                log.exception("session %s: end-of-turn scoring failed", name)
                probability = None
            self._post(EndOfTurnScored(request, pause_id, probability))

        self._scoring = (request, pause_id, asyncio.create_task(score()))

    @property
    def in_flight(self) -> tuple[int, int] | None:
        """The scoring waited on: (request number, pause id)."""
        return None if self._scoring is None else self._scoring[:2]

    def answered(self, message: EndOfTurnScored) -> bool:
        """Whether `message` answers the scoring in flight (which it then ends)."""
        if self._scoring is None or self._scoring[0] != message.request:
            return False  # cancelled after it answered: stale
        self._scoring = None
        return True

    def keep_only(self, pause_id: int | None) -> None:
        """Cancel the scoring unless it is of `pause_id`, the pause the detector
        still waits on (None: none; speech resumed, or the turn ended)."""
        if self._scoring is not None and self._scoring[1] != pause_id:
            self.reset()

    def idle(self) -> bool:
        return self._scoring is None or self._scoring[2].done()

    def reset(self) -> None:
        if self._scoring is not None:
            self._scoring[2].cancel()
            self._scoring = None
