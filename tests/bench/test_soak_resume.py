"""The soak's resumable users (bench/soak/actor.py): a dropped session is taken back
with its token and last event, a refused resume is counted and replaced by a new
session, against a real server."""

from __future__ import annotations

import time

from bench.soak.actor import Actor, Comeback
from bench.soak.audio import Audio
from bench.soak.tally import Tally
from bench.soak.wire import Conn
from tests.support.servers import ServerFactory


async def test_a_resumable_user_takes_its_dropped_session_back(serve: ServerFactory) -> None:
    server = await serve()
    tally = Tally()
    actor = Actor(0, server.ws_url, Audio.build(), tally, 1, time.monotonic() + 60)
    assert actor.resumable
    first = await actor.connect()
    assert await first.until(lambda: first.resume_token is not None, 10)
    await first.until(lambda: first.count("conversation.created") == 1, 10)
    token, last = first.resume_token, first.last_event_id
    assert token is not None and last is not None
    await first.abort()

    actor.comeback = Comeback(token, last, first.responses)
    back = await actor.connect()
    assert tally.resumes == {"resumed": 1}
    assert back.responses is first.responses  # what ran on the session is still known
    assert await back.until(lambda: back.resume_token not in (None, token), 10)
    assert back.count("session.created") == 0  # the same session, nothing replayed twice
    await back.close()

    actor.comeback = Comeback(token, last, {})  # spent: refused, and a new session instead
    fresh: Conn = await actor.connect()
    assert tally.resumes == {"resumed": 1, "resume_token_invalid": 1}
    assert await fresh.until(lambda: fresh.count("session.created") == 1, 10)
    await fresh.close()
