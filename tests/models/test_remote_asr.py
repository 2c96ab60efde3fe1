"""The remote speech recognition stage against a fake OpenAI-compatible server
speaking the real wire format (multipart in, JSON out): bench/fakes/speech.py."""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import AsyncIterator

import numpy as np
import pytest

from bench.fakes.speech import FakeSpeech, running_fake_speech
from models.base import SpeechHint
from models.errors import ModelMissing
from models.remote_http import RemoteError, RemoteOptions, attempt_order
from models.speech.remote_asr import RemoteRecognizer
from tests.support.servers import free_port

TURN = (3000 * np.sin(np.arange(16_000) / 7)).astype(np.int16)  # 1 s at 16 kHz


@pytest.fixture
async def fake() -> AsyncIterator[FakeSpeech]:
    async with running_fake_speech() as server:
        yield server


async def recognizer(*urls: str, **options: object) -> RemoteRecognizer:
    """Made in a worker thread: its check at start blocks, and the fake runs here."""
    remote = RemoteOptions("asr", urls, **options)  # type: ignore[arg-type]
    return await asyncio.to_thread(RemoteRecognizer, remote, prompt="Parley")


async def test_a_turn_is_transcribed_with_its_language_and_prompt(fake: FakeSpeech) -> None:
    asr = await recognizer(fake.url("a"))
    text = await asyncio.to_thread(asr.transcribe, TURN, 16_000)
    assert text == "What is the weather like today?"
    [(name, form)] = fake.uploads
    assert (name, form["model"], form["language"], form["prompt"]) == (
        "a",
        "speech-a",
        "en",
        "Parley",
    )
    with wave.open(io.BytesIO(form["file"])) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16_000, 1, 2)
        sent = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    assert np.array_equal(sent, TURN)
    # The session's own language and prompt (audio.input.transcription) win.
    await asyncio.to_thread(asr.transcribe, TURN, 16_000, SpeechHint("de", "Kubernetes"))
    form = fake.uploads[-1][1]
    assert (form["language"], form["prompt"]) == ("de", "Kubernetes")
    info = asr.describe()
    assert (info.stage, info.path) == ("asr", fake.url("a"))
    assert "remote" in info.name and "transcriptions" in info.source
    asr.close()


async def test_a_failing_replica_is_retried_on_the_next(fake: FakeSpeech) -> None:
    refused = f"http://127.0.0.1:{free_port()}"
    asr = RemoteRecognizer(
        RemoteOptions("asr", (fake.url("bad", "error"), refused, fake.url("good")), model="w"),
        check=False,
    )
    text = await asyncio.to_thread(asr.transcribe, TURN, 16_000)
    assert text == "What is the weather like today?"
    assert [name for name, _ in fake.uploads] == ["bad", "good"]
    # The next turn starts on a healthy replica: the failed ones are passed over.
    await asyncio.to_thread(asr.transcribe, TURN, 16_000)
    assert [name for name, _ in fake.uploads] == ["bad", "good", "good"]


async def test_when_every_attempt_fails_the_error_names_the_stage(fake: FakeSpeech) -> None:
    options = RemoteOptions("asr", (fake.url("bad", "error"),), model="w", retries=1)
    asr = RemoteRecognizer(options, check=False)
    with pytest.raises(RemoteError, match=r"asr stage did not answer after 2 attempts.*HTTP 500"):
        await asyncio.to_thread(asr.transcribe, TURN, 16_000)
    assert len(fake.uploads) == 2


async def test_the_server_s_key_goes_with_every_request(fake: FakeSpeech) -> None:
    asr = await recognizer(fake.url("a"), api_key="sk-speech")
    await asyncio.to_thread(asr.transcribe, TURN, 16_000)
    assert fake.keys == ["Bearer sk-speech"]


async def test_a_stalling_server_fails_with_a_timeout(fake: FakeSpeech) -> None:
    options = RemoteOptions(
        "asr", (fake.url("slow", "silent"),), model="w", read_timeout_s=0.2, retries=0
    )
    asr = RemoteRecognizer(options, check=False)
    with pytest.raises(RemoteError, match=r"asr server .*/slow did not answer within 0.2 s"):
        await asyncio.to_thread(asr.transcribe, TURN, 16_000)


async def test_a_garbage_answer_is_a_clear_error_not_a_retry(fake: FakeSpeech) -> None:
    options = RemoteOptions("asr", (fake.url("junk", "garbage"),), model="w")
    asr = RemoteRecognizer(options, check=False)
    with pytest.raises(RemoteError, match=r"asr server .*/junk sent no transcription: '<html>"):
        await asyncio.to_thread(asr.transcribe, TURN, 16_000)
    assert len(fake.uploads) == 1  # an answer came: not retried


async def test_an_unreachable_server_stops_the_start_naming_the_stage() -> None:
    refused = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ModelMissing, match=r"remote ASR stage is unreachable.*refused") as caught:
        await recognizer(refused)
    assert "PARLEY_ASR_URL" in caught.value.fix
    with pytest.raises(ModelMissing, match="not http"):
        await recognizer("ftp://whisper")


def test_attempts_go_to_healthy_replicas_first_and_rotate() -> None:
    urls = ("a", "b", "c")
    assert attempt_order(urls, 0, set()) == ["a", "b", "c"]
    assert attempt_order(urls, 4, set()) == ["b", "c", "a"]
    assert attempt_order(urls, 0, {"a"}) == ["b", "c", "a"]
