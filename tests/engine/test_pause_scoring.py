"""semantic_vad's scoring at a pause (engine/pause_scoring.py): one in flight, off
the loop, a stale answer ignored."""

from __future__ import annotations

import asyncio

import numpy as np

from engine.pause_scoring import EndOfTurnScored, PauseScoring

AUDIO = np.zeros(24_000, np.int16)


class Model:
    def __init__(self) -> None:
        self.futures: list[asyncio.Future[float | None]] = []

    async def probability(self, pcm: np.ndarray) -> float | None:
        future: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        return await future


async def until(condition: object) -> None:
    for _ in range(1000):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.001)  # the audio is resampled in a worker thread
    raise AssertionError("never")


async def test_one_scoring_in_flight_and_its_answer_counts_once() -> None:
    posted: list[EndOfTurnScored] = []
    model = Model()
    scoring = PauseScoring(model, posted.append, "s")
    scoring.score(1, AUDIO)
    assert scoring.in_flight == (1, 1) and not scoring.idle()
    await until(lambda: len(model.futures) == 1)
    scoring.score(2, AUDIO)  # a later pause: the first is cancelled
    assert scoring.in_flight == (2, 2)
    await until(lambda: len(model.futures) == 2)
    assert model.futures[0].cancelled()
    model.futures[1].set_result(0.9)
    await until(lambda: bool(posted))
    [answer] = posted
    assert answer == EndOfTurnScored(2, 2, 0.9)
    assert not scoring.answered(EndOfTurnScored(1, 2, 0.9))  # another request's
    assert scoring.answered(answer) and scoring.in_flight is None
    assert not scoring.answered(answer)  # once


async def test_a_pause_the_detector_no_longer_waits_on_is_not_scored_on() -> None:
    model = Model()
    scoring = PauseScoring(model, lambda m: None, "s")
    scoring.score(7, AUDIO)
    scoring.keep_only(7)
    assert scoring.in_flight == (1, 7)
    scoring.keep_only(None)  # speech resumed
    assert scoring.in_flight is None
    await asyncio.sleep(0)
    assert scoring.idle()


def test_without_a_model_nothing_is_scored() -> None:
    scoring = PauseScoring(None, lambda m: None, "s")
    scoring.score(1, AUDIO)
    assert scoring.in_flight is None and scoring.idle()
