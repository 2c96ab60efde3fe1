"""The event ledger the session state machine checks with: each rule it enforces
fails on a stream that breaks it (tests/support/protocol_invariants.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.protocol_invariants import EventLedger

VAD = {"audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
NO_INTERRUPT = {
    "audio": {"input": {"turn_detection": {"type": "server_vad", "interrupt_response": False}}}
}


def created(rid: str, in_band: bool = True) -> dict[str, Any]:
    conversation = "conv_1" if in_band else None
    return {"type": "response.created", "response": {"id": rid, "conversation_id": conversation}}


def done(rid: str, reason: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"id": rid, "status": "completed"}
    if reason is not None:
        response |= {"status": "cancelled", "status_details": {"reason": reason}}
    return {"type": "response.done", "response": response}


def delta(rid: str) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "response_id": rid, "delta": "x"}


def vad_turn(item_id: str) -> list[dict[str, Any]]:
    return [
        {"type": "input_audio_buffer.speech_started", "item_id": item_id},
        {"type": "input_audio_buffer.speech_stopped", "item_id": item_id},
        {"type": "input_audio_buffer.committed", "item_id": item_id},
    ]


def feed(*events: dict[str, Any], session: dict[str, Any] | None = None) -> EventLedger:
    ledger = EventLedger()
    for event in [{"type": "session.created", "session": session or VAD}, *events]:
        ledger.feed(event)
    return ledger


def test_a_well_formed_stream_passes() -> None:
    ledger = feed(*vad_turn("a"), created("r1"), delta("r1"), done("r1"), created("r2", False))
    ledger.check_settled()
    assert ledger.open == ["r2"]
    assert ledger.out_of_band_open == ["r2"]


@pytest.mark.parametrize(
    "events",
    [
        [created("r1"), done("r1"), done("r1")],  # two response.done
        [created("r1"), done("r1"), delta("r1")],  # output after the end
        [delta("r9")],  # output of a response never created
        [created("r1"), created("r1", False)],  # created twice
        [created("r1"), created("r2")],  # two in-band responses at once
        [{"type": "error", "error": {"type": "server_error", "code": "internal_error"}}],
    ],
    ids=["double-done", "after-done", "unknown", "created-twice", "two-in-band", "internal"],
)
def test_a_broken_rule_is_caught(events: list[dict[str, Any]]) -> None:
    with pytest.raises(AssertionError):
        feed(*events)


def test_an_unanswered_vad_turn_is_caught_once_nothing_defers_it() -> None:
    feed(*vad_turn("a"), created("r1")).check_settled()  # answered
    feed(created("r1"), *vad_turn("a"), session=NO_INTERRUPT).check_settled()  # deferred
    barge_in = [
        {"type": "session.updated", "session": VAD},  # interrupt_response on again
        {"type": "input_audio_buffer.speech_started", "item_id": "b"},
        done("r1"),
    ]
    feed(created("r1"), *vad_turn("a"), *barge_in, session=NO_INTERRUPT).check_settled()
    with pytest.raises(AssertionError):
        feed(*vad_turn("a")).check_settled()
    with pytest.raises(AssertionError):
        feed(created("r1"), *vad_turn("a"), done("r1"), session=NO_INTERRUPT).check_settled()


def test_a_client_cancel_drops_a_deferred_answer_and_a_truncation_does_not() -> None:
    deferred = [created("r1"), *vad_turn("a")]
    cancel = done("r1", "client_cancelled")
    truncated = {"type": "conversation.item.truncated", "item_id": "i", "audio_end_ms": 0}
    feed(*deferred, cancel, session=NO_INTERRUPT).check_settled()  # response.cancel
    cleared = {"type": "output_audio_buffer.cleared", "response_id": "r1"}
    feed(*deferred, cancel, cleared, session=NO_INTERRUPT).check_settled()
    with pytest.raises(AssertionError):  # the deferred answer should have followed
        feed(*deferred, cancel, truncated, session=NO_INTERRUPT).check_settled()
