"""The cascade with every stage on a server (the GPU deployment of docs/deploy.md):
Whisper, the language model and the voice each behind a fake that speaks the real
wire format. A barge-in closes every stream in flight, so each server stops working
(its own counters say so); speculative recognition and the early answer work as with
the embedded stages."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
import pytest

from bench.fakes.openai import FakeOpenAI, running_fake_openai
from bench.fakes.speech import CHUNKS, FakeSpeech, running_fake_speech
from bench.speech import load_wav, silence
from models.cascade.pipeline import CascadeExecutor
from models.cascade.remote_llm import RemoteLanguageModel, RemoteLLMOptions
from models.remote_http import RemoteOptions
from models.speech.remote_asr import RemoteRecognizer
from models.speech.remote_tts import RemoteSynthesizer
from tests.support.audio import append_chunked, say
from tests.support.harness import Harness
from tests.support.recorder import Recorder


@dataclass
class Servers:
    speech: FakeSpeech  # the ASR and TTS servers
    chat: FakeOpenAI  # the language model's


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    async with running_fake_speech() as speech, running_fake_openai() as chat:
        yield Servers(speech, chat)
        await speech.let_go()
        await chat.free()


async def all_remote(servers: Servers) -> CascadeExecutor:
    """Made as `parley serve` makes it: each stage checked at start, in a thread (the
    fakes run in this loop)."""
    asr = await asyncio.to_thread(
        RemoteRecognizer, RemoteOptions("asr", (servers.speech.url("whisper"),))
    )
    tts = await asyncio.to_thread(
        RemoteSynthesizer, RemoteOptions("tts", (servers.speech.url("kokoro"),))
    )
    llm = RemoteLanguageModel(RemoteLLMOptions(urls=(servers.chat.url("llm"),)))
    await asyncio.to_thread(llm.check)
    return CascadeExecutor(asr, llm, tts)


async def test_a_barge_in_closes_the_language_models_and_the_voices_streams(
    servers: Servers,
) -> None:
    executor = await all_remote(servers)
    chat, speech = servers.chat, servers.speech
    chat.hold()  # the model writes a word per permit
    speech.hold()  # the voice sends a sentence's first chunk, then one per permit
    recorder = Recorder()
    try:
        async with Harness(executor, observer=recorder) as h:
            await say(h, "weather")
            await asyncio.wait_for(chat.requested.wait(), 30)  # hang guards only
            await chat.release(9)  # "I heard 0 audio parts in 2 messages. The"
            await asyncio.wait_for(speech.first_chunk_sent.wait(), 30)
            # The sentence's first audio reaches the client while the voice's server
            # still holds the rest of it.
            await h.wait_until(lambda: len(h.of("response.output_audio.delta")) >= 1)
            assert speech.finished == 0
            await speech.release(CHUNKS - 1)  # the first sentence, all spoken
            await h.wait_until(lambda: speech.finished == 1)
            speech.first_chunk_sent.clear()
            await chat.release(7)  # "fake server answers in three sentences. This"
            await asyncio.wait_for(speech.first_chunk_sent.wait(), 30)
            assert len(speech.spoken) == 2
            # Now the model is writing the third sentence and the voice speaking the
            # second: the user talks over the answer.
            await say(h, "timer")
            await h.wait_until(lambda: len(h.responses_done()) >= 1)
            cancelled = h.responses_done()[0]
            assert cancelled["status"] == "cancelled"
            assert cancelled["status_details"]["reason"] == "turn_detected"
            # Both servers saw their streams closed, mid-answer.
            await asyncio.wait_for(chat.stream_closed.wait(), 30)
            await asyncio.wait_for(speech.stream_closed.wait(), 30)
            assert (chat.closed, chat.finished) == (1, 0)
            assert (speech.closed, speech.finished) == (1, 1)
            # The interrupting question is answered in full.
            await chat.free()
            await speech.free()
            await h.wait_until(lambda: len(h.responses_done()) == 2)
            assert h.responses_done()[1]["status"] == "completed"
            assert not h.errors()
    finally:
        await executor.aclose()
        await executor.llm.aclose()
    # Every stage timed as remote; the cut answer has no whole reply to time.
    timed = [c[1:] for c in recorder.calls if c[0] == "stage_timed"]
    by_response = {
        response["id"]: {(t.stage, t.where, t.phase) for r, t in timed if r == response["id"]}
        for response in h.responses_done()
    }
    spoken = {("asr", "remote", "transcript"), ("llm", "remote", "first_token")}
    spoken.add(("tts", "remote", "first_audio"))
    assert list(by_response.values()) == [spoken, spoken | {("llm", "remote", "total")}]


async def test_speculation_and_the_early_answer_use_the_remote_stages(servers: Servers) -> None:
    executor = await all_remote(servers)
    # A question, then its end: server_vad recognizes the turn in the pause and
    # begins its answer there, before the commit.
    pcm = np.concatenate([silence(300), load_wav("weather"), silence(900)])
    try:
        async with Harness(executor) as h:
            await append_chunked(h, pcm)
            await h.wait_until(lambda: len(h.responses_done()) == 1)
            done = h.responses_done()[0]
            assert done["status"] == "completed" and done["output"]
            assert not h.errors()
    finally:
        await executor.aclose()
        await executor.llm.aclose()
    stats = executor.transcripts.speculation
    # One recognition, on the ASR server, begun in the pause and adopted at the commit.
    assert (stats.started, stats.used) == (1, 1) and len(servers.speech.uploads) == 1
    # The answer begun in the pause became the response: one request to the model.
    assert (stats.responses_started, stats.responses_used) == (1, 1)
    assert len(servers.chat.requests) == 1
    asked = servers.chat.requests[0][1]["messages"][-1]
    assert asked == {"role": "user", "content": servers.speech.transcript}


async def test_the_remote_clients_are_made_at_start_not_on_the_first_turn(
    servers: Servers,
) -> None:
    executor = await all_remote(servers)
    tts, llm = executor.tts, executor.llm
    assert isinstance(tts, RemoteSynthesizer) and isinstance(llm, RemoteLanguageModel)
    assert (tts._client, llm.server._client) == (None, None)
    await executor.start()  # the server's lifespan, in its serving loop
    try:
        assert tts._client is not None and llm.server._client is not None
    finally:
        await executor.aclose()
        await llm.aclose()
