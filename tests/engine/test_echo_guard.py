"""audio.input.echo_cancellation in a session: a client without echo cancellation
feeds the assistant's answer back into its microphone (-10 dB, 100 ms late); with the
guard on, that echo is no speech and the answer plays on; without it, the echo
interrupts the answer. Time is a fake clock the test moves 20 ms per append."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from bench.speech import load_wav
from engine.emitter import Flush, Outbox, OutEvent
from engine.playback import Playback
from models.listening.echo import FarEnd, wall_index
from models.listening.vad import SileroOnnxBackend
from models.scripted import ScriptedExecutor
from tests.support.clock import FakeClock
from tests.support.harness import Harness

STEP = 480  # 20 ms appends
ECHO_GAIN = 10 ** (-10 / 20)
ECHO_DELAY = 2400  # 100 ms
OVER_AT = 2 * 24_000  # the user starts talking over the echo 2 s into the answer


async def handled(h: Harness) -> None:
    """Until every message is handled and its events read (the answer is held open by
    the test, so the session never goes idle)."""
    s, quiet = h.session, 0
    while quiet < 20:
        await h.steps(1)
        quiet = quiet + 1 if s.handled() and not len(s.outbox) else 0


def played(h: Harness) -> npt.NDArray[np.int16]:
    """The answer's audio the client received, as it plays back to back."""
    deltas = [base64.b64decode(e["delta"]) for e in h.of("response.output_audio.delta")]
    return np.frombuffer(b"".join(deltas), "<i2").astype(np.int16)


async def answer_with_echo(
    update: dict[str, Any],
    *,
    user: npt.NDArray[np.int16] | None = None,
    over: npt.NDArray[np.int16] | None = None,
    heard: list[bool] | None = None,
) -> Harness:
    """The assistant speaks two fixtures; the client's microphone hears it back (or
    only `user`, when given; or the echo and, from 2 s on, `over`). `heard` gets
    `heard_own_voice` of the last second of input after 3 s of the answer."""
    speech = np.concatenate([load_wav("joke"), load_wav("weather")])
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0), speech=speech)
    clock = FakeClock()
    h = Harness(executor, vad=SileroOnnxBackend(), clock=clock)
    async with h:
        await h.update_audio(input=update)
        await h.send({"type": "response.create"})
        await h.run_until(lambda: bool(h.of("response.created")))
        total = len(speech) + ECHO_DELAY + 24_000  # the echo, then a second of quiet
        for k in range(0, total, STEP):
            if k % 2400 == 0:  # one 100 ms chunk of the answer each 100 ms, sent now
                assert executor.chunk_gate is not None
                executor.chunk_gate.release()
                await handled(h)
            clock.t += STEP / 24_000
            echo = np.zeros(STEP, np.float64)
            back = played(h)[max(k - ECHO_DELAY, 0) : max(k + STEP - ECHO_DELAY, 0)]
            echo[STEP - len(back) :] = back * ECHO_GAIN
            if user is not None:  # a microphone that hears the user, not the speaker
                echo = np.zeros(STEP) if k >= len(user) else user[k : k + STEP].astype(float)
                echo = np.pad(echo, (0, STEP - len(echo)))
            if over is not None and OVER_AT <= k < OVER_AT + len(over):
                said = over[k - OVER_AT : k - OVER_AT + STEP].astype(float)
                echo[: len(said)] += said
            await h.append(np.rint(echo).astype(np.int16))
            await handled(h)
            if heard is not None and k + STEP == 3 * 24_000:
                end = h.session.buffer.end
                heard.append(h.session.input.own_voice(end - 24_000, end))
        await h.settle()
    return h


@pytest.mark.parametrize(
    ("cancel_input", "interruption"),
    [
        (False, {}),
        (True, {}),
        (False, {"interruption": None}),
        (False, {"interruption": {"enabled": False}}),
    ],
)
async def test_with_the_echo_guard_the_echo_does_not_interrupt(
    cancel_input: bool, interruption: dict[str, Any]
) -> None:
    """The guard alone holds the echo (the VAD hears it), even with qualified
    interruption off, and finds it is the assistant's voice; with AEC3 on the input
    too the VAD mostly never hears it."""
    guard = {"type": "server", "cancel_input": cancel_input}
    h = await answer_with_echo(
        {"echo_cancellation": guard, "turn_detection": {"type": "server_vad", **interruption}}
    )
    assert h.errors() == []
    assert h.of("input_audio_buffer.speech_started") == []
    assert [r["status"] for r in h.responses_done()] == ["completed"]
    assert h.session.input.echo is not None and h.session.input.echo.cancel is cancel_input


