"""One in-process session driven step by step from synchronous code (a hypothesis
state machine), on an event loop of its own.

`step(coro)` runs a client action and then lets the loop run until nothing more can
happen without the test: no callback is ready and no timer is pending. The session
and its tasks then wait only on the client or on the `ControlledExecutor`, so each
step ends in the same state on every run, with no wall-clock wait.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any

from engine.limits import EngineLimits
from engine.protocol import ProtocolError, parse_client_event
from engine.session import Session
from models.listening.vad import WebRtcVadBackend
from tests.support.controlled_executor import ControlledExecutor
from tests.support.fake_hearing import FakeHearing
from tests.support.protocol_invariants import EventLedger
from tests.support.sdk_check import assert_sdk_event

MAX_BYTES = 16 * 1024 * 1024
MAX_LOOP_TURNS = 200_000  # a session still busy after this many is livelocked
SHUTDOWN_SAFETY_S = 10.0


class MachineClient:
    def __init__(self, loop: asyncio.AbstractEventLoop, limits: EngineLimits) -> None:
        self.loop = loop
        self.executor = ControlledExecutor()
        self.hearing = FakeHearing()  # hears held speech when a rule says so
        self.session = Session(
            self.executor, WebRtcVadBackend(), model="test", limits=limits, hearing=self.hearing
        )
        self.ledger = EventLedger()
        self.events: list[dict[str, Any]] = []
        self.fed = 0  # events handed to the ledger so far
        self.reading = asyncio.Event()
        self.reading.set()
        self.run_task = loop.create_task(self.session.run(), name="session")
        self.reader = loop.create_task(self._read(), name="reader")
        self.step(self._nothing())

    @staticmethod
    async def _nothing() -> None:
        pass

    async def _read(self) -> None:
        """The connection's writer, as a client reading every event (or not, paused)."""
        while True:
            await self.reading.wait()
            event = await self.session.outbox.get()
            if event is None:
                return
            raw = json.loads(event.text)
            assert_sdk_event(raw)
            self.events.append(raw)

    # --- acting ----------------------------------------------------------------------

    def step(self, action: Coroutine[Any, Any, None]) -> list[dict[str, Any]]:
        """Run `action`, settle, feed the new events to the ledger and return them."""
        self.loop.run_until_complete(self._then_settle(action))
        new = self.events[self.fed :]
        for event in new:
            self.ledger.feed(event)
        self.fed = len(self.events)
        return new

    async def _then_settle(self, action: Coroutine[Any, Any, None]) -> None:
        await action
        await settle()

    async def send(self, event: dict[str, Any]) -> None:
        try:
            parsed: Any = parse_client_event(json.dumps(event), MAX_BYTES)
        except ProtocolError as exc:
            parsed = exc
        await self.session.submit(parsed)

    def disconnect(self) -> None:
        """The connection is gone: the server closes the session and stops reading."""
        self.session.close()
        self.reading.set()
        # The timeout is a safety net against a hung shutdown, not a pace.
        tasks = [self.run_task, self.reader]
        self.loop.run_until_complete(asyncio.wait(tasks, timeout=SHUTDOWN_SAFETY_S))
        assert self.run_task.done(), "the session did not shut down"
        self.step(self._nothing())

    @property
    def ended(self) -> bool:
        return self.run_task.done()


async def settle() -> None:
    """Let every task run until all of them wait on something only the test can give.

    Reads the loop's ready queue (`_ready`, private to asyncio's base loop): once our
    own turn comes round with nothing else ready, nothing can run until we act. A timer
    still pending would mean the session waits on the clock, which no step may do.
    """
    loop = asyncio.get_running_loop()
    quiet = 0
    for _ in range(MAX_LOOP_TURNS):
        await asyncio.sleep(0)
        if loop._ready:  # type: ignore[attr-defined]
            quiet = 0
            continue
        quiet += 1
        if quiet >= 2:
            timers = [t for t in loop._scheduled if not t.cancelled()]  # type: ignore[attr-defined]
            assert not timers, f"the session waits on the clock: {timers}"
            return
    raise AssertionError("the session never settled (livelock)")
