"""Parley's resume extension over a real server (server/resume.py): a client whose
connection drops takes its session back with its token and key and gets exactly the
events it did not process, in order, once; then the conversation goes on."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from server.resume import TOKEN_EVENT, ResumeRegistry
from tests.support.scrape import Samples, parse, value
from tests.support.servers import RunningServer, ServerFactory

Event = dict[str, Any]
NO_VAD = {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}
# Read back word by word (one audio chunk each): a response long enough to drop in.
OUTPUT = " ".join(f"word{i}" for i in range(30))
TOOL = {
    "type": "function",
    "name": "lookup",
    "description": "Looks something up.",
    "parameters": {"type": "object", "properties": {}},
}
KEY = "sk-resume-test-key"


async def recv(ws: ClientConnection) -> Event:
    event: Event = json.loads(await asyncio.wait_for(ws.recv(), 10))
    return event


async def until(ws: ClientConnection, kind: str, into: list[Event]) -> Event:
    while True:
        event = await recv(ws)
        into.append(event)
        if event["type"] == kind:
            return event


async def open_resumable(
    server: RunningServer, headers: dict[str, str] | None = None
) -> tuple[ClientConnection, str, list[Event]]:
    """A resumable session: its socket, its first token and the events so far."""
    ws = await connect(
        server.ws_url + "?resume=true", proxy=None, max_size=None, additional_headers=headers
    )
    created, announced = await recv(ws), await recv(ws)
    assert created["type"] == "session.created"
    assert announced["type"] == TOKEN_EVENT
    assert announced["window_s"] == server.settings.resume_window_s
    assert announced["resume_token"].startswith("rt_")
    return ws, announced["resume_token"], [created]


async def resume(
    server: RunningServer,
    token: str,
    last_event_id: str | None,
    headers: dict[str, str] | None = None,
) -> tuple[ClientConnection, str]:
    """The session back: its socket and its next token."""
    query = f"?resume_token={token}"
    if last_event_id is not None:
        query += f"&last_event_id={last_event_id}"
    ws = await connect(server.ws_url + query, proxy=None, max_size=None, additional_headers=headers)
    announced = await recv(ws)
    assert announced["type"] == TOKEN_EVENT and announced["resume_token"] != token
    return ws, announced["resume_token"]


async def refusal(server: RunningServer, query: str, headers: dict[str, str] | None = None) -> Any:
    with pytest.raises(InvalidStatus) as refused:
        await connect(server.ws_url + query, proxy=None, additional_headers=headers)
    body = json.loads(refused.value.response.body or b"{}")
    return refused.value.response.status_code, body["error"]


def drop(ws: ClientConnection) -> None:
    """The network goes: no close frame, the socket just ends."""
    ws.transport.abort()


async def long_answer(ws: ClientConnection) -> None:
    await ws.send(json.dumps(NO_VAD))
    item = {"type": "function_call_output", "call_id": "call_1", "output": OUTPUT}
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    await ws.send(json.dumps({"type": "response.create"}))


def registry(apps: list[FastAPI]) -> ResumeRegistry:
    resumes: ResumeRegistry = apps[-1].state.realtime.resumes
    return resumes


async def settle(check: Any) -> None:
    """Wait for the server's own state (same event loop) to reach `check`."""
    async with asyncio.timeout(10):
        # The server's tasks run between the polls; it sets no event for tests.
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def scrape(server: RunningServer, headers: dict[str, str]) -> Samples:
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as http:
        return parse((await http.get("/metrics", headers=headers)).text)


