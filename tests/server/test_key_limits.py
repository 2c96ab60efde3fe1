"""Per-key limits (server/key_limits.py): who a session counts against, the token
bucket that paces new sessions, and sessions open per client, on a fake clock."""

from __future__ import annotations

import pytest

from server.ephemeral_keys import EphemeralKey
from server.key_limits import PRUNE_EVERY_S, Bucket, KeyLimits, client_of

EPHEMERAL = EphemeralKey("a1b2c3", 1_700_000_060, "m", None)


def test_a_session_counts_against_its_key_or_on_an_open_server_its_address() -> None:
    api = client_of("sk-secret-key", None, open_server=False, address="10.0.0.1")
    assert api.startswith("key:") and "sk-secret-key" not in api  # a hash, never the key
    assert api == client_of("sk-secret-key", None, open_server=False, address="10.0.0.2")
    assert api != client_of("sk-other-key", None, open_server=False, address="10.0.0.1")
    assert client_of("ek_x", EPHEMERAL, open_server=False, address="10.0.0.1") == "ek:a1b2c3"
    # On an open server anyone mints keys: the address is what a client cannot change.
    assert client_of("ek_x", EPHEMERAL, open_server=True, address="10.0.0.1") == "addr:10.0.0.1"
    assert client_of(None, None, open_server=True, address=None) == "addr:unknown"


def test_a_bucket_allows_its_burst_then_its_rate() -> None:
    bucket = Bucket.full(capacity=3, rate_per_s=0.5, now=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_s(0.0) == pytest.approx(2.0)
    assert not bucket.take(1.9)
    assert bucket.take(2.0)  # one token every 2 s
    assert not bucket.take(2.0)
    # Idle for long, it refills to its capacity, no further.
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]
    # A clock that steps back adds nothing.
    assert not bucket.take(50.0)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_sessions_open_per_client_are_capped() -> None:
    limits = KeyLimits(max_open=2, per_minute=0, burst=1, now=Clock())
    assert limits.open("key:a") is None
    assert limits.open("key:a") is None
    refused = limits.open("key:a")
    assert refused is not None and refused.reason == "key_sessions_open"
    assert "Too many sessions open" in refused.message
    assert limits.held("key:a") == 2  # the refused one is not counted
    assert limits.open("key:b") is None  # another client is unaffected
    limits.close("key:a")
    assert limits.open("key:a") is None


def test_new_sessions_per_client_are_paced() -> None:
    clock = Clock()
    limits = KeyLimits(max_open=None, per_minute=60, burst=2, now=clock)
    assert limits.open("key:a") is None
    assert limits.open("key:a") is None
    refused = limits.open("key:a")
    assert refused is not None and refused.reason == "key_new_sessions_rate"
    assert "60 a minute" in refused.message and "1.0 s" in refused.message
    assert limits.open("key:b") is None
    clock.t += 1.0
    assert limits.open("key:a") is None
    assert limits.open("key:a") is not None
    # Closing a session gives back no token: the rate counts sessions opened.
    limits.close("key:a")
    assert limits.open("key:a") is not None


def test_no_pacing_when_the_rate_is_zero() -> None:
    limits = KeyLimits(max_open=None, per_minute=0, burst=1, now=Clock())
    assert all(limits.open("addr:127.0.0.1") is None for _ in range(1000))


def test_idle_clients_are_forgotten() -> None:
    clock = Clock()
    limits = KeyLimits(max_open=None, per_minute=60, burst=5, now=clock)
    for n in range(500):
        assert limits.open(f"addr:{n}") is None
        limits.close(f"addr:{n}")
    assert limits.open("addr:held") is None  # still open when the others are forgotten
    assert limits.clients == 501
    clock.t += PRUNE_EVERY_S  # every bucket is full again
    assert limits.open("addr:new") is None
    assert limits.clients == 2  # the one still open, and the new one
    assert limits.held("addr:held") == 1
