"""Resume tokens (server/resume_tokens.py): good once, for the same key, within the
window; detached sessions bounded."""

from __future__ import annotations

from server.resume_tokens import Claimed, Refused, ResumeTokens
from tests.support.clock import FakeClock


def test_a_detached_session_is_claimed_once_with_its_key_within_the_window() -> None:
    clock = FakeClock()
    tokens = ResumeTokens(window_s=30, clock=clock)
    token = tokens.issue("sess_1", owner="key_a")
    assert tokens.detach("sess_1") == []
    clock.t += 29
    assert tokens.claim(token, "key_b") == Refused("wrong_key")
    assert tokens.claim(token, "key_a") == Claimed("sess_1")
    assert tokens.claim(token, "key_a") == Refused("unknown_token")  # spent
    assert tokens.detached == 0


def test_a_session_still_attached_is_taken_over_by_its_token_and_key() -> None:
    """The client reconnected before the server saw its old connection die."""
    tokens = ResumeTokens(clock=FakeClock())
    token = tokens.issue("sess_1", owner="key_a")
    assert tokens.claim(token, "key_b") == Refused("wrong_key")
    assert tokens.claim(token, "key_a") == Claimed("sess_1", attached=True)
    assert tokens.claim(token, "key_a") == Refused("unknown_token")


def test_a_token_past_its_window_is_refused_and_the_session_expires() -> None:
    clock = FakeClock()
    tokens = ResumeTokens(window_s=30, clock=clock)
    token = tokens.issue("sess_1", owner="key_a")
    tokens.detach("sess_1")
    clock.t += 31
    assert tokens.expired() == ["sess_1"]  # the server closes it
    assert tokens.claim(token, "key_a") == Refused("unknown_token")

    late = tokens.issue("sess_2", owner="key_a")
    tokens.detach("sess_2")
    clock.t += 31
    assert tokens.claim(late, "key_a") == Refused("expired")  # claimed before the sweep


def test_a_new_token_voids_the_one_before() -> None:
    tokens = ResumeTokens(clock=FakeClock())
    first = tokens.issue("sess_1", owner="k")
    second = tokens.issue("sess_1", owner="k")  # the resumed session's new token
    tokens.detach("sess_1")
    assert tokens.claim(first, "k") == Refused("unknown_token")
    assert tokens.claim(second, "k") == Claimed("sess_1")


def test_detached_sessions_are_bounded_oldest_first() -> None:
    clock = FakeClock()
    tokens = ResumeTokens(max_detached=2, clock=clock)
    kept = {s: tokens.issue(s, owner="k") for s in ("s1", "s2", "s3")}
    assert tokens.detach("s1") == [] and tokens.detach("s2") == []
    assert tokens.detach("s3") == ["s1"]  # closed at once
    assert tokens.detached == 2
    assert tokens.claim(kept["s1"], "k") == Refused("unknown_token")
    assert tokens.claim(kept["s3"], "k") == Claimed("s3")


def test_a_token_is_kept_only_as_its_hash() -> None:
    tokens = ResumeTokens(clock=FakeClock())
    token = tokens.issue("sess_1", owner="k")
    assert token.startswith("rt_") and len(token) > 40
    assert token not in repr(tokens.__dict__)
