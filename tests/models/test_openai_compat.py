"""The openai_compat executor against a real local fake OpenAI server (SSE over
HTTP on 127.0.0.1): requests, streaming, speech, retries, timeouts, stickiness and
cancel. Waits are on real HTTP, bounded by the fake's gates, never by sleeping."""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import wave
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from bench.fakes.openai import FakeOpenAI, running_fake_openai
from bench.fakes.speech import running_fake_speech
from bench.speech import load_wav
from models.base import OutputChunk, Prompt, PromptImage, PromptItem
from models.chat_backends import session_key
from models.openai_compat import BackendOptions, OpenAICompatExecutor
from models.remote_http import RemoteError, RemoteOptions, api_base, rendezvous
from models.speech.remote_tts import RemoteSynthesizer
from models.speech.slots import StageSlots
from models.speech.speaker import Speaker
from models.speech.tts import FliteSynthesizer


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with running_fake_openai() as server:
        yield server


def speaker() -> Speaker:
    return Speaker(FliteSynthesizer(), StageSlots("tts", 1))


def executor(*urls: str, **options: Any) -> OpenAICompatExecutor:
    return OpenAICompatExecutor(BackendOptions(urls=urls, **options), speaker())


def prompt(request_id: str = "resp_abcdef000001", *, audio: bool = True, **kw: Any) -> Prompt:
    items = (PromptItem("item_1", "user", audio=load_wav("weather"), rate=24_000),)
    modalities: tuple[Any, ...] = ("audio",) if audio else ("text",)
    return Prompt(request_id, "Be brief.", items, output_modalities=modalities, **kw)


async def collect(ex: OpenAICompatExecutor, p: Prompt) -> list[OutputChunk]:
    return [chunk async for chunk in ex.generate(p)]


def transcript(chunks: list[OutputChunk]) -> str:
    return "".join(c.text for c in chunks)


async def test_streams_text_with_audio_parts_and_speaks_each_sentence(fake: FakeOpenAI) -> None:
    ex = executor(fake.url("a"))
    try:
        chunks = await collect(ex, prompt())
    finally:
        await ex.aclose()
    said = transcript(chunks)
    assert said == (
        "I heard 1 audio parts in 2 messages. The fake server answers in three sentences. "
        "This is the last one."
    )
    spoken = [c for c in chunks if c.audio is not None]
    assert len(spoken) == 3  # one synthesis per sentence
    assert all(len(c.audio) > 2400 for c in spoken if c.audio is not None)
    ((name, body),) = fake.requests
    assert name == "a" and body["stream"] is True and body["model"] == "model-a"
    assert fake.model_lookups == ["a"]  # the model came from /v1/models, once
    user = body["messages"][1]
    part = user["content"][0]
    assert part["type"] == "input_audio" and part["input_audio"]["format"] == "wav"
    with wave.open(io.BytesIO(base64.b64decode(part["input_audio"]["data"]))) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16000, 1, 2)
        assert abs(wav.getnframes() - len(load_wav("weather")) * 2 // 3) <= 2
    assert "modalities" not in body  # no speech asked of a backend by default


async def test_text_modality_streams_each_delta(fake: FakeOpenAI) -> None:
    ex = executor(fake.url("a"), model="given")
    try:
        chunks = await collect(ex, prompt(audio=False))
    finally:
        await ex.aclose()
    assert all(c.audio is None for c in chunks)
    assert len(chunks) == len(transcript(chunks).split(" "))  # word by word
    assert fake.model_lookups == [] and fake.requests[0][1]["model"] == "given"


async def test_length_finish_is_reported(fake: FakeOpenAI) -> None:
    ex = executor(fake.url("a"))
    try:
        chunks = await collect(ex, prompt(audio=False, max_output_tokens=4))
    finally:
        await ex.aclose()
    assert transcript(chunks) == "I heard 1 audio"
    assert chunks[-1].finish == "length"


async def test_backend_audio_is_played_not_resynthesized(fake: FakeOpenAI) -> None:
    ex = executor(fake.url("omni", "audio"), audio_output=True, voice="ash")
    try:
        chunks = await collect(ex, prompt())
    finally:
        await ex.aclose()
    body = fake.requests[0][1]
    assert body["modalities"] == ["text", "audio"] and body["audio"]["voice"] == "ash"
    words = transcript(chunks).split(" ")
    assert len(chunks) == len(words)  # each audio delta as it came, with its transcript
    assert all(c.audio is not None and len(c.audio) == 2400 for c in chunks)


async def test_images_go_as_image_url_parts_beside_the_text_and_audio(fake: FakeOpenAI) -> None:
    png = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
    jpeg = "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8\xff").decode()
    earlier = PromptItem("item_0", "user", text="Look.", images=(PromptImage(png, "low"),))
    latest = PromptItem(
        "item_1", "user", audio=load_wav("weather"), images=(PromptImage(jpeg, "auto"),)
    )
    ex = executor(fake.url("a"), vision=True)
    assert ex.sees_images and not executor(fake.url("a")).sees_images  # off unless said
    try:
        await collect(ex, Prompt("resp_abcdef000001", "Be brief.", (earlier, latest)))
    finally:
        await ex.aclose()
    messages = fake.requests[0][1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "user"]
    assert messages[1]["content"] == [
        {"type": "text", "text": "Look."},
        {"type": "image_url", "image_url": {"url": png, "detail": "low"}},
    ]
    image, audio = messages[2]["content"]
    assert image == {"type": "image_url", "image_url": {"url": jpeg, "detail": "auto"}}
    assert audio["type"] == "input_audio" and audio["input_audio"]["format"] == "wav"


