"""Resumable WebRTC calls over a real server (server/resumable_call.py): a call whose
peer connection is lost keeps its session, sidebands and id; a new offer with its
token and key brings a new peer connection that gets exactly the data channel events
the client missed, in order, once, and then the call goes on, heard on the new
track."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import websockets
from aiortc import RTCConfiguration, RTCPeerConnection
from fastapi import FastAPI

from bench.rtc_client import Call, CallRefused, call, offer_sdp
from server.resume import TOKEN_EVENT, ResumeRegistry
from tests.support.audio import utterance
from tests.support.events import TIMEOUT_S, Events
from tests.support.sdk_check import assert_sdk_event
from tests.support.servers import RunningServer, ServerFactory

Event = dict[str, Any]
KEY = "sk-rtc-resume-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# Read back word by word, a tenth of a second of audio each: a 3 s answer.
OUTPUT = " ".join(f"word{i}" for i in range(30))


def checked(event: Event) -> None:
    """Every event as the SDK has it, but Parley's own token announcement."""
    if event["type"] != TOKEN_EVENT:
        assert_sdk_event(event)


@contextlib.asynccontextmanager
async def rtc(server: RunningServer, **params: str) -> AsyncIterator[tuple[Call, Events]]:
    async with call(server.http_url, key=KEY, params=params) as made:
        yield made, Events(made.inbox.get, checked)


def registry(apps: list[FastAPI]) -> ResumeRegistry:
    resumes: ResumeRegistry = apps[-1].state.calls.resumes
    return resumes


async def settle(check: Callable[[], bool]) -> None:
    """Wait for the server's own state (same event loop) to reach `check`."""
    async with asyncio.timeout(TIMEOUT_S):
        # The server's tasks run between the polls; it sets no event for tests.
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def announced(events: Events) -> str:
    token = await events.next()
    assert token["type"] == TOKEN_EVENT and token["resume_token"].startswith("rt_")
    return str(token["resume_token"])


async def refused(server: RunningServer, **params: str) -> tuple[int, Event]:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio")
    pc.createDataChannel("oai-events")
    try:
        sdp = await offer_sdp(pc)
    finally:
        await pc.close()
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        answer = await http.post(
            "/v1/realtime/calls",
            content=sdp,
            params=params,
            headers=AUTH | {"Content-Type": "application/sdp"},
        )
    return answer.status_code, answer.json()["error"]


