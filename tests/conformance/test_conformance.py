"""Conformance: the official `openai` SDK, GA and beta clients, against a real server.

Every test runs twice, once with the GA client (`client.realtime.connect`) and once
with the beta one (`client.beta.realtime.connect`), over a real uvicorn server
(tests/conftest.py) with the scripted executor. Client events go out through the
SDK's own typed methods; every server event received is validated strictly, GA
ones against `RealtimeServerEvent`, beta ones against the SDK's beta union (both
tests/support/sdk_check.py), before a test looks at it. Expectations
name events as each client knows them (GA `response.output_audio.delta`, beta
`response.audio.delta`...).

Each test declares the client event types it sends (`@sends`); the fixture checks
that it sent exactly those, and the last test that together they cover every
type in `engine.protocol.SUPPORTED_TYPES`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from openai import AsyncOpenAI
from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
from openai.types.realtime import RealtimeServerEvent, RealtimeSessionCreateRequest

from bench.speech import PCM_RATE as RATE
from bench.speech import load_wav, silence
from engine.audio_format import PCMU, OutputEncoder, alaw_decode
from engine.protocol import SUPPORTED_TYPES
from engine.protocol.beta import RENAMED, beta_type
from models.scripted import ScriptedExecutor
from tests.support.events import TIMEOUT_S, Events
from tests.support.sdk_check import assert_beta_event, assert_sdk_event, event_types
from tests.support.servers import ServerFactory

MODEL = "gpt-realtime"  # a name both the GA and the beta session types know
OTHER_MODEL = "gpt-4o-realtime-preview"
CHUNKS_MS = (20, 40, 60, 80, 100)  # appends cycle through these sizes
SLOW_CHUNK_S = 0.25  # responses long enough to cancel while they stream
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}

# Types only a beta client may receive: the beta names of renamed GA events.
BETA_ONLY = set(RENAMED.values()) - set(RENAMED)


# --- which client events each test sends ---------------------------------------------------

SENDS: dict[str, frozenset[str]] = {}


def sends(*types: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare the client event types a test sends (checked when it ends)."""

    def mark(test: Callable[..., Any]) -> Callable[..., Any]:
        SENDS[test.__name__] = frozenset(types)
        return test

    return mark


# --- the client ----------------------------------------------------------------------------


