"""Held speech on an overloaded server (models/listening/fair_pool.py's budget): when
the hearing recognizer's line is full, a session's held speech is decided by the
duration rule at once (it interrupts from `min_speech_ms`), not held while it waits
for a hearing, and the refused hearing is counted."""

from __future__ import annotations

import asyncio
import threading
from threading import Barrier

import numpy as np

from bench.speech import load_wav, silence
from bench.vad_backends import speech_extent_ms
from models.listening.fair_pool import OVERLOADED
from models.listening.hearing import WhisperHearing
from models.listening.vad import SileroOnnxBackend
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.callers import session_context
from tests.support.harness import Harness

INTERRUPTION = {"type": "server_vad", "interruption": {"min_speech_ms": 200}}


async def settled(h: Harness) -> None:
    """Every message handled and its events read, 20 loop turns in a row (the answer
    is held open by the test, so the session never goes idle)."""
    quiet = 0
    while quiet < 20:
        await h.steps(1)
        quiet = quiet + 1 if h.session.handled() and not len(h.session.outbox) else 0


async def test_an_overloaded_recognizer_lets_held_speech_interrupt_by_its_length() -> None:
    # Both hearing threads busy with other sessions' calls, and no room to wait.
    hearing, release, busy = WhisperHearing(queue_limit=0), threading.Event(), Barrier(3)

    def other_session() -> str:
        busy.wait(10)
        return "heard" if release.wait(10) else "stuck"

    loop = asyncio.get_running_loop()
    others = [
        loop.create_task(hearing.pool.run(other_session), context=session_context(name))
        for name in ("x", "y")
    ]
    await asyncio.to_thread(busy.wait, 10)  # both are on the threads
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    try:
        async with Harness(executor, vad=SileroOnnxBackend(), hearing=hearing) as h:
            audio = {"input": {"turn_detection": INTERRUPTION}}
            await h.send(
                {"type": "session.update", "session": {"type": "realtime", "audio": audio}}
            )
            await h.send({"type": "response.create"})  # an answer that streams on
            await h.run_until(lambda: bool(h.of("response.created")))
            speech = load_wav("weather")
            onset_ms, _ = speech_extent_ms(speech)
            # Only the first 400 ms of the question: a recognizer that answered would
            # still be hearing it; the duration rule has decided.
            head = speech[: (onset_ms + 400) * 24]
            await append_chunked(h, np.concatenate([silence(300), head]))
            await settled(h)
            [started] = h.of("input_audio_buffer.speech_started")
            assert 0 <= started["audio_start_ms"] <= 300 + onset_ms
            assert [r["status"] for r in h.responses_done()] == ["cancelled"]
            assert hearing.pool.dropped[OVERLOADED] >= 1
            assert not any(task.done() for task in others)  # still on the threads
            for _ in range(1000):
                executor.chunk_gate.release()
    finally:
        release.set()
        assert await asyncio.gather(*others) == ["heard", "heard"]
        hearing.close()
