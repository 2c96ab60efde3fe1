"""semantic_vad's end-of-turn score from the sound and the words of a pause.

Smart Turn (acoustic) is as sure of many unfinished phrases as of finished questions
(docs/turn-taking.md); a small LM reading the transcript so far tells "I would like
to book a table for" from "What is the weather like in Paris today?" at once. `fuse`
moves the acoustic score's log-odds by the text's evidence; the eagerness curves
(engine/semantic_turns.py) read the result as they read Smart Turn's score.

The words come from speculative recognition, which begins at the same pause
(engine/speculation.py). The decision never waits on them more than
`TEXT_BUDGET_S` after the acoustic score: with no transcript by then (recognition
busy, speculation off, no recognizer) or no text model, the score is the acoustic
one exactly.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from engine.end_of_turn import EndOfTurnModel

# The text probability at which the words say nothing either way: below it the LM
# expects the user to go on. Measured on SmolLM2-135M (models/listening/text_turn.py)
# with Whisper's transcripts of the espeak set: finished questions 0.016-0.95, the
# first halves of hesitations under 2e-4 for 8 in 10 (0.03 and 0.06 the others).
TEXT_PIVOT = 0.01
# Log-odds added per decade of text probability above the pivot (taken off below),
# and the most the words may move the acoustic log-odds either way: a wrong
# transcript must not end, or hold, a turn on its own.
TEXT_WEIGHT = 1.0
TEXT_CAP = 3.0
# The most the decision waits for the words after the acoustic score is in: about
# one speculative recognition of a short turn plus the text model's p90 on this host.
TEXT_BUDGET_S = 0.3
_EDGE = 1e-6  # probabilities are kept off 0 and 1 so their log-odds are finite

Transcript = Callable[[], Awaitable[str | None]]


class TextEndOfTurnModel(Protocol):
    """implemented in models/listening/text_turn.py"""

    async def probability(self, text: str) -> float | None:
        """Probability in [0, 1] that `text` is the user's whole turn; None when it
        cannot say."""
        ...


def fuse(acoustic: float | None, text: float | None) -> float | None:
    """The end-of-turn probability from Smart Turn's score and the text model's;
    the acoustic score exactly when there is no text score (None: neither)."""
    if acoustic is None or text is None:
        return acoustic
    a = min(max(acoustic, _EDGE), 1 - _EDGE)
    evidence = math.log10(max(text, _EDGE) / TEXT_PIVOT)
    shift = TEXT_WEIGHT * min(max(evidence, -TEXT_CAP), TEXT_CAP)
    return 1.0 / (1.0 + math.exp(-(math.log(a / (1 - a)) + shift)))


@dataclass
class FusionStats:
    """How many scorings read the words, and how many had to do without them."""

    fused: int = 0
    acoustic_only: int = 0


class SoundAndWords:
    """An EndOfTurnModel (the acoustic one) that also reads the transcript when the
    caller has one (`probability_with_words`)."""

    def __init__(
        self, acoustic: EndOfTurnModel, text: TextEndOfTurnModel, budget_s: float = TEXT_BUDGET_S
    ) -> None:
        self.acoustic = acoustic
        self.text = text
        self.budget_s = budget_s
        self.stats = FusionStats()

    async def probability(self, pcm: npt.NDArray[np.int16]) -> float | None:
        return await self.acoustic.probability(pcm)

    async def probability_with_words(
        self, pcm: npt.NDArray[np.int16], transcript: Transcript
    ) -> float | None:
        """`fuse` of the acoustic score and the text score of `transcript()`, which
        is awaited alongside the acoustic scoring and at most `budget_s` after it."""
        words = asyncio.ensure_future(self._text(transcript))
        try:
            acoustic = await self.acoustic.probability(pcm)
            text = None
            if acoustic is not None:
                done, _ = await asyncio.wait({words}, timeout=self.budget_s)
                text = words.result() if done else None
        finally:
            words.cancel()
        if text is None:
            self.stats.acoustic_only += 1
        else:
            self.stats.fused += 1
        return fuse(acoustic, text)

    async def _text(self, transcript: Transcript) -> float | None:
        words = await transcript()
        return None if words is None else await self.text.probability(words)
