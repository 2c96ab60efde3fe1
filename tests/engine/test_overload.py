"""Held speech on an overloaded server (models/listening/fair_pool.py's budget): when
the hearing recognizer's line is full, a session's held speech is decided by the
duration rule at once (it interrupts from `min_speech_ms`), not held while it waits
for a hearing, and the refused hearing is counted."""

from __future__ import annotations

import asyncio

import numpy as np

from bench.speech import load_wav, silence
from bench.vad_backends import speech_extent_ms
from models.listening.fair_pool import OVERLOADED
from models.listening.hearing import WhisperHearing
from models.listening.vad import SileroOnnxBackend
from models.scripted import ScriptedExecutor
from tests.engine.test_held_speech import finish, handled, speaking, update
from tests.models.test_fair_pool import Gate, as_caller
from tests.support.audio import append_chunked
from tests.support.harness import Harness


async def test_an_overloaded_recognizer_lets_held_speech_interrupt_by_its_length() -> None:
    # Both hearing threads busy with other sessions' calls, and no room to wait.
    hearing, gate = WhisperHearing(queue_limit=0), Gate()
    others = [as_caller(name, hearing.pool, gate.call(name)) for name in ("x", "y")]
    assert {await gate.next_started(), await gate.next_started()} == {"x", "y"}
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    try:
        async with Harness(executor, vad=SileroOnnxBackend(), hearing=hearing) as h:
            await h.send(update(min_speech_ms=200))
            await speaking(h)
            speech = load_wav("weather")
            onset_ms, _ = speech_extent_ms(speech)
            # Only the first 400 ms of the question: a recognizer that answered would
            # still be hearing it; the duration rule has decided.
            head = speech[: (onset_ms + 400) * 24]
            await append_chunked(h, np.concatenate([silence(300), head]))
            await handled(h)
            [started] = h.of("input_audio_buffer.speech_started")
            assert 0 <= started["audio_start_ms"] <= 300 + onset_ms
            assert [r["status"] for r in h.responses_done()] == ["cancelled"]
            assert hearing.pool.dropped[OVERLOADED] >= 1
            assert gate.started.empty()  # nothing of this session reached a thread
            finish(executor)
    finally:
        gate.release.release()
        gate.release.release()
        assert sorted(await asyncio.gather(*others)) == ["x", "y"]
        hearing.close()
