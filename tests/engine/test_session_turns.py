"""Turns, barge-in and their races, staged deterministically in-process."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from bench.speech import load_wav, silence
from engine.limits import EngineLimits
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.harness import Harness


def vad_session(interrupt_response: bool = True) -> dict[str, Any]:
    return {
        "type": "session.update",
        "session": {
            "type": "realtime",
            "audio": {
                "input": {
                    "turn_detection": {
                        "type": "server_vad",
                        "interrupt_response": interrupt_response,
                    }
                }
            },
        },
    }


MANUAL = {
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}


def turn_samples(h: Harness, n: int) -> int:
    """Samples of the n-th VAD turn, from its speech events (24 kHz)."""
    started = h.of("input_audio_buffer.speech_started")[n]
    stopped = h.of("input_audio_buffer.speech_stopped")[n]
    assert started["item_id"] == stopped["item_id"]
    return (stopped["audio_end_ms"] - started["audio_start_ms"]) * 24


def latest_user_samples(prompt: Any) -> int:
    user = [i for i in prompt.items if i.role == "user"]
    return len(user[-1].audio)


def assert_one_done_per_response(h: Harness) -> None:
    created = [e["response"]["id"] for e in h.of("response.created")]
    done = [r["id"] for r in h.responses_done()]
    assert sorted(created) == sorted(done)
    assert len(set(done)) == len(done)


def two_utterances() -> np.ndarray:
    return np.concatenate(
        [silence(300), load_wav("weather"), silence(1200), load_wav("joke"), silence(1200)]
    )


@pytest.mark.parametrize(
    ("mode", "interrupt_response"),
    [("server_vad", True), ("server_vad", False), ("manual", None)],
)
async def test_large_vad_append_submits_separate_audio_turns(
    mode: str, interrupt_response: bool | None
) -> None:
    async with Harness() as h:
        if mode == "server_vad":
            assert interrupt_response is not None
            await h.send(vad_session(interrupt_response))
            await h.append(two_utterances())  # ONE append, two utterances
            await h.settle()
            committed = h.of("input_audio_buffer.committed")
            assert len(committed) == 2
            first, second = turn_samples(h, 0), turn_samples(h, 1)
            joke = len(load_wav("joke"))
            assert joke < second < joke + 24 * 1200  # utterance 2 and its padding only
            last = h.scripted.prompts[-1]
            assert latest_user_samples(last) == second
            assert (
                ScriptedExecutor.samples_heard(
                    h.responses_done()[-1]["output"][0]["content"][0]["transcript"]
                )
                == second
            )
            done = h.responses_done()
            assert len(done) == 2
            if interrupt_response:
                # Utterance 2 interrupted the answer to utterance 1 before it began.
                assert done[0]["status"] == "cancelled"
                assert done[0]["status_details"]["reason"] == "turn_detected"
                assert len(h.scripted.prompts) == 1
            else:
                assert [d["status"] for d in done] == ["completed", "completed"]
                assert [latest_user_samples(p) for p in h.scripted.prompts] == [first, second]
            assert done[-1]["status"] == "completed"
        else:
            # Manual turns: the client commits; each commit is exactly its audio.
            await h.send(MANUAL)
            await h.append(np.concatenate([load_wav("weather"), silence(500)]))
            await h.send({"type": "input_audio_buffer.commit"})
            await h.send({"type": "response.create"})
            await h.append(np.concatenate([load_wav("joke"), silence(200)]))
            await h.send({"type": "input_audio_buffer.commit"})
            await h.settle()
            await h.send({"type": "response.create"})
            await h.settle()
            assert [latest_user_samples(p) for p in h.scripted.prompts] == [
                len(load_wav("weather")) + 24 * 500,
                len(load_wav("joke")) + 24 * 200,
            ]
            assert [d["status"] for d in h.responses_done()] == ["completed", "completed"]
        assert not h.errors()
        assert_one_done_per_response(h)


@pytest.mark.parametrize("release_first", ["prepare", "abort"])
async def test_second_turn_answered_when_vad_ends_during_cancel(release_first: str) -> None:
    """Barge-in racing prompt preparation: turn 1's response is announced and waits
    for turn 1's append; utterance 2 interrupts it while that append still runs, and
    the abort is held so that the append and the cancel finish in either order
    before utterance 2's turn ends. Utterance 2 still gets its own response."""
    executor = ScriptedExecutor(prepare_gate=asyncio.Event(), abort_gate=asyncio.Event())
    # The abort is held by the test, not by the clock: no timeout may cut in.
    async with Harness(executor, limits=EngineLimits(abort_timeout_s=3600)) as h:
        await h.append(np.concatenate([silence(300), load_wav("weather"), silence(1200)]))
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        assert executor.prepared == []  # turn 1 is still being handed over

        second = asyncio.ensure_future(h.append(np.concatenate([load_wav("joke"), silence(1200)])))
        await h.run_until(lambda: len(executor.abort_requests) == 1)  # cancel in flight
        gates = {"prepare": executor.prepare_gate, "abort": executor.abort_gate}
        order = [release_first, "abort" if release_first == "prepare" else "prepare"]
        for name in order:
            gate = gates[name]
            assert gate is not None
            gate.set()
            await h.steps(3)
        await second
        await h.settle()

        done = h.responses_done()
        assert [d["status"] for d in done] == ["cancelled", "completed"]
        assert done[0]["status_details"]["reason"] == "turn_detected"
        (prompt,) = executor.prompts  # the cancelled response never reached the model
        assert latest_user_samples(prompt) == turn_samples(h, 1)
        assert len(h.of("input_audio_buffer.committed")) == 2
        assert not h.errors()
        assert_one_done_per_response(h)


