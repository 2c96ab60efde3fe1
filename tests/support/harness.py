"""Drive one Session in-process: send client JSON, collect server events, settle.

`settle()` lets the loop run (asyncio.sleep(0)) until the session is idle and every
event has been read; it never waits on the wall clock.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from engine.emitter import OutEvent
from engine.end_of_turn import EndOfTurnModel
from engine.interruption import HearingRecognizer
from engine.limits import EngineLimits
from engine.mcp.client import McpClient
from engine.observer import Observer
from engine.prompts import PromptLibrary
from engine.protocol import ProtocolError, parse_client_event
from engine.session import Session
from engine.transcription_session import SessionType
from engine.vad import VadBackend
from models.base import Executor
from models.listening.vad import WebRtcVadBackend
from models.scripted import ScriptedExecutor
from tests.support.sdk_check import assert_sdk_event

MAX_BYTES = 16 * 1024 * 1024


class Harness:
    def __init__(
        self,
        executor: Executor | None = None,
        vad: VadBackend | None = None,
        limits: EngineLimits | None = None,
        observer: Observer | None = None,
        end_of_turn: EndOfTurnModel | None = None,
        hearing: HearingRecognizer | None = None,
        clock: Callable[[], float] | None = None,
        mcp_client: McpClient | None = None,
        prompts: PromptLibrary | None = None,
        intent: SessionType | None = None,
    ) -> None:
        self.executor = executor if executor is not None else ScriptedExecutor()
        self.session = Session(
            self.executor,
            vad or WebRtcVadBackend(),
            model="test",
            limits=limits,
            observer=observer,
            end_of_turn=end_of_turn,
            hearing=hearing,
            mcp_client=mcp_client,
            prompts=prompts,
            intent=intent,
            **({} if clock is None else {"clock": clock}),
        )
        self.events: list[dict[str, Any]] = []
        self.out: list[OutEvent] = []  # the same events as the writer takes them
        self.max_bytes = MAX_BYTES
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def scripted(self) -> ScriptedExecutor:
        assert isinstance(self.executor, ScriptedExecutor)
        return self.executor

    async def update_audio(self, **audio: Any) -> None:
        """A GA session.update of the session's `audio` (input, output)."""
        await self.send({"type": "session.update", "session": {"type": "realtime", "audio": audio}})

    async def __aenter__(self) -> Harness:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.session.run()), loop.create_task(self._collect())]
        await self.settle()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.session.close()
        await asyncio.wait(self._tasks, timeout=5)
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception():
                raise task.exception()  # type: ignore[misc]

    async def _collect(self) -> None:
        while (event := await self.session.outbox.get()) is not None:
            raw = json.loads(event.text)
            assert_sdk_event(raw)
            self.events.append(raw)
            self.out.append(event)

    async def send(self, event: dict[str, Any]) -> None:
        try:
            parsed: Any = parse_client_event(json.dumps(event), self.max_bytes)
        except ProtocolError as exc:
            parsed = exc
        await self.session.submit(parsed)

    async def send_raw(self, text: str) -> None:
        try:
            parsed: Any = parse_client_event(text, self.max_bytes)
        except ProtocolError as exc:
            parsed = exc
        await self.session.submit(parsed)

    async def append(self, pcm: np.ndarray, **extra: Any) -> None:
        audio = base64.b64encode(pcm.astype("<i2").tobytes()).decode()
        await self.send({"type": "input_audio_buffer.append", "audio": audio, **extra})

    async def truncate(self, item_id: str, audio_end_ms: int, **extra: Any) -> None:
        """conversation.item.truncate of the item's first content part."""
        event = {"item_id": item_id, "content_index": 0, "audio_end_ms": audio_end_ms}
        await self.send({"type": "conversation.item.truncate", **event, **extra})

    async def settle(self, max_steps: int = 100_000) -> None:
        """Run the loop until nothing is queued or running and all output is read.

        Appends large enough to run VAD in a worker thread make the loop wait on
        that thread; those steps still finish without any timer of ours.
        """
        quiet = 0
        for _ in range(max_steps):
            await asyncio.sleep(0)
            if self.session.idle() and len(self.session.outbox) == 0:
                quiet += 1
                if quiet >= 5:  # a few extra turns for done-callbacks
                    return
            else:
                quiet = 0
        raise AssertionError("session did not settle")

    async def run_until(self, condition: Callable[[], bool], max_steps: int = 100_000) -> None:
        """Run the loop until `condition()` holds (bounded in steps, not time)."""
        for _ in range(max_steps):
            if condition():
                return
            await asyncio.sleep(0)
        raise AssertionError("condition never held")

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
        """For real models, whose work takes wall-clock time: poll `condition`, with
        `timeout_s` only as a safety net against a hang."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not condition():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"condition not met within {timeout_s} s")
            await asyncio.sleep(0.01)

    async def steps(self, n: int = 1) -> None:
        for _ in range(n):
            await asyncio.sleep(0)

    # --- reading what was sent -------------------------------------------------------

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def errors(self) -> list[dict[str, Any]]:
        return [e["error"] for e in self.of("error")]

    def responses_done(self) -> list[dict[str, Any]]:
        return [e["response"] for e in self.of("response.done")]

    def index(self, kind: str, **match: Any) -> int:
        """Position of the first event of `kind` whose fields include `match`."""
        for i, e in enumerate(self.events):
            if e["type"] == kind and all(_field(e, k) == v for k, v in match.items()):
                return i
        raise AssertionError(f"no {kind} with {match}")


def _field(event: dict[str, Any], dotted: str) -> Any:
    value: Any = event
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
