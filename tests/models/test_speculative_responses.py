"""A response begun before its turn commits: adopted by the response whose prompt
has the same key, the same conversation (buffer replayed, then the rest), thrown
away otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import replace

import numpy as np
import pytest

from models import speculative_responses
from models.base import ExecutorStats, OutputChunk, Prompt, PromptItem, prompt_key
from models.speculative_responses import SpeculativeResponses


def turn(samples: int = 4800) -> PromptItem:
    return PromptItem("item_2", "user", audio=np.zeros(samples, dtype=np.int16))


def prompt(request_id: str = "resp_spec", *items: PromptItem) -> Prompt:
    earlier = (
        PromptItem("item_1", "user", text="hello"),
        PromptItem("a_1", "assistant", text="hi"),
    )
    return Prompt(request_id, "Be brief.", (*earlier, *(items or (turn(),))), session_id="s1")


class FakeModel:
    """Yields the words of its reply, each once the test releases it."""

    def __init__(self) -> None:
        self.release = asyncio.Semaphore(0)
        self.aborted: list[str] = []
        self.closed = 0
        self.started: list[str] = []

    async def generate(self, p: Prompt) -> AsyncGenerator[OutputChunk, None]:
        self.started.append(p.request_id)
        try:
            for word in ("It", " is", " sunny."):
                await self.release.acquire()
                yield OutputChunk(text=word)
        finally:
            self.closed += 1

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)


async def steps(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_the_same_conversation_with_the_turn_committed_since_has_the_same_key() -> None:
    speculated = prompt_key(prompt())
    committed = prompt("resp_real", turn(7200))  # the turn with more silence after it
    assert prompt_key(committed) == speculated
    assert prompt_key(replace(committed, instructions="Be long.")) != speculated
    assert prompt_key(prompt("r", PromptItem("item_3", "user"))) != speculated
    edited = replace(
        committed, items=(PromptItem("item_1", "user", text="bye"), *committed.items[1:])
    )
    assert prompt_key(edited) != speculated
    fewer = replace(committed, items=committed.items[1:])
    assert prompt_key(fewer) != speculated


def test_an_earlier_turn_counts_by_its_audio_not_its_transcript() -> None:
    def earlier(audio: int, text: str | None) -> Prompt:
        said = PromptItem("item_0", "user", audio=np.zeros(audio, dtype=np.int16), text=text)
        return replace(prompt(), items=(said, *prompt().items))

    speculated = prompt_key(earlier(2400, None))
    assert prompt_key(earlier(2400, "hello")) == speculated  # its transcript arrived since
    assert prompt_key(earlier(4800, None)) != speculated
    assert prompt_key(replace(earlier(2400, None), session_id="s2")) != speculated


async def test_the_committed_turns_response_adopts_what_was_made_and_the_rest() -> None:
    model = FakeModel()
    responses = SpeculativeResponses(model.generate, model.abort)
    responses.begin(prompt(), "item_2")
    model.release.release()
    await steps()  # "It" made while the turn was not committed
    adopted = responses.take(prompt("resp_real", turn(7200)))
    assert adopted is not None
    assert responses.resolve("resp_real") == "resp_spec"
    model.release.release()
    model.release.release()
    words = [c.text async for c in adopted]
    assert words == ["It", " is", " sunny."]
    assert model.started == ["resp_spec"] and model.aborted == []
    assert responses.resolve("resp_real") == "resp_real"  # the alias ends with it
    assert (responses.stats.responses_used, responses.stats.responses_discarded) == (1, 0)
    await responses.aclose()


async def test_an_early_answer_that_declines_is_answered_afresh() -> None:
    """The cascade's early answer declines when its turn has no speculative
    transcript (the recognizer was busy in the pause): the committed turn's response
    must not adopt an empty answer."""
    model = FakeModel()

    async def declining(p: Prompt) -> AsyncGenerator[OutputChunk, None]:
        raise speculative_responses.Declined("no transcript")
        yield OutputChunk()  # an async generator

    responses = SpeculativeResponses(declining, model.abort)
    stats = ExecutorStats()
    responses.begin(prompt(), "item_2")
    await steps()
    for _ in range(3):
        model.release.release()
    answer = responses.respond(prompt("resp_real", turn(7200)), model.generate, stats)
    words = [c.text async for c in answer]
    assert words == ["It", " is", " sunny."] and model.started == ["resp_real"]
    assert (responses.stats.responses_used, responses.stats.responses_declined) == (0, 1)
    assert responses.resolve("resp_real") == "resp_real"
    await responses.aclose()


async def test_an_adopted_answer_streams_through_respond() -> None:
    model = FakeModel()
    responses = SpeculativeResponses(model.generate, model.abort)
    responses.begin(prompt(), "item_2")
    for _ in range(3):
        model.release.release()
    answer = responses.respond(prompt("resp_real", turn(7200)), model.generate, ExecutorStats())
    assert [c.text async for c in answer] == ["It", " is", " sunny."]
    assert model.started == ["resp_spec"]  # the early answer's, not a second request
    assert responses.stats.responses_used == 1
    await responses.aclose()


async def test_another_conversation_stops_the_speculation() -> None:
    model = FakeModel()
    responses = SpeculativeResponses(model.generate, model.abort)
    responses.begin(prompt(), "item_2")
    await steps()
    assert responses.take(replace(prompt("resp_real"), instructions="Other.")) is None
    await responses.aclose()
    assert model.aborted == ["resp_spec"] and model.closed == 1
    assert responses.stats.responses_discarded == 1


async def test_speech_going_on_discards_only_that_turns_speculation() -> None:
    model = FakeModel()
    responses = SpeculativeResponses(model.generate, model.abort)
    responses.begin(prompt(), "item_2")
    await steps()
    responses.discard("item_9")  # another turn: not this one
    assert model.aborted == []
    responses.discard("item_2")
    await responses.aclose()
    assert model.aborted == ["resp_spec"] and model.closed == 1
    assert responses.take(prompt("resp_real", turn(7200))) is None  # nothing left to adopt


async def test_stopping_an_adopted_response_stops_the_model() -> None:
    model = FakeModel()
    responses = SpeculativeResponses(model.generate, model.abort)
    responses.begin(prompt(), "item_2")
    model.release.release()
    adopted = responses.take(prompt("resp_real", turn(7200)))
    assert adopted is not None
    assert await anext(adopted) == OutputChunk(text="It")
    await adopted.aclose()  # a barge-in
    assert model.aborted == ["resp_spec"] and model.closed == 1
    await responses.aclose()


async def test_an_unclaimed_speculation_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speculative_responses, "UNCLAIMED_S", 0.0)
    model = FakeModel()
    responses = SpeculativeResponses(model.generate, model.abort)
    responses.begin(prompt(), "item_2")
    await steps()  # the expiry runs on the next loop turn
    await responses.aclose()
    assert model.aborted == ["resp_spec"] and model.closed == 1
    assert responses.take(prompt("resp_real", turn(7200))) is None
