"""Call ids that name the replica holding the call, so that a call's sideband,
hang-up and DELETE reach it through any load balancer (docs/deploy.md, "WebRTC
calls across replicas").

With PARLEY_REPLICA_URL set, a call id is `rtc_` + base64url(nonce + AES-256-GCM of
the replica's URL) under a key derived from PARLEY_KEY_SECRET, which every replica
shares: any replica opens an id and learns where its call lives, and nobody without
the secret can write one. So the address in an id that opens was written by a
replica, never chosen by a client (the boundary that keeps clients from aiming the
server at the operator's network), and the browser that sees the id learns nothing
of the internal address. Without the setting ids are `rtc_` + 24 hex digits, as a
single server's always were.

Pure functions over an explicit secret, tested directly
(tests/server/test_call_routes.py); server/call_forward.py does the forwarding.
"""

from __future__ import annotations

import binascii
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidTag

from server.sealing import NONCE_BYTES, b64decode, b64encode, cipher

CALL_PREFIX = "rtc_"
# A replica sets it on what it forwards: a request that carries it is answered
# where it lands, never forwarded again, so a stale or misconfigured address cannot
# make replicas forward in a loop. It needs no signature: all it can do is stop a
# forward, so a client that sends it only gets 404 for calls held elsewhere.
FORWARDED_HEADER = "parley-forwarded"
# Longer ids are not opened (a replica URL is short).
MAX_CALL_ID_CHARS = 512
_HKDF_INFO = b"parley call route v1: AES-256-GCM"


def plain_call_id() -> str:
    """A call id of a server with no replicas (96 random bits)."""
    return CALL_PREFIX + secrets.token_hex(12)


def replica_url(value: str) -> str:
    """A replica's base URL as ids carry it (`http://host[:port]`, no path), or
    ValueError naming the rule. Parley serves plain HTTP: replicas reach each other
    as the balancer reaches them (TLS, if any, is a mesh's, below the URL)."""
    parts = urlsplit(value.strip())
    try:  # reading the port raises for one that does not parse (unbracketed IPv6)
        parts.port  # noqa: B018
    except ValueError:
        raise ValueError("the replica URL must be http://host[:port], with a valid port") from None
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError("the replica URL must be http://host[:port]")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError("the replica URL must be http://host[:port], with no path")
    return f"http://{parts.netloc}"


@dataclass(frozen=True)
class CallRoutes:
    """Mints this replica's call ids (`own_url`, a `replica_url`) and reads the
    replica any id names, under the secret all replicas share."""

    secret: bytes
    own_url: str

    def mint(self) -> str:
        nonce = secrets.token_bytes(NONCE_BYTES)  # also the id's randomness
        sealed = cipher(self.secret, _HKDF_INFO).encrypt(nonce, self.own_url.encode(), None)
        return CALL_PREFIX + b64encode(nonce + sealed)

    def holder(self, call_id: str) -> str | None:
        """The URL of the replica that minted `call_id`, or None when the id is not
        one a replica sealed with this secret (malformed, forged, tampered with)."""
        if len(call_id) > MAX_CALL_ID_CHARS or not call_id.startswith(CALL_PREFIX):
            return None
        try:
            sealed = b64decode(call_id[len(CALL_PREFIX) :])
            nonce, ciphertext = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
            # The tag is checked in constant time before anything is read.
            url = cipher(self.secret, _HKDF_INFO).decrypt(nonce, ciphertext, None).decode()
            return replica_url(url)
        except (binascii.Error, InvalidTag, ValueError):
            return None


def forward_to(
    routes: CallRoutes | None, call_id: str, *, held: bool, forwarded: bool
) -> str | None:
    """Where a request for `call_id` goes instead of being answered here (None:
    here, with the call or with 404). A call held here, a request already forwarded,
    an id no replica sealed and one naming this replica are all answered here."""
    if routes is None or held or forwarded:
        return None
    holder = routes.holder(call_id)
    return None if holder is None or holder == routes.own_url else holder
