"""Sessions as the shared models' fair queues see them (models/listening/fair_pool.py):
a context whose CALLER is the session, as a session's task has."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable

from models.listening.fair_pool import CALLER


def session_context(session_id: str) -> contextvars.Context:
    """The context of a session's task (engine/session.py sets CALLER in `run`)."""
    context = contextvars.copy_context()
    context.run(CALLER.set, session_id)
    return context


async def until(condition: Callable[[], bool]) -> None:
    """Until `condition` holds (work handed to threads has come back)."""
    for _ in range(5000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("never")
