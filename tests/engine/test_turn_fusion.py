"""The end-of-turn score from sound and words (engine/turn_fusion.py): a pure fusion,
and the acoustic score exactly whenever the words are not there in time."""

from __future__ import annotations

import asyncio

import numpy as np
import numpy.typing as npt
import pytest

from engine.semantic_turns import silence_needed_ms
from engine.turn_fusion import TEXT_CAP, TEXT_PIVOT, SoundAndWords, fuse

AUDIO = np.zeros(16_000, np.int16)


@pytest.mark.parametrize(
    ("acoustic", "text", "low", "high"),
    [
        (0.5, TEXT_PIVOT, 0.5, 0.5),  # words that say nothing either way
        (0.5, 1.0, 0.88, 0.89),  # two decades above the pivot: +2 log-odds
        (0.5, 1e-4, 0.11, 0.12),  # two decades below: -2
        (0.5, 0.0, 0.04, 0.05),  # capped at -TEXT_CAP
        (0.75, 1e-5, 0.12, 0.14),  # a sure-sounding unfinished phrase falls below 0.7
        (0.99, 1e-9, 0.83, 0.84),  # the words alone never overturn a certain sound
        (0.0, 1.0, 0.0, 1e-4),
        (1.0, 0.0, 0.999, 1.0),
    ],
)
def test_fusion_moves_the_acoustic_log_odds_by_the_words(
    acoustic: float, text: float, low: float, high: float
) -> None:
    fused = fuse(acoustic, text)
    assert fused is not None and low <= fused <= high


def test_without_words_the_score_is_the_acoustic_one_exactly() -> None:
    for acoustic in (0.0, 0.13, 0.5, 0.97, 1.0):
        assert fuse(acoustic, None) == acoustic
    assert fuse(None, 0.9) is None  # no acoustic score: fixed silence, as before


def test_the_words_move_the_score_monotonically() -> None:
    texts = [0.0, 1e-6, 1e-4, 1e-3, TEXT_PIVOT, 0.1, 0.5, 1.0]
    scores = [fuse(0.6, t) for t in texts]
    assert scores == sorted(scores)  # type: ignore[type-var]
    assert scores[0] == fuse(0.6, TEXT_PIVOT * 10**-TEXT_CAP)  # the cap holds


class Acoustic:
    def __init__(self, probability: float | None) -> None:
        self.value = probability

    async def probability(self, pcm: npt.NDArray[np.int16]) -> float | None:
        return self.value


class Text:
    def __init__(self, probability: float | None) -> None:
        self.value = probability
        self.texts: list[str] = []

    async def probability(self, text: str) -> float | None:
        self.texts.append(text)
        return self.value


async def test_the_words_of_the_pause_are_read() -> None:
    text = Text(1e-4)
    model = SoundAndWords(Acoustic(0.75), text)

    async def transcript() -> str | None:
        return "I would like to book a table for"

    assert await model.probability_with_words(AUDIO, transcript) == fuse(0.75, 1e-4)
    assert text.texts == ["I would like to book a table for"]
    assert (model.stats.fused, model.stats.acoustic_only) == (1, 0)


async def test_no_transcript_or_no_text_score_leaves_the_acoustic_score() -> None:
    async def none() -> str | None:
        return None

    async def words() -> str | None:
        return "hello there"

    unread = Text(0.9)
    model = SoundAndWords(Acoustic(0.42), unread)
    assert await model.probability_with_words(AUDIO, none) == 0.42
    assert unread.texts == []  # recognition was busy, or there is no recognizer
    model = SoundAndWords(Acoustic(0.42), Text(None))
    assert await model.probability_with_words(AUDIO, words) == 0.42
    assert await model.probability(AUDIO) == 0.42  # callers with no words
    assert model.stats.acoustic_only == 1


async def test_the_decision_does_not_wait_for_late_words() -> None:
    late: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

    async def transcript() -> str | None:
        return await late

    text = Text(1e-5)
    model = SoundAndWords(Acoustic(0.8), text, budget_s=0)
    assert await model.probability_with_words(AUDIO, transcript) == 0.8
    await asyncio.sleep(0)
    assert late.cancelled()  # the wait for the words was given up
    assert text.texts == [] and model.stats.acoustic_only == 1


async def test_without_an_acoustic_score_there_is_no_score() -> None:
    async def words() -> str | None:
        return "What is the weather like in Paris today?"

    model = SoundAndWords(Acoustic(None), Text(0.9))
    assert await model.probability_with_words(AUDIO, words) is None


@pytest.mark.parametrize("eagerness", ["low", "medium", "high", "auto"])
def test_an_unfinished_phrase_waits_longer_at_every_eagerness(eagerness: str) -> None:
    for acoustic in (0.55, 0.75, 0.9):  # unsure, or sure-sounding
        unfinished = fuse(acoustic, 1e-5)
        finished = fuse(acoustic, 0.9)
        alone = silence_needed_ms(eagerness, acoustic)  # type: ignore[arg-type]
        assert silence_needed_ms(eagerness, unfinished) > alone  # type: ignore[arg-type]
        assert silence_needed_ms(eagerness, finished) <= alone  # type: ignore[arg-type]
