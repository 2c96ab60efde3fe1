"""Pure decisions over immutable snapshots of session state.

Each function here answers one question the session asks at a race-prone moment.
They take snapshots, not the session, so every case is a one-line unit test.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class PreparationView:
    """One tracked preparation (engine/prepare_chain.py) as seen at decision time."""

    response_bound: bool
    done: bool  # read from `task.done()` when the snapshot is taken, never cached


@dataclass(frozen=True)
class GateSnapshot:
    active_response: bool
    preparations: tuple[PreparationView, ...] = ()


def unfinished_response_bound(snapshot: GateSnapshot) -> int:
    return sum(1 for a in snapshot.preparations if a.response_bound and not a.done)


def response_gate_open(snapshot: GateSnapshot) -> bool:
    """A response's model request may start iff no other response is active and no
    response-bound preparation (a committed turn still being handed to the model) is
    still running.

    A preparation whose task has finished but whose done-callback has not yet removed it
    from the table (that runs one loop iteration later) must not hold the gate: the
    session may decide in between, and a closed gate then would leave the turn
    without a response (the race vLLM-Omni fixed in #9292).
    """
    return not snapshot.active_response and unfinished_response_bound(snapshot) == 0


class ResponseRequestAction(Enum):
    START = "start"  # announce now; the model starts once the gate opens
    DEFER = "defer"  # start when the active response ends
    REJECT = "reject"  # error: conversation_already_has_active_response


@dataclass(frozen=True)
class RequestSnapshot:
    active_response: bool
    from_client: bool  # response.create (True) or a server_vad commit (False)


def decide_response_request(s: RequestSnapshot) -> ResponseRequestAction:
    """What to do with a new request for a response.

    With none active, the response is announced at once (`response.created` right
    after the commit, as OpenAI does); its model request waits for the gate. A
    client's `response.create` during a response is refused, as OpenAI does. A VAD
    commit's automatic response is deferred instead: the turn deserves an answer
    once the current one ends (one deferred request covers every turn committed
    meanwhile).
    """
    if not s.active_response:
        return ResponseRequestAction.START
    if s.from_client:
        return ResponseRequestAction.REJECT
    return ResponseRequestAction.DEFER


@dataclass(frozen=True)
class SpeechStartSnapshot:
    interrupt_response: bool
    active_response: bool
    deferred_request: bool


class BargeIn(Enum):
    NONE = "none"  # nothing to interrupt, or interruption disabled
    CANCEL_ACTIVE = "cancel_active"  # cancel the running response, drop any deferred one
    DROP_DEFERRED = "drop_deferred"  # only a deferred request exists: drop it


def decide_barge_in(s: SpeechStartSnapshot) -> BargeIn:
    """What `speech_started` does to output in flight."""
    if not s.interrupt_response:
        return BargeIn.NONE
    if s.active_response:
        return BargeIn.CANCEL_ACTIVE
    if s.deferred_request:
        return BargeIn.DROP_DEFERRED
    return BargeIn.NONE