class Sideband:
    """The application's server on the call: every event it gets, as it gets them."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.events: list[Event] = []
        self.news = asyncio.Event()
        self.close_code: int | None = None  # the server's, once it closed
        self.reading = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in self.ws:
                self.events.append(json.loads(message))
                self.news.set()
        self.close_code = self.ws.close_code or 1006
        self.news.set()

    async def until(self, check: Callable[[], bool]) -> None:
        async with asyncio.timeout(TIMEOUT_S):
            while not check():
                self.news.clear()
                await self.news.wait()


@contextlib.asynccontextmanager
async def sideband(server: RunningServer, call_id: str) -> AsyncIterator[Sideband]:
    url = f"{server.ws_url}?call_id={call_id}"
    async with websockets.connect(url, additional_headers=AUTH, proxy=None) as ws:
        side = Sideband(ws)
        yield side
        side.reading.cancel()


async def test_a_lost_peer_connection_resumes_with_the_events_it_missed(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(api_keys=[KEY], scripted_chunk_delay_s=0.1)
    async with rtc(server, resume="true") as (first, events):
        assert (await events.next())["type"] == "session.created"
        token = await announced(events)
        async with sideband(server, first.call_id) as side:
            item = {"type": "function_call_output", "call_id": "call_1", "output": OUTPUT}
            first.send_json(json.dumps({"type": "conversation.item.create", "item": item}))
            first.send_json(json.dumps({"type": "response.create"}))
            started = await events.until("output_audio_buffer.started")
            answer = started["response_id"]
            while len(events.of("response.output_audio_transcript.delta")) < 4:
                await events.next()
            # The network goes mid-answer; what came after the second transcript delta
            # was lost in flight.
            await first.pc.close()
            deltas = [i for i, e in enumerate(events.all) if e["type"].endswith("transcript.delta")]
            processed = [e for e in events.all[: deltas[1] + 1] if e["type"] != TOKEN_EVENT]
            await settle(lambda: registry(apps).detached == 1)
            # Detached, the session goes on: the sideband gets the answer's end.
            await side.until(lambda: any(e["type"] == "response.done" for e in side.events))
            assert side.close_code is None

            async with rtc(server, resume_token=token, last_event_id=processed[-1]["event_id"]) as (
                back,
                resumed,
            ):
                assert back.call_id == first.call_id  # hang-up and sidebands by the same id
                next_token = await announced(resumed)
                stopped = await resumed.until("output_audio_buffer.stopped")
                assert stopped["response_id"] == answer
                # The rest of the answer is played on the new track.
                await back.until_heard(lambda: len(back.audible_since(0)) >= 5, TIMEOUT_S)
                rest = resumed.all[1:]
                # Exactly once, in order: what it had received again, then the rest.
                seen = [e for e in events.all if e["type"] != TOKEN_EVENT]
                assert rest[: len(seen) - len(processed)] == seen[len(processed) :]
                after = processed + rest
                assert len({e["event_id"] for e in after}) == len(after)
                assert [e["type"] for e in after].count("response.done") == 1
                assert "response.output_audio.delta" not in [e["type"] for e in after]
                # As the sideband got them, which never dropped.
                first_seen = next(i for i, e in enumerate(after) if e == side.events[0])
                await side.until(lambda: len(side.events) >= len(after) - first_seen)
                assert after[first_seen:] == side.events[: len(after) - first_seen]

                # A token is good once.
                status, error = await refused(server, resume_token=token)
                assert (status, error["code"], error["param"]) == (
                    404,
                    "resume_token_invalid",
                    "resume_token",
                )

                # The next turn is heard and answered on the new track.
                back.mic.say(utterance("weather"))
                done = await resumed.until("response.done")
                assert done["response"]["status"] == "completed"
                await resumed.until("output_audio_buffer.stopped")
                spoke = back.mic.spoke_at[0]
                assert len(back.audible_since(spoke + 0.5)) >= 5
                assert "error" not in resumed.types()

                # Hung up by its id: the sideband is closed, the token void.
                async with httpx.AsyncClient(base_url=server.http_url) as http:
                    gone = await http.delete(f"/v1/realtime/calls/{back.call_id}", headers=AUTH)
                assert gone.status_code == 200
                await side.until(lambda: side.close_code is not None)
                assert side.close_code == 1000
    await settle(lambda: apps[-1].state.hub.sessions == 0)
    status, error = await refused(server, resume_token=next_token)
    assert (status, error["code"]) == (404, "resume_token_invalid")


async def test_a_detached_call_not_resumed_within_its_window_ends(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(api_keys=[KEY], resume_window_s=0.5)
    hub = apps[-1].state.hub
    async with rtc(server, resume="true") as (first, events):
        assert (await events.next())["type"] == "session.created"
        token = await announced(events)
        async with sideband(server, first.call_id) as side:
            await first.pc.close()
            await settle(lambda: registry(apps).detached == 1)
            assert hub.sessions == 1  # its seat kept
            # Past the window: ended, its seat freed, its sideband closed.
            await side.until(lambda: side.close_code is not None)
            assert side.close_code == 1000
    await settle(lambda: hub.sessions == 0)
    status, error = await refused(server, resume_token=token)
    assert (status, error["code"]) == (404, "resume_token_invalid")


async def test_a_call_cannot_resume_with_events_it_cannot_be_given_exactly(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(api_keys=[KEY])
    async with rtc(server, resume="true") as (first, events):
        assert (await events.next())["type"] == "session.created"
        token = await announced(events)
        await first.pc.close()
        await settle(lambda: registry(apps).detached == 1)
        status, error = await refused(server, resume_token=token, last_event_id="event_never")
        assert (status, error["code"], error["param"]) == (
            409,
            "resume_events_lost",
            "last_event_id",
        )
    await settle(lambda: apps[-1].state.hub.sessions == 0)  # ended: nobody can resume it
    with pytest.raises(CallRefused) as bad:
        async with call(server.http_url, key=KEY, params={"resume": "maybe"}):
            pass
    assert bad.value.status == 400 and "invalid_value" in bad.value.body
    # Tokens are per transport: a WebSocket session's resumes only as a WebSocket.
    url = server.ws_url + "?resume=true"
    async with websockets.connect(url, additional_headers=AUTH, proxy=None) as ws:
        await ws.recv()  # session.created
        ws_token = json.loads(await ws.recv())["resume_token"]
        status, error = await refused(server, resume_token=ws_token)
    assert (status, error["code"]) == (404, "resume_token_invalid")


async def test_a_new_offer_before_the_loss_is_noticed_takes_the_call_over(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(api_keys=[KEY])
    hub = apps[-1].state.hub
    async with rtc(server, resume="true") as (first, events):
        assert (await events.next())["type"] == "session.created"
        await announced(events)
        token = events.all[-1]
        # The old peer connection still looks alive to the server.
        async with rtc(
            server, resume_token=token["resume_token"], last_event_id=token["event_id"]
        ) as (back, resumed):
            await announced(resumed)
            gone = asyncio.Event()
            first.pc.on("connectionstatechange", gone.set)
            async with asyncio.timeout(TIMEOUT_S):
                while first.pc.connectionState not in ("closed", "failed"):
                    gone.clear()
                    await gone.wait()
            update = {"type": "session.update", "session": {"instructions": "On."}}
            back.send_json(json.dumps(update))
            assert (await resumed.until("session.updated"))["session"]["instructions"] == "On."
            assert hub.sessions == 1
            # Hung up while detached: ended at once, not at the window's end.
            await back.pc.close()
            await settle(lambda: registry(apps).detached == 1)
            async with httpx.AsyncClient(base_url=server.http_url) as http:
                hung = await http.delete(f"/v1/realtime/calls/{back.call_id}", headers=AUTH)
            assert hung.status_code == 200
            await settle(lambda: hub.sessions == 0)
