"""Call ids that name their replica (server/call_routes.py), and where a request for
a call goes: pure, with explicit secrets."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from server.call_forward import forwarder_of, sendable
from server.call_routes import (
    MAX_CALL_ID_CHARS,
    CallRoutes,
    forward_to,
    plain_call_id,
    replica_url,
)
from server.config import Settings

SECRET = b"a-shared-secret-of-at-least-32-chars!"
A, B = "http://parley-replica-1:8000", "http://10.0.3.7:8000"
URL_SAFE = re.compile(r"^rtc_[A-Za-z0-9_-]+$")


def test_an_id_names_the_replica_that_minted_it_and_is_short_and_url_safe() -> None:
    routes = CallRoutes(SECRET, A)
    ids = {routes.mint() for _ in range(100)}
    assert len(ids) == 100  # random as a plain id is
    for call_id in ids:
        assert URL_SAFE.match(call_id) and len(call_id) < 90
        assert A.encode() not in call_id.encode()  # the address is sealed, not shown
        assert CallRoutes(SECRET, B).holder(call_id) == A  # any replica reads it


def flipped(call_id: str, at: int) -> str:
    swap = "A" if call_id[at] != "A" else "B"
    return call_id[:at] + swap + call_id[at + 1 :]


def test_an_id_not_sealed_with_the_shared_secret_names_no_replica() -> None:
    routes = CallRoutes(SECRET, A)
    call_id = routes.mint()
    other = CallRoutes(b"another-secret-of-at-least-32-chars!", A)
    assert other.holder(call_id) is None
    assert routes.holder(other.mint()) is None
    # Every character counts (the last one's spare bits aside).
    for at in range(len("rtc_"), len(call_id) - 1):
        assert routes.holder(flipped(call_id, at)) is None
    junk = [plain_call_id(), "rtc_", "rtc_!!", "", call_id[4:], call_id[:-8], "rtc_" + "A" * 600]
    assert [routes.holder(j) for j in junk] == [None] * len(junk)


def test_a_request_is_forwarded_only_for_a_sealed_id_naming_another_replica() -> None:
    here = CallRoutes(SECRET, A)
    theirs = CallRoutes(SECRET, B).mint()
    assert forward_to(here, theirs, held=False, forwarded=False) == B
    # Answered here: a call held here, a request already forwarded (no loops), an
    # id naming this replica, an id no replica sealed, a single server.
    assert forward_to(here, theirs, held=True, forwarded=False) is None
    assert forward_to(here, theirs, held=False, forwarded=True) is None
    assert forward_to(here, here.mint(), held=False, forwarded=False) is None
    assert forward_to(here, flipped(theirs, 10), held=False, forwarded=False) is None
    assert forward_to(None, theirs, held=False, forwarded=False) is None


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("http://10.0.3.7:8000/", "http://10.0.3.7:8000"),
        (" http://parley-2.internal ", "http://parley-2.internal"),
        ("http://[fd00::7]:8000", "http://[fd00::7]:8000"),
    ],
)
def test_a_replica_url_is_kept_as_scheme_host_and_port(given: str, kept: str) -> None:
    assert replica_url(given) == kept


@pytest.mark.parametrize(
    "given",
    [
        "10.0.3.7:8000",
        "https://h",
        "ftp://h",
        "http://",
        "http://h/v1",
        "http://h?x=1",
        "http://u:p@h",
        "http://fd00::7:8000",  # an IPv6 address needs brackets
        "http://h:99999",
    ],
)
def test_a_replica_url_with_more_or_less_than_an_origin_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="http"):
        replica_url(given)


def test_without_a_replica_url_ids_and_behaviour_are_a_single_servers() -> None:
    assert forwarder_of(Settings(key_secret="s" * 32)) is None
    assert re.fullmatch(r"rtc_[0-9a-f]{24}", plain_call_id())
    assert Settings(replica_url="").replica_url is None
    forwarder = forwarder_of(Settings(key_secret="s" * 32, replica_url=A + "/"))
    assert forwarder is not None and forwarder.routes.own_url == A
    assert len(forwarder.routes.mint()) < MAX_CALL_ID_CHARS


def test_a_replica_url_needs_the_shared_secret() -> None:
    with pytest.raises(ValidationError, match="PARLEY_KEY_SECRET"):
        Settings(replica_url=A)


@pytest.mark.parametrize(("code", "sent"), [(1000, 1000), (4001, 4001), (1005, 1000), (1006, 1000)])
def test_a_close_code_that_cannot_be_sent_passes_on_as_normal(code: int, sent: int) -> None:
    assert sendable(code) == sent
