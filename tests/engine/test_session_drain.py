"""Graceful shutdown of one session: `drain()` ends it once idle, after the answers
in flight; `end()` ends it now, every response closed with its one response.done."""

from __future__ import annotations

import asyncio

from models.scripted import ScriptedExecutor
from tests.support.harness import Harness

OOB = {"type": "response.create", "response": {"conversation": "none"}}


def ended(h: Harness) -> bool:
    """The session's run() returned and every event it queued was read."""
    return all(task.done() for task in h._tasks)


async def test_drain_ends_an_idle_session_at_once() -> None:
    async with Harness() as h:
        h.session.drain()
        await h.run_until(lambda: ended(h))
        assert h.types() == ["session.created", "conversation.created"]


async def test_drain_waits_for_the_answer_in_flight() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await h.send({"type": "response.create"})
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        h.session.drain()
        await h.steps(50)
        assert not ended(h)  # the answer is still streaming
        assert executor.chunk_gate is not None
        for _ in range(40):
            executor.chunk_gate.release()
        await h.run_until(lambda: ended(h))
        assert [r["status"] for r in h.responses_done()] == ["completed"]
        assert h.types()[-1] == "response.done"


async def test_drain_waits_for_out_of_band_answers_too() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await h.send(OOB)
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        h.session.drain()
        await h.steps(50)
        assert not ended(h)
        assert executor.chunk_gate is not None
        for _ in range(40):
            executor.chunk_gate.release()
        await h.run_until(lambda: ended(h))
        assert [r["status"] for r in h.responses_done()] == ["completed"]


async def test_end_cancels_every_response_with_one_done_each() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await h.send({"type": "response.create"})
        await h.send(OOB)
        await h.send(OOB)
        await h.run_until(lambda: len(h.of("response.created")) == 3)
        assert executor.chunk_gate is not None
        executor.chunk_gate.release()  # one of them has begun to speak
        await h.run_until(lambda: len(h.of("response.output_audio.delta")) == 1)
        h.session.end()
        await h.run_until(lambda: ended(h))
        created = [e["response"]["id"] for e in h.of("response.created")]
        done = h.responses_done()
        assert sorted(r["id"] for r in done) == sorted(created)
        assert all(r["status"] == "cancelled" for r in done)
        assert all(r["status_details"] == {"type": "cancelled"} for r in done)
        # Nothing of a response after its response.done, and the models were stopped.
        last_done = max(h.index("response.done", **{"response.id": i}) for i in created)
        assert last_done == len(h.events) - 1
        assert sorted(executor.aborted) == sorted(created)
