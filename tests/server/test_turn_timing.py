"""Turn latency by stage from the observer's hooks, on a fake clock
(server/turn_timing.py)."""

from __future__ import annotations

import pytest

from server.turn_timing import MAX_PENDING, TurnTimer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def vad_turn(timer: TurnTimer, clock: Clock, n: int = 1) -> None:
    """Hooks of a server_vad turn up to its end of speech, in the engine's order: the
    turn is committed and answered, then speech_stopped carries the end of speech."""
    eos = clock.now
    clock.now += 0.002
    timer.committed("s", f"user{n}")
    timer.response_created("s", f"resp{n}", f"asst{n}")
    assert timer.speech_stopped("s", f"user{n}", eos) == [("commit", pytest.approx(0.002))]


def test_a_server_vad_turn_is_timed_at_every_stage() -> None:
    clock = Clock()
    timer = TurnTimer(clock)
    timer.opened("s")
    vad_turn(timer, clock)
    clock.now += 0.150
    assert timer.first_model_chunk("s", "resp1") == [("model", pytest.approx(0.150))]
    clock.now += 0.030
    assert timer.first_audio_sent("s", "asst1") == [
        ("audio", pytest.approx(0.030)),
        ("total", pytest.approx(0.182)),
    ]
    # Timed once: the item's later audio and the response's end add nothing.
    assert timer.first_audio_sent("s", "asst1") == []
    timer.response_done("s", "resp1")
    assert timer.tracked == 1  # the session alone


def test_response_done_before_its_first_audio_leaves_the_outbox() -> None:
    clock = Clock()
    timer = TurnTimer(clock)
    timer.opened("s")
    vad_turn(timer, clock)
    timer.first_model_chunk("s", "resp1")
    timer.response_done("s", "resp1")  # queued while its audio is still in the outbox
    clock.now += 0.010
    stages = [stage for stage, _ in timer.first_audio_sent("s", "asst1")]
    assert stages == ["audio", "total"]


def test_a_manual_commit_has_no_end_of_speech() -> None:
    clock = Clock()
    timer = TurnTimer(clock)
    timer.opened("s")
    timer.committed("s", "user1")
    clock.now += 0.5  # the client's response.create takes a while
    timer.response_created("s", "resp1", "asst1")
    assert timer.first_model_chunk("s", "resp1") == [("model", pytest.approx(0.5))]
    assert [stage for stage, _ in timer.first_audio_sent("s", "asst1")] == ["audio"]


def test_a_response_answering_no_commit_is_not_a_turn() -> None:
    timer = TurnTimer(Clock())
    timer.opened("s")
    timer.response_created("s", "resp1", "asst1")
    assert timer.first_model_chunk("s", "resp1") == []
    assert timer.first_audio_sent("s", "asst1") == []
    # A commit is answered once: a second response does not time it again.
    timer.committed("s", "user1")
    timer.response_created("s", "resp2", "asst2")
    timer.response_created("s", "resp3", "asst3")
    assert timer.first_model_chunk("s", "resp2") != []
    assert timer.first_model_chunk("s", "resp3") == []


def test_hooks_of_unknown_sessions_and_unstamped_frames_are_ignored() -> None:
    timer = TurnTimer(Clock())
    assert timer.speech_stopped("gone", "user1", 1.0) == []
    assert timer.first_model_chunk("gone", "resp1") == []
    assert timer.first_audio_sent("gone", "asst1") == []
    timer.response_done("gone", "resp1")
    timer.opened("s")
    assert timer.speech_stopped("s", "user1", None) == []


def test_what_is_kept_is_bounded_and_dropped_with_the_session() -> None:
    clock = Clock()
    timer = TurnTimer(clock)
    timer.opened("s")
    # Responses whose audio never reaches the wire (cancelled after their first chunk).
    for n in range(3 * MAX_PENDING):
        vad_turn(timer, clock, n)
        timer.first_model_chunk("s", f"resp{n}")
        timer.response_done("s", f"resp{n}")
    assert timer.tracked == 1 + MAX_PENDING
    timer.closed("s")
    assert timer.tracked == 0
    # A response that produced nothing is forgotten at its end.
    timer.opened("t")
    timer.committed("t", "user1")
    timer.response_created("t", "resp1", "asst1")
    timer.response_done("t", "resp1")
    assert timer.tracked == 1
