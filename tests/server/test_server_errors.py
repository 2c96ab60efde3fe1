"""Bad input over a real server and a raw WebSocket client.

Each refusal must come back as an OpenAI-style `error` event (error.type, code,
message, param, and event_id echoing the client's), and the session must work
afterwards: `alive()` proves it with a manual append + commit.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from bench.speech import load_wav
from tests.support.events import Events
from tests.support.servers import RunningServer, ServerFactory

NO_VAD = {
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}
APPEND = "input_audio_buffer.append"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class Client(Events):
    def __init__(self, ws: ClientConnection) -> None:
        super().__init__(self.text_frame)
        self.ws = ws

    async def send(self, event: dict[str, Any] | str | bytes) -> None:
        await self.ws.send(json.dumps(event) if isinstance(event, dict) else event)

    async def text_frame(self) -> str:
        frame = await self.ws.recv()
        assert isinstance(frame, str), "server events are text frames"
        return frame

    async def error(self) -> dict[str, Any]:
        """The next error event's `error` object, checked for the full envelope."""
        event = await self.until("error")
        assert set(event) == {"type", "event_id", "error"}
        assert event["event_id"].startswith("event_")
        error: dict[str, Any] = event["error"]
        assert set(error) == {"type", "code", "message", "param", "event_id"}
        assert error["type"] == "invalid_request_error"
        assert isinstance(error["message"], str) and error["message"]
        return error

    async def refusal(self, event: dict[str, Any]) -> dict[str, Any]:
        """Sends `event`; the error refusing it, which names its event_id."""
        await self.send(event)
        error = await self.error()
        assert error["event_id"] == event["event_id"]
        return error

    async def alive(self) -> None:
        """A valid manual turn still goes through: append + commit -> committed."""
        await self.send(NO_VAD)
        updated = await self.until("session.updated")
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
        pcm = load_wav("timer")[: 24 * 300]  # 300 ms of speech
        await self.send(
            {"type": "input_audio_buffer.append", "audio": b64(pcm.astype("<i2").tobytes())}
        )
        await self.send({"type": "input_audio_buffer.commit", "event_id": "evt_commit"})
        while (event := await self.next())["type"] != "input_audio_buffer.committed":
            assert event["type"] != "error", event
        assert event["item_id"].startswith("item_")


@asynccontextmanager
async def session(server: RunningServer, **options: Any) -> AsyncIterator[Client]:
    async with connect(server.ws_url + "?model=parley-scripted", **options) as ws:
        client = Client(ws)
        assert (await client.next())["type"] == "session.created"
        yield client


