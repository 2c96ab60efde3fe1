"""The engine observer: what a session reports, in order, and that a session without
one reports nothing (engine/observer.py)."""

from __future__ import annotations

import asyncio

import numpy as np

from bench.speech import load_wav, silence
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked, say
from tests.support.clock import FakeClock
from tests.support.harness import Harness
from tests.support.recorder import Recorder
from tests.support.timed_stages import cascade

VAD_SESSION = {
    "type": "session.update",
    "session": {
        "type": "realtime",
        "audio": {"input": {"turn_detection": {"type": "server_vad"}}},
    },
}


async def test_a_turn_answered_then_interrupted_is_reported_in_order() -> None:
    recorder = Recorder()
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor, observer=recorder) as h:
        await h.send(VAD_SESSION)
        await append_chunked(h, np.concatenate([silence(300), load_wav("weather"), silence(900)]))
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        assert executor.chunk_gate is not None
        executor.chunk_gate.release()
        await h.run_until(lambda: len(h.of("response.output_audio.delta")) == 1)
        await h.steps(5)  # the collector has taken the delta off the outbox
        await append_chunked(h, np.concatenate([load_wav("joke"), silence(900)]))
        await h.run_until(lambda: len(h.responses_done()) == 1)
        for _ in range(50):
            executor.chunk_gate.release()
        await h.settle()
    await asyncio.sleep(0)

    first, second = h.of("input_audio_buffer.speech_started")
    created = [e["response"] for e in h.of("response.created")]
    done = {r["id"]: r["status"] for r in h.responses_done()}
    first_item = h.of("response.output_item.added")[0]["item"]["id"]
    end_ms = h.of("input_audio_buffer.speech_stopped")[0]["audio_end_ms"]
    # A turn: heard, committed, answered (speech_stopped comes once the turn is
    # committed and its response requested; the harness's frames carry no stamp).
    assert recorder.calls[:8] == [
        ("session_opened",),
        ("speech_started", first["item_id"], first["audio_start_ms"]),
        ("committed", first["item_id"]),
        ("response_created", created[0]["id"], first_item),
        ("speech_stopped", first["item_id"], end_ms, None),
        ("first_model_chunk", created[0]["id"]),
        ("first_audio_sent", first_item),
        ("speech_started", second["item_id"], second["audio_start_ms"]),
    ]
    # Talked over: the barge-in, then the one response.done of the cancelled answer.
    assert recorder.calls[8:10] == [
        ("barge_in", created[0]["id"]),
        ("response_done", created[0]["id"], "cancelled"),
    ]
    # The interrupting turn is answered in full, and the session closes once. (Its
    # response.done is queued before the collector has taken its first audio off
    # the outbox, so those two come in either order.)
    names = recorder.names()
    assert names[10:14] == ["committed", "response_created", "speech_stopped", "first_model_chunk"]
    assert sorted(names[14:16]) == ["first_audio_sent", "response_done"]
    assert names[16:] == ["session_closed"]
    assert ("response_done", created[1]["id"], "completed") in recorder.calls
    assert done[created[1]["id"]] == "completed"
    assert recorder.session_ids == {h.session.session_id}


async def test_errors_are_reported_with_their_code() -> None:
    recorder = Recorder()
    async with Harness(observer=recorder) as h:
        await h.send({"type": "response.cancel", "event_id": "e1"})
        await h.send_raw("not json")
        await h.settle()
    codes = [c[1] for c in recorder.calls if c[0] == "error_sent"]
    assert (
        codes == [e["code"] for e in h.errors()] == ["response_cancel_not_active", "invalid_json"]
    )


async def test_each_model_stage_is_reported_once_as_its_response_ends() -> None:
    recorder = Recorder()
    ex, _, _ = cascade(FakeClock(), written=True)
    async with Harness(ex, observer=recorder) as h:
        await say(h, "weather")
        await h.wait_until(lambda: len(h.responses_done()) == 1)
        await h.settle()
    response_id = h.responses_done()[0]["id"]
    timed = [c for c in recorder.calls if c[0] == "stage_timed"]
    assert sorted((c[2].stage, c[2].phase) for c in timed) == [
        ("asr", "transcript"),
        ("llm", "first_token"),
        ("llm", "total"),
        ("tts", "first_audio"),
    ]
    assert {c[1] for c in timed} == {response_id}
    # Reported as the response ends, just before its response.done.
    names = recorder.names()
    done = names.index("response_done")
    assert names[done - len(timed) : done] == ["stage_timed"] * len(timed)
