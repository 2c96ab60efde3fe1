"""A resumable session's writers (server/resume.py), on a fake session and with the
loop stepped by hand: one taker of the outbox at a time, every event journaled before
it is sent, and a claimed session's events held until its new connection opens."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.emitter import Outbox, OutEvent
from server import resume
from server.resume import TOKEN_EVENT, Resumable, Resumed, ResumeRegistry
from server.resume_tokens import ResumeTokens


class FakeSession:
    session_id = "sess_1"

    def __init__(self) -> None:
        self.outbox = Outbox()
        self.closed = asyncio.Event()

    async def run(self) -> None:
        await self.closed.wait()
        self.outbox.close()

    def close(self) -> None:
        self.closed.set()

    def put(self, event_id: str) -> None:
        text = json.dumps({"type": "x", "event_id": event_id})
        self.outbox.put_control(OutEvent(text, "x", event_id=event_id))


class Wire:
    """A connection's frames, as sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, str]] = []

    async def send(self, text: str) -> bool:
        self.sent.append(json.loads(text))
        return True

    def ids(self) -> list[str]:
        return [e["event_id"] if e["type"] != TOKEN_EVENT else "token" for e in self.sent]


async def steps(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_claimed_session_holds_its_events_until_the_new_connection_opens() -> None:
    session = FakeSession()
    registry = ResumeRegistry(ResumeTokens())
    released: list[bool] = []
    link = Resumable(session, "owner", registry, lambda: released.append(True))  # type: ignore[arg-type]
    registry.add(link)
    first = Wire()
    attachment = link.attach(first.send, lambda text: text, lambda: None, None)
    session.put("e1")  # session.created
    await steps()
    assert first.ids() == []  # not opened yet
    attachment.opened.set()
    await steps()
    assert first.ids() == ["e1", "token"]
    token = first.sent[1]["resume_token"]

    link.detach(attachment)
    session.put("e2")
    await steps()
    assert len(link.journal) == 2  # the pump took e2 while nobody was connected

    claimed = registry.claim(token, "owner", "e1")
    assert isinstance(claimed, Resumed) and [e.event_id for e in claimed.missed] == ["e2"]
    second = Wire()
    again = link.attach(second.send, lambda text: text, lambda: None, claimed.missed)
    session.put("e3")  # while the new connection's handshake is still going on
    await steps()
    assert second.ids() == [] and len(link.journal) == 2  # nobody took e3
    again.opened.set()
    await steps()
    assert second.ids() == ["token", "e2", "e3"]  # each once, in order

    await link.finish()
    assert released == [True] and registry.detached == 0


async def test_a_detached_session_takes_a_bounded_share_of_its_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past DETACHED_CHARS the pump stops, so the response waits in the outbox, even
    for events nobody journals (a call's audio, which would pile up in its playout)."""
    monkeypatch.setattr(resume, "DETACHED_CHARS", 100)
    session = FakeSession()
    registry = ResumeRegistry(ResumeTokens())
    played: list[str] = []

    def call_like(event: OutEvent) -> str | None:  # audio to a playout, not the journal
        played.append(event.event_id)
        return None

    link = Resumable(session, "owner", registry, lambda: None, take=call_like)  # type: ignore[arg-type]
    wire = Wire()
    attachment = link.attach(wire.send, lambda text: text, lambda: None, None)
    attachment.opened.set()
    session.put("created")
    await steps()
    link.detach(attachment)
    for n in range(10):  # 37 characters each
        session.put(f"audio{n}")
    await steps(30)
    assert played == ["created"] + [f"audio{n}" for n in range(3)]
    assert len(session.outbox) == 7  # waiting for a client
    await link.finish()