# (frame, code, param, echoed event_id)
BAD_INPUT: dict[str, tuple[str | bytes, str, str | None, str | None]] = {
    "invalid_json": ('{"type": "input_audio_buffer.commit",', "invalid_json", None, None),
    "json_array": ('[{"type": "input_audio_buffer.commit"}]', "invalid_json", None, None),
    "unknown_type": (
        json.dumps({"type": "conversation.nonsense", "event_id": "evt_1"}),
        "invalid_value",
        "type",
        "evt_1",
    ),
    "missing_type": (
        json.dumps({"event_id": "evt_2", "audio": ""}),
        "missing_required_parameter",
        "type",
        "evt_2",
    ),
    "bad_base64": (
        json.dumps({"type": APPEND, "audio": "@@not base64@@", "event_id": "evt_3"}),
        "invalid_value",
        "audio",
        "evt_3",
    ),
    "odd_byte_count": (
        json.dumps({"type": APPEND, "audio": b64(b"\x01\x02\x03"), "event_id": "evt_4"}),
        "invalid_value",
        "audio",
        "evt_4",
    ),
    "missing_audio": (
        json.dumps({"type": APPEND, "event_id": "evt_5"}),
        "missing_required_parameter",
        "audio",
        "evt_5",
    ),
    # JSON that the standard library refuses with something other than a decode error.
    "deeply_nested_json": ("[" * 100_000 + "]" * 100_000, "invalid_json", None, None),
    "huge_integer": (
        '{"type": "input_audio_buffer.commit", "event_id": "evt_6", "n": ' + "1" * 5000 + "}",
        "invalid_json",
        None,
        None,
    ),
    "binary_frame": (b'{"type": "input_audio_buffer.commit"}', "invalid_json", None, None),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
async def test_bad_frame_gets_an_error_and_the_session_lives(
    server: RunningServer, case: str
) -> None:
    frame, code, param, event_id = BAD_INPUT[case]
    async with session(server) as client:
        await client.send(frame)
        error = await client.error()
        assert error["code"] == code
        assert error["param"] == param
        assert error["event_id"] == event_id
        await client.alive()
        assert [e["type"] for e in client.all].count("error") == 1


async def test_wrong_typed_field(server: RunningServer) -> None:
    async with session(server) as client:
        error = await client.refusal(
            {
                "type": "conversation.item.truncate",
                "event_id": "evt_trunc",
                "item_id": "item_x",
                "content_index": 0,
                "audio_end_ms": "abc",
            }
        )
        assert error["code"] in ("invalid_type", "invalid_value")
        assert error["param"] == "audio_end_ms"
        await client.alive()


async def test_oversized_message_is_refused_and_the_session_lives(serve: ServerFactory) -> None:
    server = await serve(max_message_bytes=64 * 1024)
    async with session(server) as client:
        audio = b64(bytes(75 * 1024))  # 100 KiB of base64: over the limit, under 2x
        await client.send(
            {"type": "input_audio_buffer.append", "audio": audio, "event_id": "evt_big"}
        )
        error = await client.error()
        assert error["code"] == "message_too_large"
        await client.alive()


async def test_message_size_limit_counts_utf8_bytes(serve: ServerFactory) -> None:
    server = await serve(max_message_bytes=64 * 1024)
    async with session(server) as client:
        # 40 000 characters, 80 000 bytes: over the limit although the text is not.
        instructions = "\u00e9" * 40_000
        frame = json.dumps(
            {
                "type": "session.update",
                "event_id": "evt_utf8",
                "session": {"instructions": instructions},
            },
            ensure_ascii=False,
        )
        assert len(frame) < 64 * 1024 < len(frame.encode())
        await client.send(frame)
        error = await client.error()
        assert error["code"] == "message_too_large"
        assert "session.updated" not in [e["type"] for e in client.all]
        await client.alive()


async def test_message_over_twice_the_limit_closes_with_1009(serve: ServerFactory) -> None:
    server = await serve(max_message_bytes=64 * 1024)
    async with session(server) as client:
        await client.send({"type": "input_audio_buffer.append", "audio": b64(bytes(150 * 1024))})
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await client.next()
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 1009


async def test_cancel_with_no_active_response(server: RunningServer) -> None:
    async with session(server) as client:
        error = await client.refusal({"type": "response.cancel", "event_id": "evt_cancel"})
        assert error["code"] == "response_cancel_not_active"
        await client.alive()


async def test_commit_with_an_empty_buffer(server: RunningServer) -> None:
    async with session(server) as client:
        await client.send(NO_VAD)
        await client.until("session.updated")
        error = await client.refusal({"type": "input_audio_buffer.commit", "event_id": "evt_empty"})
        assert error["code"] == "input_audio_buffer_commit_empty"
        await client.alive()


async def test_response_create_while_one_is_active(serve: ServerFactory) -> None:
    # Slow chunks keep the first response active for seconds.
    server = await serve(scripted_chunk_delay_s=1.0)
    async with session(server) as client:
        await client.send({"type": "response.create", "event_id": "evt_first"})
        created = await client.until("response.created")
        error = await client.refusal({"type": "response.create", "event_id": "evt_second"})
        assert error["code"] == "conversation_already_has_active_response"
        await client.alive()
        # The first response was untouched by the refusal: cancelling it works.
        await client.send({"type": "response.cancel"})
        done = await client.until("response.done")
        assert done["response"]["id"] == created["response"]["id"]
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "client_cancelled"
        assert [e["type"] for e in client.all].count("response.created") == 1


async def test_unsupported_speed_is_reported_and_the_rest_applies(server: RunningServer) -> None:
    async with session(server) as client:
        error = await client.refusal(
            {
                "type": "session.update",
                "event_id": "evt_semantic",
                "session": {
                    "type": "realtime",
                    "audio": {
                        "input": {"turn_detection": {"type": "semantic_vad"}},
                        "output": {"speed": 1.3},
                    },
                },
            }
        )
        assert error["code"] == "unsupported_value"
        assert error["param"] == "session.audio.output.speed"
        [updated] = [e for e in client.all if e["type"] == "session.updated"]
        vad = updated["session"]["audio"]["input"]["turn_detection"]
        assert vad["type"] == "semantic_vad"
        await client.alive()


async def test_browser_subprotocol_is_echoed(server: RunningServer) -> None:
    async with session(server, subprotocols=["realtime", "openai-insecure-api-key.x"]) as client:
        assert client.ws.subprotocol == "realtime"
        await client.alive()


async def test_no_subprotocol_when_none_offered(server: RunningServer) -> None:
    async with session(server) as client:
        assert client.ws.subprotocol is None
        await client.alive()
