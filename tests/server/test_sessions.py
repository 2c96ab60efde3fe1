"""The session hub both transports share (server/sessions.py): seats, calls by id,
the serve loop and the drain, without a connection."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from models.listening.vad import WebRtcVadBackend
from models.scripted import ScriptedExecutor
from server import sessions
from server.auth import ApiError
from server.config import Settings
from server.sessions import SessionHub

TIMEOUT_S = 10.0


def hub(**settings: Any) -> SessionHub:
    return SessionHub(
        Settings(executor="scripted", **settings), ScriptedExecutor(), WebRtcVadBackend()
    )


def test_seats_count_the_sessions_of_both_transports_up_to_the_limit() -> None:
    h = hub(max_sessions=2)
    first = h.admit(lambda: None)
    assert h.at_capacity() is None and not h.drained.is_set()
    second = h.admit(lambda: None)
    assert h.at_capacity() == "At capacity (2 sessions); try again later."
    h.release(first)
    assert h.sessions == 1 and h.at_capacity() is None and not h.drained.is_set()
    h.release(second)
    assert h.sessions == 0 and h.drained.is_set()


def test_a_call_not_in_progress_is_a_404() -> None:
    with pytest.raises(ApiError) as refused:
        hub().find_call("rtc_nope")
    assert (refused.value.status, refused.value.code) == (404, "call_not_found")


class _Stuck:
    """A session that neither drains nor ends: only its transport can cut it off."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def drain(self) -> None:
        self.told.append("drain")

    def end(self) -> None:
        self.told.append("end")


async def test_the_drain_drains_then_ends_then_cuts_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "END_GRACE_S", 0.01)
    h = hub(drain_timeout_s=0.01)
    stuck = _Stuck()
    seat = h.admit(lambda: h.release(seat), stuck)  # type: ignore[arg-type]
    await asyncio.wait_for(h.drain(), TIMEOUT_S)
    assert stuck.told == ["drain", "end"]
    assert h.draining and h.sessions == 0 and h.drained.is_set()


async def test_a_session_served_once_the_drain_began_ends_when_idle() -> None:
    h = hub()
    h.draining = True
    session = h.new_session("test")
    sent: list[str] = []

    async def write() -> None:
        while (event := await session.outbox.get()) is not None:
            sent.append(event.type)

    async def read() -> None:
        await asyncio.Event().wait()

    async with h.serving(session, write(), read(), label="test") as served:
        assert served.runner in served.done and served.failures() == []
        await asyncio.wait_for(served.last_events(), TIMEOUT_S)
        assert served.writer.done() and not served.reader.done()
    assert served.reader.cancelled()
    assert sent == ["session.created", "conversation.created"]