async def test_barge_in_mid_response() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await append_chunked(h, np.concatenate([silence(300), load_wav("weather"), silence(900)]))
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        first_id = h.of("response.created")[0]["response"]["id"]
        assert executor.chunk_gate is not None
        executor.chunk_gate.release()
        executor.chunk_gate.release()
        await h.run_until(lambda: len(h.of("response.output_audio.delta")) == 2)

        # The user talks over the assistant, in 20 ms chunks as a client sends.
        await append_chunked(h, np.concatenate([load_wav("joke"), silence(900)]))
        await h.run_until(lambda: len(h.responses_done()) == 1)
        for _ in range(50):
            executor.chunk_gate.release()
        await h.settle()

        done_at = h.index("response.done", **{"response.id": first_id})
        cancelled = h.events[done_at]["response"]
        assert cancelled["status"] == "cancelled"
        assert cancelled["status_details"]["reason"] == "turn_detected"
        assert h.index("input_audio_buffer.speech_started") < done_at
        late = [
            e
            for e in h.events[done_at:]
            if e["type"].startswith("response.output_audio")
            and e["response_id"] == first_id
            and e["type"] != "response.output_audio.done"
        ]
        assert late == []
        assert first_id in executor.aborted
        # What was kept of the cancelled answer is what was sent: two chunks.
        item = h.session.conversation.get(cancelled["output"][0]["id"])
        assert item is not None and item.audio is not None
        assert len(item.audio) == 2 * 2400
        assert item.transcript == "I heard"
        assert cancelled["output"][0]["content"][0]["transcript"] == "I heard"
        # The interrupting speech is the next turn and gets its own answer.
        created = h.of("response.created")
        assert (
            len(created) == 2
            and h.index("response.created", **{"response.id": created[1]["response"]["id"]})
            > done_at
        )
        assert latest_user_samples(executor.prompts[-1]) == turn_samples(h, 1)
        assert h.responses_done()[-1]["status"] == "completed"
        assert not h.errors()
        assert_one_done_per_response(h)


async def test_interrupt_response_false_defers_the_next_answer() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await h.send(vad_session(interrupt_response=False))
        await append_chunked(h, np.concatenate([silence(300), load_wav("weather"), silence(900)]))
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        await append_chunked(h, np.concatenate([load_wav("joke"), silence(900)]))
        await h.run_until(lambda: len(h.of("input_audio_buffer.committed")) == 2)
        assert len(h.of("response.created")) == 1  # deferred, not refused
        assert executor.chunk_gate is not None
        for _ in range(50):
            executor.chunk_gate.release()
        await h.settle()
        assert [d["status"] for d in h.responses_done()] == ["completed", "completed"]
        assert [latest_user_samples(p) for p in executor.prompts] == [
            turn_samples(h, 0),
            turn_samples(h, 1),
        ]
        # The first answer's prompt did not see the turn committed during it.
        assert len([i for i in executor.prompts[0].items if i.role == "user"]) == 1
        assert not h.errors()


async def test_turn_detection_hears_speech_again_after_manual_turns() -> None:
    """Audio taken while turn detection was off moves the VAD clock too: once it is
    back on, the next utterance starts a turn at its true position on the input clock
    (the detector's floor is there), rather than the VAD labelling frames as if the
    manual audio never came and the detector ignoring them for that long."""
    speech = load_wav("weather")
    async with Harness() as h:
        await h.send(MANUAL)
        await append_chunked(h, np.concatenate([silence(300), speech, silence(1000)]))
        await h.send({"type": "input_audio_buffer.commit"})
        await h.settle()
        manual_ms = 300 + len(speech) // 24 + 1000
        await h.send(vad_session())
        await h.settle()
        await append_chunked(h, np.concatenate([silence(300), speech, silence(1000)]))
        await h.settle()
        started = h.of("input_audio_buffer.speech_started")
        assert len(started) == 1
        # The speech began 300 ms into the audio sent after turn detection came back.
        assert manual_ms <= started[0]["audio_start_ms"] <= manual_ms + 300 + 200
        assert len(h.of("input_audio_buffer.speech_stopped")) == 1