class Client(Events):
    """One SDK connection: what it sent, and every event it received, validated."""

    def __init__(self, conn: Any, beta: bool) -> None:
        super().__init__(conn.recv_bytes, self.validate)
        self.conn = conn
        self.beta = beta
        self.sent: set[str] = set()
        send = conn.send

        async def recording_send(event: Any) -> None:
            self.sent.add(event["type"] if isinstance(event, dict) else event.type)
            await send(event)

        # The SDK's typed methods all send through `conn.send`.
        conn.send = recording_send

    def name(self, ga_type: str) -> str:
        """A server event type as this client receives it."""
        if not self.beta:
            return ga_type
        beta = beta_type(ga_type)
        assert beta is not None, f"beta clients never receive {ga_type}"
        return beta

    @property
    def audio_part(self) -> str:
        return "audio" if self.beta else "output_audio"

    @property
    def text_part(self) -> str:
        return "text" if self.beta else "output_text"

    def validate(self, raw: dict[str, Any]) -> None:
        if self.beta:
            assert_beta_event(raw)
        else:
            assert_sdk_event(raw)
            assert raw["type"] not in BETA_ONLY, f"a beta event sent to a GA client: {raw}"

    async def until(self, ga_type: str, **match: Any) -> dict[str, Any]:
        """Read up to the next event of `ga_type` (in this client's naming) whose
        fields, or whose `response`'s fields, match."""
        return await super().until(self.name(ga_type), **match)

    async def error(self, event_id: str) -> dict[str, Any]:
        """The error answering the client event `event_id`."""
        event = await self.until("error")
        assert event["error"]["event_id"] == event_id, event
        error: dict[str, Any] = event["error"]
        return error

    def of(self, ga_type: str, since: int = 0) -> list[dict[str, Any]]:
        return super().of(self.name(ga_type), since)

    def mark(self) -> int:
        """A position in the events received, for `of(..., since=)`."""
        return len(self.all)

    async def update(self, ga: dict[str, Any], beta: dict[str, Any]) -> dict[str, Any]:
        """session.update in this client's shape (GA nested, beta flat); the session
        from `session.updated`."""
        await self.conn.session.update(session=beta if self.beta else {"type": "realtime", **ga})
        updated: dict[str, Any] = (await self.until("session.updated"))["session"]
        return updated

    async def turn_detection(self, vad: dict[str, Any] | None) -> dict[str, Any]:
        return await self.update(
            {"audio": {"input": {"turn_detection": vad}}}, {"turn_detection": vad}
        )

    async def respond(self, response: dict[str, Any] | None = None) -> dict[str, Any]:
        """response.create; the `response` of its `response.done`."""
        if response is None:
            await self.conn.response.create()
        else:
            await self.conn.response.create(response=response)
        rid = (await self.until("response.created"))["response"]["id"]
        done: dict[str, Any] = (await self.until("response.done", id=rid))["response"]
        return done

    async def append(self, data: bytes, bytes_per_ms: int) -> None:
        """Appends of 20-100 ms, back to back (faster than real time)."""
        sizes = itertools.cycle(CHUNKS_MS)
        at = 0
        while at < len(data):
            step = next(sizes) * bytes_per_ms
            chunk = data[at : at + step]
            at += step
            await self.conn.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())

    async def append_pcm(self, pcm: npt.NDArray[np.int16]) -> None:
        await self.append(pcm.astype("<i2").tobytes(), 2 * RATE // 1000)

    async def answer_to(self, sending: Coroutine[Any, Any, None]) -> dict[str, Any]:
        """The `response.done` of the turn in the audio `sending` appends: read while it
        is still sent (the server answers as the microphone goes on)."""
        sender = asyncio.create_task(sending)
        try:
            done = await self.until("response.done")
            await asyncio.wait_for(sender, TIMEOUT_S)
        finally:
            sender.cancel()
        return done


Open = Callable[..., Awaitable[Client]]


@pytest.fixture(params=["ga", "beta"])
async def open_client(request: pytest.FixtureRequest, serve: ServerFactory) -> AsyncIterator[Open]:
    """Open a connection with the GA or the beta client to a new server (settings
    overrides as keywords), read up to its `conversation.created`."""
    beta = request.param == "beta"
    clients: list[Client] = []
    async with contextlib.AsyncExitStack() as stack:

        async def open_(**settings: Any) -> Client:
            server = await serve(model=MODEL, **settings)
            sdk = AsyncOpenAI(
                base_url=f"{server.http_url}/v1",
                # The beta client forces wss unless told where the WebSocket is.
                websocket_base_url=f"ws://127.0.0.1:{server.port}/v1",
                api_key="x",
            )
            realtime = sdk.beta.realtime if beta else sdk.realtime
            conn = await stack.enter_async_context(realtime.connect(model=MODEL))
            client = Client(conn, beta)
            clients.append(client)
            created = await client.until("session.created")
            assert created["session"]["model"] == MODEL
            await client.until("conversation.created")
            return client

        yield open_
    sent = set().union(*(c.sent for c in clients))
    assert sent == SENDS[request.function.__name__], "the test sent other events than declared"


def speech(name: str, lead_ms: int = 300) -> npt.NDArray[np.int16]:
    return np.concatenate([silence(lead_ms), load_wav(name), silence(1000)]).astype(np.int16)


def transcript(response: dict[str, Any]) -> str:
    part = response["output"][0]["content"][0]
    text: str = part["transcript"] if "transcript" in part else part["text"]
    return text


def words(text: str) -> int:
    return len(text.split())


# --- session.update ------------------------------------------------------------------------


@sends(
    "session.update", "response.create", "input_audio_buffer.append", "input_audio_buffer.commit"
)
async def test_session_update(open_client: Open) -> None:
    c = await open_client()
    vad = {"type": "server_vad", "silence_duration_ms": 400}
    session = await c.update(
        ga={
            "instructions": "Be brief.",
            "output_modalities": ["audio"],
            "tools": [WEATHER_TOOL],
            "tool_choice": "auto",
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": vad},
                "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "ash"},
            },
        },
        beta={
            "modalities": ["text", "audio"],
            "voice": "ash",
            "input_audio_format": "pcm16",
            "output_audio_format": "pcm16",
            "turn_detection": vad,
            "instructions": "Be brief.",
            "tools": [WEATHER_TOOL],
            "tool_choice": "auto",
        },
    )
    assert session["instructions"] == "Be brief."
    assert session["tools"] == [WEATHER_TOOL]
    assert session["tool_choice"] == "auto"
    if c.beta:
        assert session["modalities"] == ["text", "audio"]
        assert session["voice"] == "ash"
        assert session["input_audio_format"] == session["output_audio_format"] == "pcm16"
        detection = session["turn_detection"]
    else:
        assert session["output_modalities"] == ["audio"]
        assert session["audio"]["output"] == {
            "format": {"type": "audio/pcm", "rate": 24000},
            "voice": "ash",
        }
        assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
        detection = session["audio"]["input"]["turn_detection"]
    assert detection["type"] == "server_vad" and detection["silence_duration_ms"] == 400

    # The session's tools are used: the scripted model calls the first one.
    done = await c.respond()
    assert [item["type"] for item in done["output"]] == ["function_call"]

    # "" clears the instructions, [] the tools; the rest stays.
    session = await c.update({"instructions": ""}, {"instructions": ""})
    assert session["instructions"] == ""
    assert session["tools"] == [WEATHER_TOOL]
    session = await c.update({"tools": []}, {"tools": []})
    assert session["tools"] == []
    assert (session["voice"] if c.beta else session["audio"]["output"]["voice"]) == "ash"
    done = await c.respond()
    assert [item["type"] for item in done["output"]] == ["message"]
    assert transcript(done) == "I heard no audio in 1 items."  # the call before it

    # null turn detection: speech is no turn until committed by hand.
    session = await c.turn_detection(None)
    assert (session if c.beta else session["audio"]["input"])["turn_detection"] is None
    at = c.mark()
    await c.append_pcm(speech("joke"))
    await c.conn.input_audio_buffer.commit()
    await c.until("conversation.item.added")
    assert c.types(at) == ["input_audio_buffer.committed", c.name("conversation.item.added")]
    if not c.beta:
        await c.until("conversation.item.done")

    # The model cannot be changed; the session is left as it was.
    at = c.mark()
    await c.conn.session.update(
        session={"model": OTHER_MODEL} if c.beta else {"type": "realtime", "model": OTHER_MODEL},
        event_id="evt_model",
    )
    error = await c.error("evt_model")
    assert (error["code"], error["param"]) == ("invalid_value", "session.model")
    session = await c.update({"instructions": "Again."}, {"instructions": "Again."})
    assert session["model"] == MODEL and session["instructions"] == "Again."
    assert c.types(at) == ["error", "session.updated"]