async def test_dies_mid_stream_fails_clearly_without_retry(fake: FakeOpenAI) -> None:
    url = fake.url("d", "dies")
    ex = executor(url)
    got: list[OutputChunk] = []
    try:
        with pytest.raises(RemoteError) as caught:
            async for chunk in ex.generate(prompt(audio=False)):
                got.append(chunk)
    finally:
        await ex.aclose()
    assert transcript(got) == "I heard"  # what came before it died
    message = str(caught.value)
    assert url in message and "in the middle of the answer" in message
    assert fake.hits("d") == 1  # half an answer is never asked again


async def test_never_answers_times_out_after_retries(fake: FakeOpenAI) -> None:
    url = fake.url("s", "silent")
    ex = executor(url, read_timeout_s=0.2, retries=1)
    try:
        with pytest.raises(RemoteError) as caught:
            await collect(ex, prompt())
    finally:
        await ex.aclose()
    message = str(caught.value)
    assert "did not answer after 2 attempts" in message
    assert f"{url} did not answer within 0.2 s" in message
    assert fake.hits("s") == 2


async def test_refused_and_failing_backends_fall_over_to_a_healthy_one(fake: FakeOpenAI) -> None:
    sock = __import__("socket").socket()
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening
    try:
        for bad in (dead, fake.url("e", "error")):
            good = fake.url("ok")
            ex = executor(bad, good, retries=2)
            # A request id whose session prefers the bad backend.
            rid = next(
                f"resp_{n:06x}000001"
                for n in range(1000)
                if rendezvous(session_key(f"resp_{n:06x}000001"), (bad, good))[0] == bad
            )
            try:
                chunks = await collect(ex, prompt(rid, audio=False))
                assert transcript(chunks).startswith("I heard 1 audio parts")
                assert ex.stats.chosen[rid] == good and ex.stats.attempts[rid] == 2
                # The failed backend is passed over for a while: the next goes straight.
                rid2 = rid[:-6] + "000002"
                await collect(ex, prompt(rid2, audio=False))
                assert ex.stats.attempts[rid2] == 1 and ex.stats.chosen[rid2] == good
            finally:
                await ex.aclose()
    finally:
        sock.close()
    assert fake.hits("e") == 1


async def test_all_backends_down_is_a_clear_error(fake: FakeOpenAI) -> None:
    ex = executor(fake.url("e1", "error"), fake.url("e2", "error"), retries=1)
    try:
        with pytest.raises(RemoteError) as caught:
            await collect(ex, prompt())
    finally:
        await ex.aclose()
    assert "HTTP 500" in str(caught.value) and "model overloaded" in str(caught.value)
    assert fake.hits("e1") == 1 and fake.hits("e2") == 1


async def test_sessions_stick_to_one_backend_and_spread_over_all(fake: FakeOpenAI) -> None:
    urls = tuple(fake.url(n) for n in ("r1", "r2", "r3"))
    # A clock that moves 100 s a reading: a backend passed over after a slow try (a
    # loaded machine) is back for the next session, so which backend each session's
    # first try picks depends on the session alone.
    ex = OpenAICompatExecutor(
        BackendOptions(urls=urls), speaker(), clock=itertools.count(0.0, 100.0).__next__
    )
    # The spread is by hash of session and URL (the URL holds a random port): with 36
    # sessions, a backend that no session prefers has odds of 3 * (2/3)^36 ≈ 1e-6
    # (12 sessions left it at 2 %, and one port in 40 did).
    sessions = [f"resp_{n:012x}" for n in range(36)]
    try:
        for session in sessions:
            for turn in (1, 2):
                await collect(ex, prompt(f"{session}{turn:06d}", audio=False))
    finally:
        await ex.aclose()
    # A request retried elsewhere (a backend slow to accept on a loaded machine) has
    # moved on purpose: stickiness is what each session's first attempts chose.
    by_session: dict[str, set[str]] = {}
    for rid, url in ex.stats.chosen.items():
        if ex.stats.attempts[rid] == 1:
            by_session.setdefault(session_key(rid), set()).add(url)
    assert len(by_session) == 36 and all(len(u) == 1 for u in by_session.values())
    assert {next(iter(u)) for u in by_session.values()} == set(urls)


