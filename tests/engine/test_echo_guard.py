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

from bench.speech import load_wav
from engine.vad import SileroOnnxBackend
from models.scripted import ScriptedExecutor
from tests.support.harness import Harness

STEP = 480  # 20 ms appends
ECHO_GAIN = 10 ** (-10 / 20)
ECHO_DELAY = 2400  # 100 ms


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def handled(h: Harness) -> None:
    """Until every message is handled and its events read (the answer is held open by
    the test, so the session never goes idle)."""
    s, quiet = h.session, 0
    while quiet < 20:
        await h.steps(1)
        quiet = quiet + 1 if s._mailbox.empty() and not s._busy and not len(s.outbox) else 0


def played(h: Harness) -> npt.NDArray[np.int16]:
    """The answer's audio the client received, as it plays back to back."""
    deltas = [base64.b64decode(e["delta"]) for e in h.of("response.output_audio.delta")]
    return np.frombuffer(b"".join(deltas), "<i2").astype(np.int16)


async def answer_with_echo(update: dict[str, Any]) -> Harness:
    """The assistant speaks two fixtures; the client's microphone hears it back."""
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
            await h.append(np.rint(echo).astype(np.int16))
            await handled(h)
        await h.settle()
    return h


async def test_with_the_echo_guard_the_echo_does_not_interrupt() -> None:
    h = await answer_with_echo(
        {"echo_cancellation": {"type": "server"}, "turn_detection": {"type": "server_vad"}}
    )
    assert h.errors() == []
    assert h.of("input_audio_buffer.speech_started") == []
    assert [r["status"] for r in h.responses_done()] == ["completed"]


async def test_without_it_the_echo_interrupts_the_answer() -> None:
    h = await answer_with_echo({"turn_detection": {"type": "server_vad"}})
    assert h.of("input_audio_buffer.speech_started") != []
    assert h.responses_done()[0]["status"] == "cancelled"
