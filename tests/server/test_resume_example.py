"""examples/resume_client.py against a real server: the official SDK's connection,
dropped mid-answer, is taken back by the example's loop, and the answer arrives whole,
each event once, as if nothing had happened."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection
from websockets.exceptions import InvalidStatus

from examples.resume_client import TOKEN_EVENT, resumable_events
from server.resume import ResumeRegistry
from tests.support.servers import RunningServer, ServerFactory

# Read back word by word (one audio chunk each): a response long enough to drop in.
OUTPUT = " ".join(f"word{i}" for i in range(30))


async def long_answer(conn: AsyncRealtimeConnection) -> None:
    await conn.session.update(
        session={"type": "realtime", "audio": {"input": {"turn_detection": None}}}
    )
    item = {"type": "function_call_output", "call_id": "call_1", "output": OUTPUT}
    await conn.conversation.item.create(item=item)  # type: ignore[arg-type]
    await conn.response.create()


async def answer(server: RunningServer, seen: Callable[[Any], None]) -> tuple[list[Any], int]:
    """The events of one long answer through the example's loop, up to response.done,
    and how many connections they came on."""
    client = AsyncOpenAI(base_url=f"{server.http_url}/v1", api_key="x")
    events: list[Any] = []
    connections = set()
    stream = resumable_events(client, long_answer, model="parley-scripted")
    async with contextlib.aclosing(stream) as stream:
        async for conn, event in stream:
            events.append(event)
            connections.add(id(conn))
            seen(event)
            if event.type == "response.done":
                break
    return events, len(connections)


def registry(apps: list[FastAPI]) -> ResumeRegistry:
    resumes: ResumeRegistry = apps[-1].state.realtime.resumes
    return resumes


def drop_after_deltas(
    apps: list[FastAPI], deltas: int, *, end: bool = False
) -> Callable[[Any], None]:
    """Cuts the session's connection from the server's side (no close frame) once the
    client has handled `deltas` audio deltas; with `end`, ends the session too."""
    count = 0

    def seen(event: Any) -> None:
        nonlocal count
        if event.type != "response.output_audio.delta":
            return
        count += 1
        if count == deltas:
            (resumable,) = registry(apps)._by_id.values()
            assert resumable.attachment is not None
            resumable.attachment.abort()
            if end:
                resumable.finish()

    return seen


def what_matters(events: list[Any]) -> tuple[list[str], str, str]:
    """The events' types (less the token announcements), the audio, the transcript."""
    types = [e.type for e in events if e.type != TOKEN_EVENT]
    audio = "".join(e.delta for e in events if e.type == "response.output_audio.delta")
    (transcript,) = [
        e.transcript for e in events if e.type == "response.output_audio_transcript.done"
    ]
    return types, audio, transcript


async def test_an_answer_cut_by_a_drop_arrives_whole_after_the_reconnect(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(scripted_chunk_delay_s=0.02)
    reference, connections = await answer(server, lambda _: None)
    assert connections == 1
    assert OUTPUT in what_matters(reference)[2]

    events, connections = await answer(server, drop_after_deltas(apps, 4))
    assert connections == 2
    assert [e.type for e in events].count(TOKEN_EVENT) == 2  # one per connection
    assert len({e.event_id for e in events}) == len(events)  # each event once
    assert what_matters(events) == what_matters(reference)
    assert events[-1].response.status == "completed"


async def test_a_refused_resume_is_raised(serve: ServerFactory, apps: list[FastAPI]) -> None:
    """The session ended while the client was away: the resume is refused (404) and
    the loop raises it, for the client to open a new session."""
    server = await serve()
    with pytest.raises(InvalidStatus) as refused:
        await answer(server, drop_after_deltas(apps, 1, end=True))
    assert refused.value.response.status_code == 404