@sends("session.update")
async def test_every_session_field_round_trips(open_client: Open, tmp_path: Path) -> None:
    """prompt, tracing, include, reasoning, parallel_tool_calls, truncation and a voice
    as `{id}`: sent with the SDK, applied, and read back in `session.updated`
    (validated against the SDK's types as every event is)."""
    (tmp_path / "desk.txt").write_text("You serve {{customer}}.")
    c = await open_client(prompts_dir=tmp_path)
    tracing = {"workflow_name": "desk", "group_id": "g1", "metadata": {"shift": "night"}}
    if c.beta:  # the beta session has tracing and a voice by name, and no more
        session = await c.update({}, {"tracing": tracing, "voice": "marin"})
        assert (session["tracing"], session["voice"]) == (tracing, "marin")
        return
    fields: dict[str, Any] = {
        "prompt": {"id": "desk", "variables": {"customer": {"type": "input_text", "text": "Ada"}}},
        "tracing": tracing,
        "include": ["item.input_audio_transcription.logprobs"],
        "reasoning": {"effort": "low"},
        "parallel_tool_calls": False,
        "truncation": {"type": "retention_ratio", "retention_ratio": 0.8},
    }
    session = await c.update({**fields, "audio": {"output": {"voice": {"id": "marin"}}}}, {})
    RealtimeSessionCreateRequest.model_validate(session, strict=True)
    assert {name: session[name] for name in fields} == fields
    assert session["audio"]["output"]["voice"] == {"id": "marin"}

    # Another update leaves them; "auto" and a voice by name come back as sent.
    session = await c.update({"tracing": "auto", "audio": {"output": {"voice": "cedar"}}}, {})
    assert session["tracing"] == "auto" and session["audio"]["output"]["voice"] == "cedar"
    assert session["prompt"] == fields["prompt"] and session["parallel_tool_calls"] is False

    # A prompt the operator has not configured, an unknown include: errors naming them.
    await c.conn.session.update(
        session={"type": "realtime", "prompt": {"id": "../desk"}}, event_id="evt_prompt"
    )
    error = await c.error("evt_prompt")
    assert (error["code"], error["param"]) == ("invalid_value", "session.prompt.id")
    await c.conn.session.update(
        session={"type": "realtime", "include": ["item.logprobs"]},
        event_id="evt_include",
    )
    error = await c.error("evt_include")
    assert (error["code"], error["param"]) == ("invalid_value", "session.include[0]")


