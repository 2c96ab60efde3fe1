"""The remote speech synthesis stage against a fake OpenAI-compatible server
speaking the real wire format (JSON in, chunked raw pcm out):
bench/fakes/speech.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

import numpy as np
import pytest

from bench.fakes.speech import CHUNK, CHUNKS, FakeSpeech, running_fake_speech
from models.base import OutputChunk
from models.errors import ModelMissing
from models.remote_http import RemoteError, RemoteOptions
from models.speech.remote_tts import RemoteSynthesizer, voice_for, voice_table
from models.speech.slots import StageSlots
from models.speech.speaker import Speaker, speak_text
from tests.support.servers import free_port

SENTENCE_SAMPLES = CHUNKS * len(CHUNK) // 2


@pytest.fixture
async def fake() -> AsyncIterator[FakeSpeech]:
    async with running_fake_speech() as server:
        yield server


def synthesizer(*urls: str, **options: object) -> RemoteSynthesizer:
    remote = RemoteOptions("tts", urls, model="voice-model", **options)  # type: ignore[arg-type]
    return RemoteSynthesizer(remote, voices={"alloy": "af_bella", "*": "af_heart"}, check=False)


async def test_a_sentence_is_spoken_in_the_mapped_voice(fake: FakeSpeech) -> None:
    tts = await asyncio.to_thread(
        RemoteSynthesizer, RemoteOptions("tts", (fake.url("a"),)), voices={"alloy": "af_bella"}
    )
    audio = await tts.synthesize_async("Hello\nthere.", "alloy")
    assert audio.dtype == np.int16 and len(audio) == SENTENCE_SAMPLES
    assert np.array_equal(audio[:2400], np.frombuffer(CHUNK, dtype="<i2"))
    [(name, body)] = fake.spoken
    assert name == "a"
    assert body == {
        "model": "speech-a",  # the first the server lists
        "input": "Hello there.",
        "voice": "af_bella",
        "response_format": "pcm",
        "speed": 1.0,
    }
    # The blocking variant (warm-up) speaks the same, from a worker thread.
    assert len(await asyncio.to_thread(tts.synthesize, "Ready.")) == SENTENCE_SAMPLES
    assert tts.sample_rate == 24_000
    info = tts.describe()
    assert (info.stage, info.path, info.source) == (
        "tts",
        fake.url("a"),
        "OpenAI-compatible /v1/audio/speech",
    )


async def test_a_sentence_plays_piece_by_piece_as_the_server_speaks_it(
    fake: FakeSpeech,
) -> None:
    tts = synthesizer(fake.url("a"))
    fake.hold()  # the server sends the first chunk, then one per permit
    stream = tts.synthesize_stream("Hello there.", "alloy")
    first = await anext(stream)  # while the server still holds the rest
    assert np.array_equal(first, np.frombuffer(CHUNK, dtype="<i2"))
    assert fake.finished == 0
    await fake.release(CHUNKS - 1)
    rest = [piece async for piece in stream]
    assert sum(len(p) for p in (first, *rest)) == SENTENCE_SAMPLES
    assert (fake.finished, fake.closed) == (1, 0)


async def test_closing_a_sentence_midway_closes_its_request(fake: FakeSpeech) -> None:
    tts = synthesizer(fake.url("a"))
    fake.hold()
    stream = tts.synthesize_stream("Hello there.")
    await anext(stream)
    await stream.aclose()  # a barge-in
    await asyncio.wait_for(fake.stream_closed.wait(), 30)  # a hang guard only
    assert (fake.finished, fake.closed) == (0, 1)


def test_the_voice_table_maps_session_voices_to_the_server_s() -> None:
    table = voice_table(["alloy = af_bella", "*=af_heart"])
    assert table == {"alloy": "af_bella", "*": "af_heart"}
    assert voice_for(table, "alloy") == "af_bella"
    assert voice_for(table, "verse") == "af_heart"
    assert voice_for({}, "verse") == "verse"  # servers that know OpenAI's names
    with pytest.raises(ValueError, match="SESSION_VOICE=SERVER_VOICE"):
        voice_table(["alloy"])


async def test_a_failing_replica_is_retried_on_the_next(fake: FakeSpeech) -> None:
    refused = f"http://127.0.0.1:{free_port()}"
    tts = synthesizer(fake.url("bad", "error"), refused, fake.url("good"))
    audio = await tts.synthesize_async("Hello there.", "verse")
    assert len(audio) == SENTENCE_SAMPLES
    assert [(name, body["voice"]) for name, body in fake.spoken] == [
        ("bad", "af_heart"),
        ("good", "af_heart"),
    ]


async def test_a_sentence_begun_is_not_retried_elsewhere(fake: FakeSpeech) -> None:
    tts = synthesizer(fake.url("dies", "dies"), fake.url("good"))
    with pytest.raises(
        RemoteError, match=r"tts server .*/dies broke the connection.*in the middle of the answer"
    ):
        await tts.synthesize_async("Hello there.")
    assert [name for name, _ in fake.spoken] == ["dies"]


async def test_when_every_attempt_fails_the_error_names_the_stage(fake: FakeSpeech) -> None:
    tts = synthesizer(fake.url("bad", "error"), retries=1)
    with pytest.raises(RemoteError, match=r"tts stage did not answer after 2 attempts.*HTTP 500"):
        await tts.synthesize_async("Hello there.")


async def test_a_stalling_server_fails_with_a_timeout(fake: FakeSpeech) -> None:
    tts = synthesizer(fake.url("slow", "silent"), read_timeout_s=0.2, retries=0)
    with pytest.raises(RemoteError, match=r"tts server .*/slow did not answer within 0.2 s"):
        await tts.synthesize_async("Hello there.")


async def test_a_garbage_answer_is_a_clear_error_not_a_retry(fake: FakeSpeech) -> None:
    tts = synthesizer(fake.url("junk", "garbage"), fake.url("good"))
    with pytest.raises(RemoteError, match=r"tts server .*/junk sent text/plain.*, not pcm audio"):
        await tts.synthesize_async("Hello there.")
    assert [name for name, _ in fake.spoken] == ["junk"]


async def test_an_unreachable_server_stops_the_start_naming_the_stage() -> None:
    refused = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ModelMissing, match=r"remote TTS stage is unreachable") as caught:
        await asyncio.to_thread(RemoteSynthesizer, RemoteOptions("tts", (refused,)))
    assert "PARLEY_TTS_URL" in caught.value.fix


async def test_cancelling_a_spoken_reply_closes_the_speech_request(fake: FakeSpeech) -> None:
    tts = synthesizer(fake.url("a"))
    fake.hold()  # the first chunk goes out, the rest wait for permits

    async def reply() -> AsyncGenerator[str, None]:
        yield "Hello there. This is a long answer."

    async def speak() -> None:
        spoken = speak_text(
            reply(), Speaker(tts, StageSlots("tts", 1)), speak=True, stopped=lambda: False
        )
        async for _ in spoken:
            pass

    task = asyncio.create_task(speak())
    await fake.first_chunk_sent.wait()
    assert fake.closed == 0
    task.cancel()  # what a barge-in does to the response's task
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(fake.stream_closed.wait(), 30)  # a hang guard only
    assert (fake.closed, fake.finished) == (1, 0)


async def test_a_reply_read_slowly_keeps_no_other_sentence_waiting(fake: FakeSpeech) -> None:
    """The voice's slot (one call at a time here, shared by every session) is held
    while the server speaks a sentence, not while its pieces wait for a session
    whose client reads slowly."""
    tts = synthesizer(fake.url("a"))
    speaker = Speaker(tts, StageSlots("tts", 1))

    async def reply(text: str) -> AsyncGenerator[str, None]:
        yield text

    slow = speak_text(reply("Hello there."), speaker, speak=True, stopped=lambda: False)
    first = (await anext(slow)).audio  # its first piece; it reads no more for now
    assert first is not None and len(first) > 0
    other = speak_text(reply("Another answer."), speaker, speak=True, stopped=lambda: False)
    # A hang guard only: with the slot held by the slow reader this never ends.
    heard = await asyncio.wait_for(_all_audio(other), 30)
    assert len(heard) == SENTENCE_SAMPLES
    rest = await _all_audio(slow)
    assert len(first) + len(rest) == SENTENCE_SAMPLES
    assert fake.finished == 2


async def _all_audio(spoken: AsyncGenerator[OutputChunk, None]) -> np.ndarray:
    return np.concatenate([c.audio async for c in spoken if c.audio is not None])
