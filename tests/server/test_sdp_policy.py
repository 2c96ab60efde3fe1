"""What a call's offer may hold (server/sdp_policy.py), on SDP texts: its media
sections, and the remote candidates Parley will send ICE checks to."""

from __future__ import annotations

import ipaddress

import pytest

from server.sdp_policy import CandidateRules, layout_problem, screen_candidates, unusable

AUDIO = "m=audio 9 UDP/TLS/RTP/SAVPF 111"
DATA = "m=application 9 UDP/DTLS/SCTP webrtc-datachannel"
VIDEO = "m=video 9 UDP/TLS/RTP/SAVPF 96"


def offer(*sections: str, candidates: tuple[str, ...] = (), end: str = "\r\n") -> str:
    """An offer with these `m=` lines, each section listing `candidates`."""
    lines = ["v=0", "o=- 1 2 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0 1"]
    for section in sections:
        lines += [section, "c=IN IP4 0.0.0.0", "a=ice-ufrag:abcd"]
        lines += [f"a=candidate:{c}" for c in candidates]
        lines.append("a=end-of-candidates")
    return end.join(lines) + end


def host(address: str, port: int = 50000, transport: str = "udp") -> str:
    return f"1 1 {transport} 2122260223 {address} {port} typ host"


@pytest.mark.parametrize(
    "sections",
    [(AUDIO,), (AUDIO, DATA), (DATA, AUDIO), (AUDIO, "m=application 0 DTLS/SCTP 5000")],
)
def test_one_audio_section_and_at_most_one_data_channel_make_a_call(
    sections: tuple[str, ...],
) -> None:
    assert layout_problem(offer(*sections)) is None


@pytest.mark.parametrize(
    ("sections", "found"),
    [
        ((), "none"),
        ((DATA,), "1 data"),
        ((AUDIO, AUDIO), "2 audio"),
        ((AUDIO, VIDEO), "1 audio, 1 video"),
        ((AUDIO, DATA, VIDEO), "1 audio, 1 data, 1 video"),
        ((AUDIO, DATA, DATA), "1 audio, 2 data"),
        ((AUDIO, "m=application 9 UDP/BFCP *"), "1 audio, 1 non-SCTP application"),
        ((AUDIO, "m=text 9 RTP/AVP 98"), "1 audio, 1 text"),
        ((AUDIO,) * 40 + (VIDEO,) * 40 + (DATA,), "40 audio, 40 video, 1 data"),
    ],
)
def test_any_other_layout_is_refused_saying_what_it_holds(
    sections: tuple[str, ...], found: str
) -> None:
    problem = layout_problem(offer(*sections))
    assert problem is not None
    assert "exactly one audio section and at most one data channel" in problem
    assert problem.endswith(f"media sections: {found}.")


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("192.0.2.2", None),
        ("10.1.2.3", None),  # a caller on the operator's LAN
        ("2001:db8::5", None),
        ("fd00::2", None),
        ("::ffff:198.51.100.7", None),
        ("5f0c3c43-2e0d-4b8f-9c1a-7d2e3f4a5b6c.local", None),  # a browser's mDNS name
        ("127.0.0.1", "loopback, link-local or reserved"),
        ("127.8.9.10", "loopback, link-local or reserved"),
        ("::1", "loopback, link-local or reserved"),
        ("::ffff:127.0.0.1", "loopback, link-local or reserved"),
        ("169.254.169.254", "loopback, link-local or reserved"),  # cloud metadata
        ("fe80::1", "loopback, link-local or reserved"),
        ("fe80::1%eth0", "loopback, link-local or reserved"),
        ("0.0.0.0", "loopback, link-local or reserved"),
        ("::", "loopback, link-local or reserved"),
        ("224.0.0.251", "loopback, link-local or reserved"),
        ("ff02::1", "loopback, link-local or reserved"),
        ("255.255.255.255", "loopback, link-local or reserved"),
        ("240.0.0.1", "loopback, link-local or reserved"),
        ("metadata.google.internal", "not an address"),
        ("localhost", "not an address"),
    ],
)
def test_a_candidate_is_checked_only_at_an_address_that_reaches_a_caller(
    address: str, why: str | None
) -> None:
    assert unusable(host(address).split()) == why


def test_unreadable_candidates_are_dropped() -> None:
    assert unusable("1 1 udp 2122260223 192.0.2.2".split()) == "unreadable"
    assert unusable("1 1 udp 2122260223 192.0.2.2 port typ host".split()) == "unreadable"


@pytest.mark.parametrize("address", ["127.0.0.1", "::ffff:127.0.0.1", "::1"])
def test_the_operator_may_allow_a_refused_range(address: str) -> None:
    allowed = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
    assert unusable(host(address).split(), allowed) is None
    assert unusable(host("169.254.169.254").split(), allowed) is not None


def test_an_offer_keeps_its_first_distinct_addresses_up_to_the_cap() -> None:
    forty = tuple(host("192.0.2.2", 40000 + i) for i in range(40))
    sdp = offer(AUDIO, DATA, candidates=forty)
    screened = screen_candidates(sdp, CandidateRules(max_addresses=16))
    kept = [line for line in screened.sdp.splitlines() if line.startswith("a=candidate:")]
    # Bundled sections list the same addresses: each counts once, in both sections.
    assert kept == [f"a=candidate:{c}" for c in forty[:16]] * 2
    assert screened.dropped == {"more than 16 addresses": 48}
    # Everything else is as it was.
    rest = [line for line in sdp.splitlines() if not line.startswith("a=candidate:")]
    assert [line for line in screened.sdp.splitlines() if line not in kept] == rest


def test_a_port_on_another_transport_or_address_is_another_address() -> None:
    candidates = (
        host("192.0.2.2", 1),
        host("192.0.2.2", 1, "tcp"),
        host("192.0.2.3", 1),
        host("192.0.2.2", 2),
    )
    screened = screen_candidates(offer(AUDIO, candidates=candidates), CandidateRules(3))
    assert screened.dropped == {"more than 3 addresses": 1}
    assert host("192.0.2.2", 2) not in screened.sdp


def test_refused_addresses_go_and_take_no_place_under_the_cap() -> None:
    candidates = (host("127.0.0.1", 6379), host("169.254.169.254", 80), host("192.0.2.2"))
    for end in ("\r\n", "\n"):
        sdp = offer(AUDIO, candidates=candidates, end=end)
        screened = screen_candidates(sdp, CandidateRules(max_addresses=1))
        assert screened.sdp == sdp.replace(
            f"a=candidate:{candidates[0]}{end}a=candidate:{candidates[1]}{end}", ""
        )
        assert screened.dropped == {"loopback, link-local or reserved": 2}


def test_an_offer_without_candidates_is_left_as_it_is() -> None:
    sdp = offer(AUDIO, DATA)
    assert screen_candidates(sdp, CandidateRules()).sdp == sdp