# --- input audio ---------------------------------------------------------------------------


@sends("session.update", "input_audio_buffer.append")
async def test_server_vad_turn_with_real_speech(open_client: Open) -> None:
    c = await open_client()
    await c.turn_detection({"type": "server_vad"})
    done_event = await c.answer_to(c.append_pcm(speech("weather")))

    (started,) = c.of("input_audio_buffer.speech_started")
    (stopped,) = c.of("input_audio_buffer.speech_stopped")
    (committed,) = c.of("input_audio_buffer.committed")
    user = c.of("conversation.item.added")[0]
    (created,) = c.of("response.created")
    assert started["item_id"] == stopped["item_id"] == committed["item_id"] == user["item"]["id"]
    assert user["item"]["role"] == "user"
    assert user["item"]["content"][0]["type"] == "input_audio"
    order = [c.all.index(e) for e in (started, stopped, committed, created, done_event)]
    assert order == sorted(order)
    assert "error" not in c.types()

    done = done_event["response"]
    rid = created["response"]["id"]
    assert done["id"] == rid and done["status"] == "completed"
    assert done["output"][0]["content"][0]["type"] == c.audio_part
    turn_ms = stopped["audio_end_ms"] - started["audio_start_ms"]
    assert turn_ms > 500  # real speech, not a blip
    said = transcript(done)
    assert said == f"I heard {turn_ms * 24} samples in 1 items."
    deltas = c.of("response.output_audio.delta")
    assert deltas and all(d["response_id"] == rid for d in deltas)
    audio = b"".join(base64.b64decode(d["delta"]) for d in deltas)
    assert len(audio) == words(said) * 100 * 24 * 2  # 100 ms of pcm16 a word
    streamed = "".join(d["delta"] for d in c.of("response.output_audio_transcript.delta"))
    assert streamed == said
    (transcript_done,) = c.of("response.output_audio_transcript.done")
    assert transcript_done["transcript"] == said


@sends("session.update", "input_audio_buffer.append")
async def test_semantic_vad_turn_with_real_speech(open_client: Open) -> None:
    # As LiveKit Agents' OpenAI plugin sends it by default: semantic_vad with the
    # transcription and voice in the same update, all applied.
    c = await open_client()
    vad = {
        "type": "semantic_vad",
        "eagerness": "high",
        "create_response": True,
        "interrupt_response": True,
    }
    transcription = {"model": "gpt-4o-mini-transcribe"}
    session = await c.update(
        ga={
            "audio": {
                "input": {"turn_detection": vad, "transcription": transcription},
                "output": {"voice": "marin"},
            }
        },
        beta={"turn_detection": vad, "input_audio_transcription": transcription, "voice": "marin"},
    )
    if c.beta:
        detection, voice = session["turn_detection"], session["voice"]
        assert session["input_audio_transcription"]["model"] == "gpt-4o-mini-transcribe"
    else:
        detection = session["audio"]["input"]["turn_detection"]
        voice = session["audio"]["output"]["voice"]
        assert session["audio"]["input"]["transcription"]["model"] == "gpt-4o-mini-transcribe"
    assert detection == vad
    assert voice == "marin"

    # Trailing silence as a microphone keeps sending it: unsure of the end, semantic_vad
    # may wait up to 4 s (medium eagerness).
    pcm = np.concatenate([speech("weather"), silence(3500)]).astype(np.int16)
    done = (await c.answer_to(c.append_pcm(pcm)))["response"]
    (started,) = c.of("input_audio_buffer.speech_started")
    (stopped,) = c.of("input_audio_buffer.speech_stopped")
    (committed,) = c.of("input_audio_buffer.committed")
    assert started["item_id"] == stopped["item_id"] == committed["item_id"]
    assert done["status"] == "completed"
    assert "error" not in c.types()


