"""Answers the user cannot talk over by accident (`response.create` with Parley's
`interruptible: false`, engine/postponed_speech.py): speech over one neither cancels
nor cuts it and sends nothing while it plays; it becomes the next turn, committed and
answered once the answer has been heard. `response.cancel` still cancels it."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from bench.speech import load_wav, silence
from engine.limits import EngineLimits
from engine.postponed_speech import protects
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.fake_hearing import FakeHearing
from tests.support.harness import Harness
from tests.support.held import finish, handled


def vad(kind: str) -> dict[str, Any]:
    detection = {"type": kind}
    return {
        "type": "session.update",
        "session": {"type": "realtime", "audio": {"input": {"turn_detection": detection}}},
    }


def spoken(*names: str) -> np.ndarray:
    """Each fixture after 300 ms of silence, then the 900 ms of silence that ends it."""
    parts = [np.concatenate([silence(300), load_wav(n), silence(900)]) for n in names]
    return np.concatenate(parts).astype(np.int16)


async def answering(
    h: Harness, executor: ScriptedExecutor, detection: str = "server_vad", **response: Any
) -> str:
    """With `detection` turn detection, an answer asked for with `response` that has
    streamed two chunks and streams on until the test lets it finish; its id."""
    await h.send(vad(detection))
    await h.send({"type": "response.create", "response": response})
    await h.run_until(lambda: bool(h.of("response.created")))
    assert executor.chunk_gate is not None
    executor.chunk_gate.release()
    executor.chunk_gate.release()
    await h.run_until(lambda: len(h.of("response.output_audio.delta")) == 2)
    return str(h.of("response.created")[0]["response"]["id"])


async def talked_over(
    h: Harness,
    executor: ScriptedExecutor,
    *names: str,
    detection: str = "server_vad",
    **response: Any,
) -> str:
    """An answer (`answering`) with the fixtures `names` said over it; its id."""
    answer = await answering(h, executor, detection, **response)
    await append_chunked(h, spoken(*names))
    await handled(h)
    return answer


async def heard_out(h: Harness) -> None:
    """Silence, 100 ms at a time, until the answers have played at the client."""
    for _ in range(30):
        await append_chunked(h, silence(100))
        await h.settle()


def said(executor: ScriptedExecutor, n: int) -> str:
    """The whole of what the n-th answer says."""
    return executor.reply_for(executor.prompts[n])


@pytest.mark.parametrize("detection", ["server_vad", "semantic_vad"])
async def test_an_uninterruptible_answer_plays_on_and_the_speech_is_answered_after_it(
    detection: str,
) -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        first = await talked_over(h, executor, "weather", detection=detection, interruptible=False)
        # Nothing of the speech is on the wire, and the answer was not touched.
        assert h.of("input_audio_buffer.speech_started") == []
        assert h.of("input_audio_buffer.committed") == []
        assert h.responses_done() == [] and executor.aborted == []
        finish(executor)
        await h.settle()
        [done] = h.responses_done()
        assert done["id"] == first and done["status"] == "completed"
        assert done["output"][0]["content"][0]["transcript"] == said(executor, 0)
        # Still playing at the client: the turn waits.
        assert h.of("input_audio_buffer.speech_started") == []
        await heard_out(h)
        # Then it is a turn like any other, after the answer, answered once.
        [started] = h.of("input_audio_buffer.speech_started")
        [stopped] = h.of("input_audio_buffer.speech_stopped")
        [committed] = h.of("input_audio_buffer.committed")
        assert started["item_id"] == stopped["item_id"] == committed["item_id"]
        assert h.index("response.done") < h.index("input_audio_buffer.speech_started")
        assert 0 <= started["audio_start_ms"] <= 300  # its true start, not the release
        speech_ms = len(load_wav("weather")) // 24
        assert stopped["audio_end_ms"] - started["audio_start_ms"] >= speech_ms
        assert [r["status"] for r in h.responses_done()] == ["completed", "completed"]
        assert len(h.of("response.created")) == 2
        second = executor.prompts[1]
        [turn] = [i for i in second.items if i.role == "user"]
        assert turn.id == committed["item_id"]
        assert not h.errors()


async def test_by_default_the_same_speech_interrupts_the_answer() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        first = await talked_over(h, executor, "weather")
        [done] = h.responses_done()
        assert done["id"] == first and done["status"] == "cancelled"
        assert done["status_details"]["reason"] == "turn_detected"
        assert first in executor.aborted
        assert h.index("input_audio_buffer.speech_started") < h.index("response.done")
        finish(executor)
        await h.settle()
        assert len(h.of("input_audio_buffer.committed")) == 1
        assert [r["status"] for r in h.responses_done()] == ["cancelled", "completed"]


async def test_everything_said_over_it_is_one_turn_answered_once() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await talked_over(h, executor, "weather", "joke", interruptible=False)
        finish(executor)
        await h.settle()
        await heard_out(h)
        [started] = h.of("input_audio_buffer.speech_started")
        [stopped] = h.of("input_audio_buffer.speech_stopped")
        assert len(h.of("input_audio_buffer.committed")) == 1
        both_ms = (len(load_wav("weather")) + len(load_wav("joke"))) // 24 + 1200
        assert stopped["audio_end_ms"] - started["audio_start_ms"] >= both_ms
        assert [r["status"] for r in h.responses_done()] == ["completed", "completed"]


async def test_a_turn_still_going_when_the_answer_ends_goes_on_as_a_turn() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await answering(h, executor, interruptible=False)
        speech = load_wav("weather")
        await append_chunked(h, np.concatenate([silence(300), speech[: len(speech) // 2]]))
        await handled(h)
        finish(executor)
        await h.settle()
        assert h.of("input_audio_buffer.speech_started") == []  # it still plays
        # It has played by the end of the speech, which goes on as an ordinary turn.
        await append_chunked(h, speech[len(speech) // 2 :])
        await h.settle()
        [started] = h.of("input_audio_buffer.speech_started")
        assert 0 <= started["audio_start_ms"] <= 300
        assert h.of("input_audio_buffer.speech_stopped") == []
        await append_chunked(h, silence(900))
        await heard_out(h)
        assert len(h.of("input_audio_buffer.committed")) == 1
        assert [r["status"] for r in h.responses_done()] == ["completed", "completed"]


async def test_response_cancel_still_cancels_it_and_the_waiting_turn_goes_out() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        first = await talked_over(h, executor, "weather", interruptible=False)
        assert h.responses_done() == []
        await h.send({"type": "response.cancel"})
        await handled(h)
        [done] = h.responses_done()
        assert done["id"] == first and done["status"] == "cancelled"
        assert done["status_details"]["reason"] == "client_cancelled"
        assert first in executor.aborted
        # Cancelled, it protects nothing: the next frame lets the turn out.
        await append_chunked(h, silence(100))
        finish(executor)
        await h.settle()
        assert len(h.of("input_audio_buffer.speech_started")) == 1
        assert len(h.of("input_audio_buffer.committed")) == 1
        assert [r["status"] for r in h.responses_done()] == ["cancelled", "completed"]


async def test_a_response_created_after_it_does_not_let_speech_cut_its_rest() -> None:
    """A client chains an ordinary answer to the uninterruptible one: the user's speech
    waits while the first still plays, then interrupts the second as any speech would."""
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0), speech=load_wav("lights"))
    async with Harness(executor) as h:
        await answering(h, executor, interruptible=False)
        finish(executor)
        await h.run_until(lambda: len(h.responses_done()) == 1)
        executor.chunk_gate = asyncio.Semaphore(0)
        await h.send({"type": "response.create"})
        await h.run_until(lambda: len(h.of("response.created")) == 2)
        # 2.1 s of the 2.2 s the first answer plays for from its end.
        await append_chunked(h, np.concatenate([silence(300), load_wav("weather")]))
        await handled(h)
        assert h.of("input_audio_buffer.speech_started") == []
        assert len(h.responses_done()) == 1
        await append_chunked(h, silence(900))
        await handled(h)
        assert len(h.of("input_audio_buffer.speech_started")) == 1
        second = h.responses_done()[1]
        assert second["status"] == "cancelled"
        assert second["status_details"]["reason"] == "turn_detected"
        finish(executor)
        await h.settle()
        assert [r["status"] for r in h.responses_done()] == ["completed", "cancelled", "completed"]
        assert len(h.of("input_audio_buffer.committed")) == 1


@pytest.mark.parametrize(("heard", "turns"), [("Wait, what was that?", 1), ("Mm-hm.", 0)])
async def test_held_speech_qualifies_as_ever_and_only_an_interruption_waits(
    heard: str, turns: int
) -> None:
    """With a recognizer, speech over the answer is held as over any answer: words
    that would interrupt wait to be the next turn, a backchannel is no turn at all."""
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await talked_over(h, executor, "weather", interruptible=False)
        while hearing.answer(heard):
            await handled(h)
        assert h.of("input_audio_buffer.speech_started") == [] and h.responses_done() == []
        finish(executor)
        await h.settle()
        await heard_out(h)
        assert len(h.of("input_audio_buffer.speech_started")) == turns
        assert len(h.of("input_audio_buffer.committed")) == turns
        assert [r["status"] for r in h.responses_done()] == ["completed"] * (1 + turns)


async def test_a_turn_that_fills_the_buffer_while_it_waits_is_committed_quietly() -> None:
    """The input buffer bounds what may wait: a turn that fills it is committed then,
    without its speech events (a speech_started would stop the answer's playback),
    and answered after the answer."""
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor, limits=EngineLimits(max_buffer_ms=3000)) as h:
        await talked_over(h, executor, "weather", "lights", interruptible=False)
        assert h.of("input_audio_buffer.committed") != []
        assert h.of("input_audio_buffer.speech_started") == [] and h.responses_done() == []
        finish(executor)
        await h.settle()
        await heard_out(h)
        statuses = [r["status"] for r in h.responses_done()]
        assert statuses[0] == "completed" and len(statuses) >= 2
        assert h.index("response.done") < h.index(
            "response.created", **{"response.id": h.responses_done()[1]["id"]}
        )
        assert not h.errors()


async def test_output_audio_buffer_clear_ends_the_wait() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0), speech=load_wav("lights"))
    async with Harness(executor) as h:
        await talked_over(h, executor, "weather", interruptible=False)
        finish(executor)
        await h.run_until(lambda: len(h.responses_done()) == 1)
        await append_chunked(h, silence(100))
        await handled(h)
        assert h.of("input_audio_buffer.speech_started") == []  # its audio still plays
        await h.send({"type": "output_audio_buffer.clear"})
        await append_chunked(h, silence(100))  # the client stopped it: the turn goes out
        await h.settle()
        assert len(h.of("output_audio_buffer.cleared")) == 1
        assert len(h.of("input_audio_buffer.speech_started")) == 1
        assert len(h.of("input_audio_buffer.committed")) == 1
        assert [r["status"] for r in h.responses_done()] == ["completed", "completed"]


@pytest.mark.parametrize(
    ("value", "code"), [("no", "invalid_type"), (0, "invalid_type"), (None, None)]
)
async def test_interruptible_must_be_a_boolean(value: object, code: str | None) -> None:
    async with Harness() as h:
        await h.send(
            {"type": "response.create", "event_id": "e1", "response": {"interruptible": value}}
        )
        await h.settle()
        if code is None:  # null: the default
            assert not h.errors() and len(h.responses_done()) == 1
            return
        [error] = h.errors()
        assert error["code"] == code and error["param"] == "response.interruptible"
        assert error["event_id"] == "e1" and error["type"] == "invalid_request_error"
        assert h.of("response.created") == []
        await h.send({"type": "response.create", "response": {"interruptible": False}})
        await h.settle()
        assert [r["status"] for r in h.responses_done()] == ["completed"]


def test_who_protects_speech() -> None:
    assert protects(False, False)  # an uninterruptible answer streams
    assert protects(None, True)  # none streams, the uninterruptible one still plays
    assert protects(True, True)  # one streams that will play after it
    assert not protects(True, False) and not protects(None, False)