async def test_abort_closes_the_stream(fake: FakeOpenAI) -> None:
    fake.hold()
    ex = executor(fake.url("a"))
    p = prompt(audio=False)
    stream = ex.generate(p)
    try:
        await fake.release(2)
        first = await anext(stream)
        assert first.text == "I"
        await ex.abort(p.request_id)
        rest = [chunk async for chunk in stream]
        assert all(c.text != " audio" for c in rest)
        await asyncio.wait_for(fake.stream_closed.wait(), 10)
        assert fake.closed == 1
        assert fake.finished == 0
        assert ex.stats.aborted == [p.request_id]
    finally:
        await stream.aclose()
        await ex.aclose()


async def test_cancel_before_start_never_sends(fake: FakeOpenAI) -> None:
    ex = executor(fake.url("a"))
    p = prompt()
    try:
        await ex.abort(p.request_id)
        assert await collect(ex, p) == []
    finally:
        await ex.aclose()
    assert fake.requests == []


async def test_consumer_closing_early_closes_the_stream(fake: FakeOpenAI) -> None:
    fake.hold()
    ex = executor(fake.url("a"))
    stream = ex.generate(prompt(audio=False))
    try:
        await fake.release(1)
        assert (await anext(stream)).text == "I"
        await stream.aclose()
        await asyncio.wait_for(fake.stream_closed.wait(), 10)
        assert fake.closed == 1
    finally:
        await ex.aclose()


def test_urls_and_session_keys() -> None:
    assert api_base("http://h:8000") == "http://h:8000/v1"
    assert api_base("http://h:8000/v1/") == "http://h:8000/v1"
    assert session_key("resp_0a1b2c3d4e5f000012") == "resp_0a1b2c3d4e5f"
    urls = ("http://a", "http://b", "http://c")
    order = rendezvous("resp_x", urls)
    assert sorted(order) == sorted(urls)
    # Removing a backend moves only the sessions that preferred it.
    keys = [f"resp_{n}" for n in range(200)]
    before = {k: rendezvous(k, urls)[0] for k in keys}
    after = {k: rendezvous(k, urls[:2])[0] for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all(before[k] == "http://c" for k in moved)


def test_audio_deltas_decode_wav_and_pcm() -> None:
    from models.openai_compat import decode_audio, wav_base64

    tone = (np.sin(np.arange(16000) / 5) * 0.5).astype(np.float32)
    pcm = decode_audio(wav_base64(tone))  # a 16 kHz WAV becomes 24 kHz pcm16
    assert abs(len(pcm) - 24000) <= 2
    raw = np.arange(100, dtype="<i2")
    assert np.array_equal(decode_audio(base64.b64encode(raw.tobytes()).decode()), raw)


async def test_session_survives_a_failed_backend(fake: FakeOpenAI) -> None:
    """The response ends `failed` saying why; the next one is answered."""
    from tests.support.harness import Harness

    url = fake.url("flaky", "error")
    ex = executor(url, retries=0, down_for_s=0)
    try:
        async with Harness(ex) as h:
            await h.send({"type": "response.create"})
            await h.wait_until(lambda: len(h.responses_done()) == 1, 30)
            failed = h.responses_done()[0]
            assert failed["status"] == "failed"
            error = failed["status_details"]["error"]
            assert url in error["message"] and "HTTP 500" in error["message"]
            fake.behaviour["flaky"] = "normal"
            await h.send({"type": "response.create"})
            await h.wait_until(lambda: len(h.responses_done()) == 2, 30)
            assert h.responses_done()[1]["status"] == "completed"
    finally:
        await ex.aclose()


async def test_a_remote_voice_speaks_the_text_in_the_sessions_voice(fake: FakeOpenAI) -> None:
    """The backend's text spoken by a remote synthesizer, in the server voice the
    table maps the session's voice to (as the cascade does)."""
    async with running_fake_speech() as speech:
        options = RemoteOptions("tts", (speech.url("kokoro"),), model="kokoro")
        tts = RemoteSynthesizer(options, voices={"ash": "am_adam", "*": "af_heart"}, check=False)
        ex = OpenAICompatExecutor(
            BackendOptions(urls=(fake.url("a"),)), Speaker(tts, StageSlots("tts", 1))
        )
        try:
            chunks = await collect(ex, prompt(voice="ash"))
        finally:
            await ex.aclose()
    assert [c for c in chunks if c.audio is not None]
    voices = {body["voice"] for _, body in speech.spoken}
    assert voices == {"am_adam"} and len(speech.spoken) == 3  # one request per sentence
    timed = {(t.stage, t.where, t.phase) for t in ex.stage_timings("resp_abcdef000001")}
    assert timed == {
        ("llm", "remote", "first_token"),
        ("llm", "remote", "total"),
        ("tts", "remote", "first_audio"),
    }