@sends(
    "session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "response.create",
    "conversation.item.retrieve",
    "conversation.item.truncate",
    "conversation.item.delete",
)
async def test_manual_turn_clear_retrieve_truncate_delete(open_client: Open) -> None:
    c = await open_client()
    await c.turn_detection(None)

    # An empty commit is refused, naming the event.
    await c.conn.input_audio_buffer.commit(event_id="evt_empty")
    error = await c.error("evt_empty")
    assert error["code"] == "input_audio_buffer_commit_empty"

    # clear empties the buffer: committing after it is refused too.
    await c.append_pcm(load_wav("joke"))
    await c.conn.input_audio_buffer.clear()
    await c.until("input_audio_buffer.cleared")
    await c.conn.input_audio_buffer.commit(event_id="evt_cleared")
    assert (await c.error("evt_cleared"))["code"] == "input_audio_buffer_commit_empty"

    # A manual turn: exactly what was appended becomes the user item.
    pcm = load_wav("weather")
    await c.append_pcm(pcm)
    await c.conn.input_audio_buffer.commit()
    committed = await c.until("input_audio_buffer.committed")
    user_id = committed["item_id"]
    added = await c.until("conversation.item.added")
    assert added["item"]["id"] == user_id and added["item"]["role"] == "user"
    done = await c.respond()
    assert done["status"] == "completed"
    said = transcript(done)
    assert said == f"I heard {len(pcm)} samples in 1 items."

    # retrieve: the user item with its audio.
    await c.conn.conversation.item.retrieve(item_id=user_id)
    item = (await c.until("conversation.item.retrieved"))["item"]
    assert item["id"] == user_id
    part = item["content"][0]
    assert part["type"] == "input_audio"
    assert np.array_equal(np.frombuffer(base64.b64decode(part["audio"]), "<i2"), pcm)

    # truncate past the end: clamped to the audio the client received.
    answer_id = done["output"][0]["id"]
    await c.conn.conversation.item.truncate(item_id=answer_id, content_index=0, audio_end_ms=60_000)
    truncated = await c.until("conversation.item.truncated")
    assert truncated["item_id"] == answer_id and truncated["content_index"] == 0
    assert truncated["audio_end_ms"] == words(said) * 100
    # ...and within it: the transcript keeps what was heard.
    await c.conn.conversation.item.truncate(item_id=answer_id, content_index=0, audio_end_ms=250)
    assert (await c.until("conversation.item.truncated"))["audio_end_ms"] == 250
    await c.conn.conversation.item.retrieve(item_id=answer_id)
    answer = (await c.until("conversation.item.retrieved"))["item"]
    assert answer["content"][0]["type"] == c.audio_part
    assert answer["content"][0]["transcript"] == " ".join(said.split()[:2])
    assert len(base64.b64decode(answer["content"][0]["audio"])) == 250 * 24 * 2

    # delete: the answer leaves the conversation, so the next prompt lacks it.
    await c.conn.conversation.item.delete(item_id=answer_id)
    assert (await c.until("conversation.item.deleted"))["item_id"] == answer_id
    await c.conn.conversation.item.retrieve(item_id=answer_id, event_id="evt_gone")
    error = await c.error("evt_gone")
    assert (error["code"], error["param"]) == ("item_not_found", "item_id")
    assert transcript(await c.respond()) == f"I heard {len(pcm)} samples in 1 items."


# --- conversation items --------------------------------------------------------------------


def text_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }


