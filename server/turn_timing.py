"""Turn latency by stage, from the observer's hooks (engine/observer.py).

A turn goes: end of speech (the append that ended it reached the server) →
committed → the model's first output for the response answering it → that
response's first audio delta on the wire. `TurnTimer` keeps the times it needs and
hands back each finished interval as a `Stage` and its seconds; it does not know
Prometheus (server/metrics.py records what it returns).

The hooks arrive in this order for a server_vad turn: committed, response_created,
speech_stopped (carrying the end of speech), first_model_chunk, first_audio_sent;
`response_done` may come before `first_audio_sent`, because the done event is queued
while the writer still has the audio to send. A manual commit has no end of speech,
so only its later stages are timed; a response that answers no commit is not a
turn and is not timed.

Everything is bounded: one entry per open session (dropped on `session_closed`) and
at most `MAX_PENDING` responses per session waiting for their audio (older ones are
forgotten: a cancelled response's audio never reaches the wire).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

# end of speech → committed; committed → first model output; first model output →
# first audio on the wire; end of speech → first audio on the wire (server_vad turns).
Stage = Literal["commit", "model", "audio", "total"]
STAGES: tuple[Stage, ...] = ("commit", "model", "audio", "total")

MAX_PENDING = 8
MAX_SESSIONS = 100_000  # past this many open sessions, new ones are not timed

Clock = Callable[[], float]
Observation = tuple[Stage, float]


@dataclass
class _Response:
    user_item: str
    committed: float
    end_of_speech: float | None = None
    first_output: float | None = None
    item_id: str = ""


@dataclass
class _Session:
    # The latest commit not yet taken by a response: (user item, when).
    commit: tuple[str, float] | None = None
    responses: OrderedDict[str, _Response] = field(default_factory=OrderedDict)


class TurnTimer:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._sessions: dict[str, _Session] = {}

    @property
    def tracked(self) -> int:
        """Sessions and responses held (for tests of the bounds)."""
        return len(self._sessions) + sum(len(s.responses) for s in self._sessions.values())

    def opened(self, session_id: str) -> None:
        if len(self._sessions) < MAX_SESSIONS:
            self._sessions[session_id] = _Session()

    def closed(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def committed(self, session_id: str, item_id: str) -> None:
        if (session := self._sessions.get(session_id)) is not None:
            session.commit = (item_id, self._clock())

    def response_created(self, session_id: str, response_id: str, item_id: str) -> None:
        session = self._sessions.get(session_id)
        if session is None or session.commit is None:
            return
        user_item, at = session.commit
        session.commit = None
        session.responses[response_id] = _Response(user_item, at, item_id=item_id)
        while len(session.responses) > MAX_PENDING:
            session.responses.popitem(last=False)

    def speech_stopped(
        self, session_id: str, item_id: str, frame_received: float | None
    ) -> list[Observation]:
        """The end of speech of a turn already committed (and maybe answered)."""
        if frame_received is None or (session := self._sessions.get(session_id)) is None:
            return []
        for response in session.responses.values():
            if response.user_item == item_id:
                response.end_of_speech = frame_received
        return [("commit", max(0.0, self._clock() - frame_received))]

    def first_model_chunk(self, session_id: str, response_id: str) -> list[Observation]:
        response = self._response(session_id, response_id)
        if response is None:
            return []
        response.first_output = self._clock()
        return [("model", max(0.0, response.first_output - response.committed))]

    def first_audio_sent(self, session_id: str, item_id: str) -> list[Observation]:
        session = self._sessions.get(session_id)
        if session is None:
            return []
        found_id = next((r for r, v in session.responses.items() if v.item_id == item_id), None)
        if found_id is None:
            return []
        response = session.responses.pop(found_id)
        if response.first_output is None:
            return []
        now = self._clock()
        stages: list[Observation] = [("audio", max(0.0, now - response.first_output))]
        if response.end_of_speech is not None:
            stages.append(("total", max(0.0, now - response.end_of_speech)))
        return stages

    def response_done(self, session_id: str, response_id: str) -> None:
        """A response that produced nothing will send no audio: forget it. One that
        did waits for its first audio (still in the outbox) or for eviction."""
        response = self._response(session_id, response_id)
        if response is not None and response.first_output is None:
            del self._sessions[session_id].responses[response_id]

    def _response(self, session_id: str, response_id: str) -> _Response | None:
        session = self._sessions.get(session_id)
        return None if session is None else session.responses.get(response_id)
