"""Spoken questions to the embedded default over a real WebSocket, from the SDK."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from openai import AsyncOpenAI

from models.speech.asr import WhisperRecognizer
from tests.support.audio import sdk_append_chunked, utterance
from tests.support.events import TIMEOUT_S, Events
from tests.support.hearing import QUESTIONS, wer
from tests.support.servers import ServerFactory, sdk_connect


@pytest.fixture
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # One cache for the run: the language model is converted once, not per test.
    path = tmp_path_factory.getbasetemp() / "parley-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PARLEY_CACHE_DIR", str(path))
        yield path


async def test_spoken_conversation_over_websocket(serve: ServerFactory, cache: Path) -> None:
    server = await serve(executor="cascade")
    asr = WhisperRecognizer("tiny.en")
    asked = list(QUESTIONS)  # the fixed set: tiny.en mishears "lights in the kitchen"
    heard: list[str] = []
    async with sdk_connect(server) as conn:
        events = Events(conn.recv_bytes)
        await conn.session.update(
            session={
                "type": "realtime",
                "audio": {
                    "input": {
                        "turn_detection": {"type": "server_vad"},
                        "transcription": {"model": "whisper-1"},
                    }
                },
            }
        )
        for name in asked:
            sender = asyncio.create_task(sdk_append_chunked(conn, utterance(name), 100))
            done = await events.until("response.done")
            await asyncio.wait_for(sender, TIMEOUT_S)
            response = done["response"]
            assert response["status"] == "completed"
            transcript = response["output"][0]["content"][0]["transcript"]
            audio = np.concatenate(
                [
                    np.frombuffer(base64.b64decode(e["delta"]), "<i2")
                    for e in events.of("response.output_audio.delta")
                    if e["response_id"] == response["id"]
                ]
            )
            assert transcript.strip() and len(audio) > 12_000
            assert wer(transcript, asr.transcribe(audio, 24_000)) <= 0.35
        # Input transcription can trail the answer; wait for the last one.
        while len(events.of("conversation.item.input_audio_transcription.completed")) < len(asked):
            await events.next()
    heard = [
        e["transcript"] for e in events.of("conversation.item.input_audio_transcription.completed")
    ]
    assert wer(" ".join(QUESTIONS[n] for n in asked), " ".join(heard)) <= 0.25, heard
    assert not events.of("error")


async def test_a_transcription_session_hears_the_spoken_words(
    serve: ServerFactory, cache: Path
) -> None:
    """A transcription session on the embedded recognizer: each spoken turn is
    committed by server_vad and its transcript is what was said; nothing answers."""
    server = await serve(executor="cascade")
    client = AsyncOpenAI(base_url=f"{server.http_url}/v1", api_key="x")
    asked = ["weather", "timer"]
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        events = Events(conn.recv_bytes)
        created = await events.until("session.created")
        assert created["session"]["type"] == "transcription"
        for name in asked:
            await sdk_append_chunked(conn, utterance(name), 100)
            await events.until("conversation.item.input_audio_transcription.completed")
    heard = [
        e["transcript"] for e in events.of("conversation.item.input_audio_transcription.completed")
    ]
    committed = [e["item_id"] for e in events.of("input_audio_buffer.committed")]
    assert committed == [
        e["item_id"] for e in events.of("conversation.item.input_audio_transcription.completed")
    ]
    assert wer(" ".join(QUESTIONS[n] for n in asked), " ".join(heard)) <= 0.25, heard
    assert not [t for t in events.types() if t.startswith("response.")]
    assert not events.of("error")