@sends(
    "conversation.item.create",
    "conversation.item.retrieve",
    "conversation.item.delete",
    "response.create",
)
async def test_conversation_items(open_client: Open) -> None:
    c = await open_client()

    async def create(item: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        at = c.mark()
        await c.conn.conversation.item.create(item=item, **kwargs)
        added = await c.until("conversation.item.added")
        if not c.beta:  # GA also says when the item is complete; beta never did
            done = await c.until("conversation.item.done")
            assert done["item"] == added["item"]
        assert c.types(at) == [c.name("conversation.item.added")] + (
            [] if c.beta else ["conversation.item.done"]
        )
        assert added["item"]["id"] == item["id"]
        return added

    first = await create(text_item("item_a", "one"))
    assert first["previous_item_id"] is None
    assert first["item"]["content"] == [{"type": "input_text", "text": "one"}]
    assert (await create(text_item("item_b", "two")))["previous_item_id"] == "item_a"
    at_root = await create(text_item("item_z", "zero"), previous_item_id="root")
    assert at_root["previous_item_id"] is None
    # Appended after the last item: item_z went to the start, not the end.
    output = {"id": "item_f", "type": "function_call_output", "call_id": "call_1", "output": "ok"}
    added = await create(output)
    assert added["previous_item_id"] == "item_b"
    assert added["item"]["type"] == "function_call_output"
    assert (added["item"]["call_id"], added["item"]["output"]) == ("call_1", "ok")

    await c.conn.conversation.item.retrieve(item_id="item_z")
    item = (await c.until("conversation.item.retrieved"))["item"]
    assert item["content"] == [{"type": "input_text", "text": "zero"}]

    await c.conn.conversation.item.delete(item_id="item_a")
    assert (await c.until("conversation.item.deleted"))["item_id"] == "item_a"
    await c.conn.conversation.item.delete(item_id="item_a", event_id="evt_again")
    assert (await c.error("evt_again"))["code"] == "item_not_found"

    # The prompt is the conversation: item_z, item_b, item_f.
    assert transcript(await c.respond()) == "The tool said ok."
    await c.conn.conversation.item.delete(item_id="item_f")
    await c.until("conversation.item.deleted")
    assert transcript(await c.respond()) == "I heard no audio in 3 items."


# --- responses -----------------------------------------------------------------------------


@sends("response.create")
async def test_response_text_only_with_instructions(open_client: Open) -> None:
    c = await open_client()
    modalities = {"modalities" if c.beta else "output_modalities": ["text"]}
    done = await c.respond({"instructions": "Answer in writing.", **modalities})
    assert done["status"] == "completed"
    assert done[next(iter(modalities))] == ["text"]
    (part,) = done["output"][0]["content"]
    assert part == {"type": c.text_part, "text": "I heard no audio in 0 items."}
    deltas = c.of("response.output_text.delta")
    assert "".join(d["delta"] for d in deltas) == part["text"]
    assert c.of("response.output_text.done")[0]["text"] == part["text"]
    assert c.of("response.output_audio.delta") == []
    assert "error" not in c.types()


@sends("response.create", "conversation.item.create")
async def test_response_tools_and_function_call_output(open_client: Open) -> None:
    c = await open_client()
    choice: Any = "required" if c.beta else {"type": "function", "name": "get_weather"}
    done = await c.respond({"tools": [WEATHER_TOOL], "tool_choice": choice})
    assert done["status"] == "completed"
    (call,) = done["output"]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"samples": 0}
    deltas = c.of("response.function_call_arguments.delta")
    assert "".join(d["delta"] for d in deltas) == call["arguments"]
    (args,) = c.of("response.function_call_arguments.done")
    assert (args["call_id"], args["arguments"]) == (call["call_id"], call["arguments"])
    assert args["item_id"] == call["id"]
    assert any(e["item"]["id"] == call["id"] for e in c.of("conversation.item.added"))

    await c.conn.conversation.item.create(
        item={"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    )
    added = await c.until("conversation.item.added")
    assert added["previous_item_id"] == call["id"]
    answer = await c.respond()
    assert answer["output"][0]["type"] == "message"
    assert transcript(answer) == "The tool said sunny."
    assert "error" not in c.types()


@sends("response.create")
async def test_response_max_output_tokens(open_client: Open) -> None:
    c = await open_client()
    # The beta client's field is `max_response_output_tokens`.
    limit = {"max_response_output_tokens" if c.beta else "max_output_tokens": 2}
    done = await c.respond(limit)
    assert done["status"] == "incomplete"
    assert done["status_details"] == {"type": "incomplete", "reason": "max_output_tokens"}
    assert transcript(done) == "I heard"
    assert done["output"][0]["status"] == "incomplete"


@sends("response.create", "conversation.item.create")
async def test_response_out_of_band(open_client: Open) -> None:
    c = await open_client()
    await c.conn.conversation.item.create(item=text_item("item_ctx", "context"))
    await c.until("conversation.item.added")
    modalities = {"modalities" if c.beta else "output_modalities": ["text"]}
    at = c.mark()
    done = await c.respond(
        {
            "conversation": "none",
            "metadata": {"topic": "summary"},
            "input": [{"type": "item_reference", "id": "item_ctx"}, text_item("item_q", "sum up")],
            **modalities,
        }
    )
    (created,) = c.of("response.created", since=at)
    for response in (created["response"], done):
        assert response["conversation_id"] is None
        assert response["metadata"] == {"topic": "summary"}
    assert done["status"] == "completed"
    assert transcript(done) == "I heard no audio in 2 items."
    # Out of band: nothing joined the conversation.
    assert c.of("conversation.item.added", since=at) == []
    # The in-band conversation still holds only item_ctx.
    assert transcript(await c.respond(modalities)) == "I heard no audio in 1 items."


@sends("response.create", "response.cancel")
async def test_response_cancel_and_one_active_response(open_client: Open) -> None:
    c = await open_client(scripted_chunk_delay_s=SLOW_CHUNK_S)

    async def streaming() -> str:
        await c.conn.response.create()
        rid: str = (await c.until("response.created"))["response"]["id"]
        await c.until("response.output_audio.delta", response_id=rid)
        return rid

    first = await streaming()
    await c.conn.response.create(event_id="evt_busy")
    assert (await c.error("evt_busy"))["code"] == "conversation_already_has_active_response"
    await c.conn.response.cancel()
    cancelled = [(await c.until("response.done", id=first))["response"]]

    second = await streaming()
    await c.conn.response.cancel(response_id=second)
    cancelled.append((await c.until("response.done", id=second))["response"])

    # Nothing is active any more.
    await c.conn.response.cancel(event_id="evt_idle")
    assert (await c.error("evt_idle"))["code"] == "response_cancel_not_active"
    for response in cancelled:
        assert response["status"] == "cancelled"
        assert response["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
        assert response["output"][0]["status"] == "incomplete"
    for rid in (first, second):
        (done,) = [e for e in c.of("response.done") if e["response"]["id"] == rid]
        late = [e for e in c.all[c.all.index(done) + 1 :] if e.get("response_id") == rid]
        assert late == []
    assert len(c.of("response.done")) == 2


@sends("response.create", "output_audio_buffer.clear")
async def test_output_audio_buffer_clear_cancels_the_response(open_client: Open) -> None:
    c = await open_client(scripted_chunk_delay_s=SLOW_CHUNK_S)
    await c.conn.response.create()
    rid = (await c.until("response.created"))["response"]["id"]
    await c.until("response.output_audio.delta", response_id=rid)
    await c.conn.output_audio_buffer.clear()
    cleared = await c.until("output_audio_buffer.cleared")
    assert cleared["response_id"] == rid
    (done,) = c.of("response.done")
    assert c.all.index(done) < c.all.index(cleared)
    assert done["response"]["id"] == rid
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
    assert "error" not in c.types()


@sends("session.update", "response.create", "input_audio_buffer.append")
async def test_an_uninterruptible_answer_is_heard_out_by_an_sdk_client(open_client: Open) -> None:
    """Parley's `interruptible: false` passes through the SDK's typed `response.create`;
    speech over the answer neither cancels it nor reaches the client before it ends,
    and is answered after it; every event still validates against the SDK."""
    c = await open_client(scripted_chunk_delay_s=SLOW_CHUNK_S)
    await c.turn_detection({"type": "server_vad"})
    await c.conn.response.create(response={"interruptible": False})
    first = (await c.until("response.created"))["response"]["id"]
    await c.until("response.output_audio.delta", response_id=first)
    await c.append_pcm(speech("weather"))
    done = (await c.until("response.done", id=first))["response"]
    assert done["status"] == "completed"
    assert "interruptible" not in done  # not echoed: SDK clients see OpenAI's shape
    await c.append_pcm(silence(1500))  # the answer plays out; then the turn goes out
    second = await c.until("response.done")
    (started,) = c.of("input_audio_buffer.speech_started")
    (committed,) = c.of("input_audio_buffer.committed")
    assert c.all.index(started) > c.all.index(c.of("response.done")[0])
    assert second["response"]["status"] == "completed"
    turn_ms = (
        c.of("input_audio_buffer.speech_stopped")[0]["audio_end_ms"] - started["audio_start_ms"]
    )
    assert transcript(second["response"]) == f"I heard {turn_ms * 24} samples in 2 items."
    assert committed["item_id"] == started["item_id"]
    assert "error" not in c.types()


# --- G.711 end to end ----------------------------------------------------------------------


@sends("session.update", "input_audio_buffer.append")
async def test_g711_in_and_out_with_real_speech(open_client: Open) -> None:
    """μ-law 8 kHz speech in, a server_vad turn, A-law 8 kHz audio out."""
    c = await open_client()
    vad = {"type": "server_vad"}
    session = await c.update(
        ga={
            "audio": {
                "input": {"format": {"type": "audio/pcmu"}, "turn_detection": vad},
                "output": {"format": {"type": "audio/pcma"}},
            }
        },
        beta={
            "input_audio_format": "g711_ulaw",
            "output_audio_format": "g711_alaw",
            "turn_detection": vad,
        },
    )
    if c.beta:
        formats = (session["input_audio_format"], session["output_audio_format"])
        assert formats == ("g711_ulaw", "g711_alaw")
    else:
        audio = session["audio"]
        assert audio["input"]["format"] == {"type": "audio/pcmu"}
        assert audio["output"]["format"] == {"type": "audio/pcma"}

    ulaw = OutputEncoder(PCMU)
    data = ulaw.encode(speech("weather", lead_ms=600)) + ulaw.flush()
    done = (await c.answer_to(c.append(data, PCMU.rate // 1000)))["response"]  # a byte a sample

    (started,) = c.of("input_audio_buffer.speech_started")
    (stopped,) = c.of("input_audio_buffer.speech_stopped")
    assert 200 <= started["audio_start_ms"] <= 400  # speech at 600 ms, less the padding
    turn_ms = stopped["audio_end_ms"] - started["audio_start_ms"]
    assert turn_ms > 500
    said = transcript(done)
    assert ScriptedExecutor.samples_heard(said) == turn_ms * 24
    assert done["status"] == "completed"
    if c.beta:
        assert done["output_audio_format"] == "g711_alaw"
    else:
        assert done["audio"]["output"]["format"] == {"type": "audio/pcma"}
    out = b"".join(base64.b64decode(d["delta"]) for d in c.of("response.output_audio.delta"))
    assert len(out) == words(said) * 800  # 100 ms of 8 kHz A-law a word
    tone = alaw_decode(out)
    assert np.abs(tone.astype(np.int32)).max() > 500  # the scripted tone, not silence
    assert "error" not in c.types()


# --- coverage ------------------------------------------------------------------------------


def test_suite_sends_every_supported_client_event() -> None:
    covered: set[str] = set().union(*SENDS.values())
    assert covered == set(SUPPORTED_TYPES)
    tests = {name for name in globals() if name.startswith("test_")}
    assert set(SENDS) <= tests


def test_beta_names_are_beta_server_events() -> None:
    """The renames this suite expects are real beta event types, and real GA ones
    are what they rename."""
    assert set(RENAMED) <= set(event_types(RealtimeServerEvent).values())
    assert set(RENAMED.values()) <= set(event_types(BetaServerEvent).values())
    assert beta_type("conversation.item.done") is None  # beta announced an item once