def audio_of(events: list[Event]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_audio.delta")


async def test_a_client_that_drops_mid_answer_gets_exactly_what_it_missed(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(scripted_chunk_delay_s=0.02)
    # The same answer, undisturbed: what the client must end up with.
    reference, _, whole = await open_resumable(server)
    await long_answer(reference)
    await until(reference, "response.done", whole)
    await reference.close()

    ws, token, first = await open_resumable(server)
    await long_answer(ws)
    while len([e for e in first if e["type"] == "response.output_audio.delta"]) < 4:
        first.append(await recv(ws))
    drop(ws)
    # It processed only up to the second delta: the two after it were lost in flight.
    deltas = [i for i, e in enumerate(first) if e["type"] == "response.output_audio.delta"]
    processed = first[: deltas[1] + 1]
    await settle(lambda: registry(apps).detached == 1)

    back, _ = await resume(server, token, processed[-1]["event_id"])
    rest: list[Event] = []
    done = await until(back, "response.done", rest)
    assert done["response"]["status"] == "completed"
    # Exactly once, in order: what it had received again, then what it never saw.
    assert rest[: len(first) - len(processed)] == first[len(processed) :]
    after = processed + rest
    assert len({e["event_id"] for e in after}) == len(after)
    assert [e["type"] for e in after] == [e["type"] for e in whole]
    assert audio_of(after) == audio_of(whole)
    assert registry(apps).detached == 0

    # The conversation goes on where it was.
    items = [e["item"]["id"] for e in after if e["type"] == "conversation.item.done"]
    await back.send(json.dumps({"type": "conversation.item.retrieve", "item_id": items[-1]}))
    retrieved = await until(back, "conversation.item.retrieved", [])
    assert OUTPUT.split()[-1] in json.dumps(retrieved["item"])
    await back.send(json.dumps({"type": "response.create"}))
    assert (await until(back, "response.done", []))["response"]["status"] == "completed"
    await back.close()


async def test_a_drop_during_a_function_call_resumes_with_the_call(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve()
    ws, token, events = await open_resumable(server)
    await ws.send(json.dumps(NO_VAD))
    await ws.send(json.dumps({"type": "session.update", "session": {"tools": [TOOL]}}))
    await ws.send(json.dumps({"type": "response.create"}))
    created = await until(ws, "response.created", events)
    drop(ws)  # before the call arrives
    await settle(lambda: registry(apps).detached == 1)

    back, _ = await resume(server, token, created["event_id"])
    rest: list[Event] = []
    done = await until(back, "response.done", rest)
    (call,) = [o for o in done["response"]["output"] if o["type"] == "function_call"]
    assert [e["type"] for e in rest].count("response.function_call_arguments.done") == 1
    assert "response.created" not in [e["type"] for e in rest]
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    await back.send(json.dumps({"type": "conversation.item.create", "item": output}))
    await back.send(json.dumps({"type": "response.create"}))
    answer = await until(back, "response.done", [])
    assert answer["response"]["status"] == "completed"
    assert "The tool said sunny." in json.dumps(answer["response"]["output"])
    await back.close()


async def test_a_token_is_good_once_and_only_with_its_key(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(api_keys=[KEY, "sk-another-key"])
    mine = {"Authorization": f"Bearer {KEY}"}
    ws, token, events = await open_resumable(server, mine)
    drop(ws)
    await settle(lambda: registry(apps).detached == 1)

    assert value(await scrape(server, mine), "parley_sessions_detached") == 1
    theirs = {"Authorization": "Bearer sk-another-key"}
    status, error = await refusal(server, f"?resume_token={token}", theirs)
    assert (status, error["code"], error["param"]) == (404, "resume_token_invalid", "resume_token")
    back, next_token = await resume(server, token, events[-1]["event_id"], mine)
    status, error = await refusal(server, f"?resume_token={token}", mine)  # spent
    assert (status, error["code"]) == (404, "resume_token_invalid")
    status, error = await refusal(server, "?resume_token=rt_made_up", mine)
    assert (status, error["code"]) == (404, "resume_token_invalid")
    samples = await scrape(server, mine)
    assert value(samples, "parley_sessions_detached") == 0
    assert value(samples, "parley_detached_sessions_ended_total", how="resumed") == 1
    assert value(samples, "parley_resumes_refused_total", code="resume_token_invalid") == 3

    # Closed on purpose (1000): the session ends at once, its token with it.
    await back.close()
    await settle(lambda: len(registry(apps)._by_id) == 0)
    status, error = await refusal(server, f"?resume_token={next_token}", mine)
    assert (status, error["code"]) == (404, "resume_token_invalid")


async def test_an_ephemeral_key_resumes_the_session_it_opened_even_once_spent(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(api_keys=[KEY])
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as http:
        minted = []
        for _ in range(2):
            answer = await http.post(
                "/v1/realtime/client_secrets", json={}, headers={"Authorization": f"Bearer {KEY}"}
            )
            minted.append(answer.json()["value"])
    browser = {"Authorization": f"Bearer {minted[0]}"}
    ws, token, events = await open_resumable(server, browser)
    drop(ws)
    await settle(lambda: registry(apps).detached == 1)
    other = {"Authorization": f"Bearer {minted[1]}"}
    status, error = await refusal(server, f"?resume_token={token}", other)
    assert (status, error["code"]) == (404, "resume_token_invalid")
    back, _ = await resume(server, token, events[-1]["event_id"], browser)
    await back.send(json.dumps({"type": "session.update", "session": {"instructions": "Hi."}}))
    assert (await until(back, "session.updated", []))["session"]["instructions"] == "Hi."
    await back.close()


async def test_a_session_not_resumed_within_its_window_is_closed(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(resume_window_s=0.2)
    ws, token, _ = await open_resumable(server)
    drop(ws)
    hub = apps[-1].state.hub
    await settle(lambda: registry(apps).detached == 1)
    await settle(lambda: hub.sessions == 0)  # its seat is freed once it is closed
    samples = await scrape(server, {})
    assert value(samples, "parley_detached_sessions_ended_total", how="expired") == 1
    assert value(samples, "parley_sessions_detached") == 0
    status, error = await refusal(server, f"?resume_token={token}")
    assert (status, error["code"]) == (404, "resume_token_invalid")


async def test_events_that_cannot_be_replayed_exactly_refuse_the_resume(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve()
    ws, token, _ = await open_resumable(server)
    drop(ws)
    await settle(lambda: registry(apps).detached == 1)
    status, error = await refusal(server, f"?resume_token={token}&last_event_id=event_never")
    assert (status, error["code"], error["param"]) == (409, "resume_events_lost", "last_event_id")
    await settle(lambda: apps[-1].state.hub.sessions == 0)  # ended: nobody can resume it


async def test_a_reconnect_before_the_drop_is_noticed_takes_the_session_over(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve()
    ws, token, events = await open_resumable(server)
    # The old connection still looks alive to the server.
    back, _ = await resume(server, token, events[-1]["event_id"])
    with pytest.raises(ConnectionClosed):
        while True:
            await recv(ws)
    await back.send(json.dumps({"type": "session.update", "session": {"instructions": "On."}}))
    assert (await until(back, "session.updated", []))["session"]["instructions"] == "On."
    assert apps[-1].state.hub.sessions == 1
    await back.close()


async def test_detached_sessions_keep_their_seats(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(max_sessions=1)
    ws, token, events = await open_resumable(server)
    drop(ws)
    await settle(lambda: registry(apps).detached == 1)
    async with connect(server.ws_url, proxy=None) as other:
        with pytest.raises(ConnectionClosed) as closed:
            await recv(other)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    back, _ = await resume(server, token, events[-1]["event_id"])
    await back.close()


async def test_a_session_that_did_not_ask_is_not_resumable(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve()
    async with connect(server.ws_url, proxy=None) as ws:
        assert (await recv(ws))["type"] == "session.created"
        assert (await recv(ws))["type"] == "conversation.created"
        drop(ws)
    await settle(lambda: apps[-1].state.hub.sessions == 0)
    status, error = await refusal(server, "?resume=maybe")
    assert (status, error["code"], error["param"]) == (400, "invalid_value", "resume")


async def test_the_drain_ends_detached_sessions(serve: ServerFactory, apps: list[FastAPI]) -> None:
    server = await serve(drain_timeout_s=5)
    ws, _, _ = await open_resumable(server)
    await long_answer(ws)
    await until(ws, "response.output_audio.delta", [])
    drop(ws)
    await settle(lambda: registry(apps).detached == 1)
    hub = apps[-1].state.hub
    await asyncio.wait_for(hub.drain(), 10)  # the answer ends into the journal, then it
    assert hub.sessions == 0
    samples = await scrape(server, {})
    assert value(samples, "parley_detached_sessions_ended_total", how="closed") == 1