async def test_the_user_talking_over_the_held_echo_interrupts() -> None:
    """The echo is held from the answer's first words; the guard checks the latest
    second again as the held speech grows, so the user's words over it still cut in."""
    h = await answer_with_echo(
        {"echo_cancellation": {"type": "server"}, "turn_detection": {"type": "server_vad"}},
        over=load_wav("timer"),
    )
    assert h.errors() == []
    assert h.responses_done()[0]["status"] == "cancelled"
    assert h.index("input_audio_buffer.speech_started") < h.index("response.done")
    # The turn starts near the user's first word, not at the echo's first (~0.1 s).
    [started] = h.of("input_audio_buffer.speech_started")
    assert 1500 <= started["audio_start_ms"] <= OVER_AT * 1000 // 24_000 + 300


async def test_the_echo_is_heard_as_the_assistants_own_voice_and_the_user_is_not() -> None:
    guard = {"echo_cancellation": {"type": "server"}, "turn_detection": None}
    heard: list[bool] = []
    await answer_with_echo(guard, heard=heard)
    other = np.concatenate([load_wav("timer"), load_wav("lights")])
    await answer_with_echo(guard, user=other, heard=heard)
    assert heard == [True, False]


async def test_without_it_the_echo_interrupts_the_answer() -> None:
    h = await answer_with_echo({"turn_detection": {"type": "server_vad"}})
    assert h.of("input_audio_buffer.speech_started") != []
    assert h.responses_done()[0]["status"] == "cancelled"


# --- the setting ------------------------------------------------------------------


async def test_the_setting_is_applied_but_not_echoed() -> None:
    async with Harness() as h:
        await h.update_audio(input={"echo_cancellation": {"type": "server"}})
        await h.settle()
        assert h.errors() == []
        assert (
            h.session.input.echo is not None and h.session.input.far_end is h.session.input.echo.far
        )
        for kind in ("session.created", "session.updated"):
            [event] = h.of(kind)
            assert "echo_cancellation" not in event["session"]["audio"]["input"]
        await h.update_audio(input={"echo_cancellation": None})
        await h.settle()
        assert h.errors() == []
        assert h.session.input.echo is None and h.session.input.far_end is None


async def test_an_unknown_type_is_refused_and_the_session_lives() -> None:
    async with Harness() as h:
        await h.update_audio(input={"echo_cancellation": {"type": "client"}})
        await h.settle()
        [error] = h.errors()
        assert error["code"] == "invalid_value"
        assert error["param"] == "session.audio.input.echo_cancellation.type"
        assert h.session.input.echo is None
        await h.update_audio(input={"echo_cancellation": {"type": "server"}})
        await h.settle()
        assert len(h.errors()) == 1 and h.session.input.echo is not None


async def test_the_far_end_is_what_the_writer_sends_not_what_it_drops() -> None:

    clock = FakeClock()
    far, epoch = FarEnd(clock), {"conversation": 0}
    played = Playback(far_end=lambda: far)
    box = Outbox(current_epoch=lambda lane: epoch[lane], on_taken=played.taken)
    pcm = np.full(2400, 1000, np.int16)
    delta = "response.output_audio.delta"
    await box.put(OutEvent("a", delta, 0, item_id="i", samples=2400, pcm=pcm))
    await box.put(OutEvent("b", delta, 0, item_id="i", samples=2400, pcm=pcm))
    assert (await box.get()) is not None
    epoch["conversation"] = 1  # a cancel: the second delta is stale
    box.put_control(OutEvent("c", "response.done"))
    assert (await box.get()).type == "response.done"  # type: ignore[union-attr]
    assert far.playing_until() == wall_index(clock.t) + 1600  # the first delta only
    clock.t += 0.05
    box.put_control(OutEvent("s", "input_audio_buffer.speech_started", flush=Flush.CLIENT))
    await box.get()
    assert far.playing_until() == wall_index(clock.t)  # the client flushed its playback


async def test_cancel_input_must_be_a_boolean_and_the_session_lives() -> None:
    async with Harness() as h:
        await h.update_audio(input={"echo_cancellation": {"type": "server", "cancel_input": "yes"}})
        await h.settle()
        [error] = h.errors()
        assert error["code"] == "invalid_type"
        assert error["param"] == "session.audio.input.echo_cancellation.cancel_input"
        assert h.session.input.echo is None
        await h.update_audio(input={"echo_cancellation": {"type": "server", "cancel_input": True}})
        await h.settle()
        assert (
            len(h.errors()) == 1
            and h.session.input.echo is not None
            and h.session.input.echo.cancel
        )
