"""What a call's SDP offer may hold, decided on its text before aiortc reads it.

Layout: a call is one voice and its events. The offer has exactly one audio section
and at most one data channel (`m=application` over SCTP); video, more audio or any
other media is refused (HTTP 400) before anything is set up: aiortc would answer every
section and start a receiver for each.

Remote ICE candidates: Parley sends connectivity checks (STUN binding requests, with
retries) to every address the offer lists, so without rules the client aims them.
Kept: mDNS names (`<uuid>.local`, what browsers list to hide their addresses; aioice
resolves them by multicast DNS on the local link) and addresses that are not
loopback, link-local, unspecified, multicast or reserved (an IPv4-mapped IPv6 address
counts as its IPv4 address), unless an allowed network holds them; of those, the
first `max_addresses` distinct transport addresses. Dropped: the rest, names that are
not addresses (aioice ignores them, it does no DNS), and lines that cannot be read.
Private addresses are kept: callers on the operator's LAN are the common case.

There is no trickle: Parley takes no candidate after the offer (OpenAI's API has no
way to send one), so the offer's are all there are. Peer-reflexive candidates are
learned only from checks the peer really sent, and answer where they came from.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from dataclasses import dataclass, field

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

CANDIDATE = "a=candidate:"
# RFC 8839: `foundation component transport priority address port typ type ...`.
CANDIDATE_FIELDS = 8
# aioice's own test for an mDNS name (aioice.mdns.MDNS_HOSTNAME_RE).
MDNS_NAME = re.compile(r"^[a-zA-Z0-9-]{1,63}\.local$")


def layout_problem(sdp: str) -> str | None:
    """Why the offer's media sections are not a call's (one audio section, at most
    one SCTP data channel), or None when they are."""
    kinds = [_kind(line[2:].split()) for line in sdp.splitlines() if line.startswith("m=")]
    if kinds.count("audio") == 1 and set(kinds) <= {"audio", "data"} and kinds.count("data") <= 1:
        return None
    counts = Counter(kinds)
    found = ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "none"
    return (
        "A call's offer has exactly one audio section and at most one data channel "
        f"(m=application over SCTP); this one's media sections: {found}."
    )


def _kind(fields: list[str]) -> str:
    """What an `m=` line's fields (`media port proto fmt...`) offer."""
    media = fields[0] if fields else "?"
    if media == "application":
        return "data" if len(fields) > 2 and "SCTP" in fields[2].upper() else "non-SCTP application"
    return media


@dataclass(frozen=True)
class CandidateRules:
    max_addresses: int = 16
    # Networks whose addresses are kept even in the ranges refused by default.
    allowed_networks: tuple[IPNetwork, ...] = ()


@dataclass(frozen=True)
class Screened:
    sdp: str  # the offer with only the candidates kept
    dropped: dict[str, int] = field(default_factory=dict)  # why -> how many


def screen_candidates(sdp: str, rules: CandidateRules) -> Screened:
    """The offer with only the remote candidates `rules` keep (module docstring)."""
    kept: list[str] = []
    addresses: set[tuple[str, str, str]] = set()  # (transport, address, port)
    dropped: Counter[str] = Counter()
    for line in sdp.splitlines(keepends=True):
        if line.startswith(CANDIDATE):
            why = _refusal(line[len(CANDIDATE) :].split(), rules, addresses)
            if why is not None:
                dropped[why] += 1
                continue
        kept.append(line)
    return Screened("".join(kept), dict(dropped))


def _refusal(
    fields: list[str], rules: CandidateRules, addresses: set[tuple[str, str, str]]
) -> str | None:
    """Why a candidate is dropped, or None: then its address is one of `addresses`
    (the distinct addresses kept so far, which this adds to)."""
    why = unusable(fields, rules.allowed_networks)
    if why is not None:
        return why
    address = (fields[2].lower(), fields[4].lower(), fields[5])
    if address not in addresses:
        if len(addresses) >= rules.max_addresses:
            return f"more than {rules.max_addresses} addresses"
        addresses.add(address)
    return None


def unusable(fields: list[str], allowed: tuple[IPNetwork, ...] = ()) -> str | None:
    """Why a candidate (the fields after `a=candidate:`) is not one to check, or None."""
    if len(fields) < CANDIDATE_FIELDS or not fields[5].isdigit():
        return "unreadable"
    host = fields[4]
    if MDNS_NAME.match(host):
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "not an address"
    return None if address_allowed(address, allowed) else "loopback, link-local or reserved"


def address_allowed(address: IPAddress, allowed: tuple[IPNetwork, ...] = ()) -> bool:
    """Whether Parley may send checks to `address`: in an allowed network, or in
    none of the ranges that reach this host or its link rather than a caller."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in allowed):
        return True
    return not (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
        or address.is_reserved
    )
