"""The cascade with both speech stages remote (bench/fakes/speech.py speaking
the real wire format): a spoken question answered in speech, and a cancelled answer
closing its speech request on the server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Sequence

import pytest

from bench.fakes.speech import CHUNK, CHUNKS, FakeSpeech, running_fake_speech
from models.cascade.pipeline import CascadeExecutor
from models.cascade.text import ChatMessage
from models.remote_http import RemoteOptions
from models.speech.files import ModelInfo
from models.speech.remote_asr import RemoteRecognizer
from models.speech.remote_tts import RemoteSynthesizer
from tests.support.audio import say
from tests.support.harness import Harness
from tests.support.recorder import Recorder

ANSWER = "It is sunny. Take a hat."
VOICES = {"alloy": "af_bella", "*": "af_heart"}  # alloy: a session's default voice


class AnsweringModel:
    """A language model that always gives ANSWER, and keeps what it was asked."""

    name = "answering"
    calls_tools = False

    def __init__(self) -> None:
        self.asked: list[list[ChatMessage]] = []

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int, stop: threading.Event
    ) -> Iterator[str]:
        self.asked.append(list(messages))
        for word in ANSWER.split(" "):
            if stop.is_set():
                return
            yield word + " "

    def describe(self) -> ModelInfo:
        return ModelInfo("llm", self.name, "-", 0, "-", "test")

    def close(self) -> None:
        pass


@pytest.fixture
async def fake() -> AsyncIterator[FakeSpeech]:
    async with running_fake_speech() as server:
        yield server


async def remote_cascade(fake: FakeSpeech, llm: AnsweringModel) -> CascadeExecutor:
    asr_options = RemoteOptions("asr", (fake.url("whisper"),))
    tts_options = RemoteOptions("tts", (fake.url("kokoro"),))
    # Checked at start, as `parley serve` does, in a thread: the fake runs in this loop.
    asr = await asyncio.to_thread(RemoteRecognizer, asr_options)
    tts = await asyncio.to_thread(RemoteSynthesizer, tts_options, voices=VOICES)
    return CascadeExecutor(asr, llm, tts, max_sentences=0)


async def test_a_spoken_question_is_answered_through_remote_speech_stages(
    fake: FakeSpeech,
) -> None:
    llm = AnsweringModel()
    executor = await remote_cascade(fake, llm)
    async with Harness(executor) as h:
        await say(h, "weather")
        await h.wait_until(lambda: len(h.responses_done()) == 1)
        response = h.responses_done()[0]
        assert response["status"] == "completed", response
        item = h.session.conversation.get(response["output"][0]["id"])
        assert item is not None and item.audio is not None
        assert item.transcript == ANSWER
        assert len(item.audio) == 2 * CHUNKS * len(CHUNK) // 2  # two sentences, 24 kHz
        assert not h.errors()
    # The model read what the remote recognizer heard.
    assert llm.asked[-1][-1] == ChatMessage("user", fake.transcript)
    assert fake.uploads and fake.uploads[-1][1]["model"] == "speech-whisper"
    # In the session's voice, as the table names it on the server.
    spoken = [(body["input"], body["voice"]) for _, body in fake.spoken]
    assert spoken == [("It is sunny.", "af_bella"), ("Take a hat.", "af_bella")]
    info = executor.asr.describe(), executor.tts.describe()
    assert [(i.stage, i.path) for i in info] == [
        ("asr", fake.url("whisper")),
        ("tts", fake.url("kokoro")),
    ]


async def test_a_cancelled_answer_closes_its_speech_request(fake: FakeSpeech) -> None:
    executor = await remote_cascade(fake, AnsweringModel())
    fake.hold()  # the server sends a sentence's first chunk, then waits
    async with Harness(executor) as h:
        await say(h, "weather")
        await fake.first_chunk_sent.wait()
        await h.send({"type": "response.cancel"})
        await h.wait_until(lambda: len(h.responses_done()) == 1)
        assert h.responses_done()[0]["status"] == "cancelled"
        await asyncio.wait_for(fake.stream_closed.wait(), 30)  # a hang guard only
        assert (fake.closed, fake.finished) == (1, 0)
        assert not h.errors()


async def test_a_failing_speech_server_fails_the_answer_and_the_session_lives(
    fake: FakeSpeech,
) -> None:
    executor = await remote_cascade(fake, AnsweringModel())
    fake.behaviour["kokoro"] = "error"
    async with Harness(executor) as h:
        await say(h, "weather")
        await h.wait_until(lambda: len(h.responses_done()) == 1)
        failed = h.responses_done()[0]
        assert failed["status"] == "failed"
        assert "tts stage did not answer after 3 attempts" in str(failed["status_details"])
        fake.behaviour["kokoro"] = "normal"
        await say(h, "timer")
        await h.wait_until(lambda: len(h.responses_done()) == 2)
        assert h.responses_done()[1]["status"] == "completed"


async def test_remote_stages_are_timed_as_remote(fake: FakeSpeech) -> None:
    recorder = Recorder()
    executor = await remote_cascade(fake, AnsweringModel())
    async with Harness(executor, observer=recorder) as h:
        await say(h, "weather")
        await h.wait_until(lambda: len(h.responses_done()) == 1)
        await h.settle()
    timed = {(c[2].stage, c[2].where, c[2].phase) for c in recorder.calls if c[0] == "stage_timed"}
    assert timed == {
        ("asr", "remote", "transcript"),
        ("llm", "embedded", "first_token"),
        ("llm", "embedded", "total"),
        ("tts", "remote", "first_audio"),
    }
