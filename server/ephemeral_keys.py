"""Ephemeral keys (`ek_…`) that any worker and any replica can check on its own.

A key is signed, not stored: `ek_` + base64url(zlib(JSON payload)) + `.` +
base64url(HMAC-SHA256(secret, everything before the dot)). The payload carries
what the session it opens needs: its expiry, model, preset session and an id. So
every process given the same secret (`PARLEY_KEY_SECRET`) accepts the keys of
every other, and none keeps anything per key.

A key opens any number of sessions until it expires, as OpenAI documents for its
client secrets ("A secret can be used to create multiple sessions until it
expires"): one use only would need state shared by every process, and a cache
per process would be honest for one process only. Keep `expires_after` short
for keys handed to browsers.

Pure functions over an explicit secret and clock, tested directly
(tests/server/test_ephemeral_keys.py); server/auth.py wires them to settings.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import zlib
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from engine.protocol import SessionIn

EPHEMERAL_PREFIX = "ek_"
# Longest key, in characters. Browsers send it inside the Sec-WebSocket-Protocol
# header, and header lines are capped at 8 KiB by the websockets library (client
# and server) and by nginx's default buffers; this leaves room for the header's
# name and the other subprotocols offered beside it.
MAX_KEY_CHARS = 6 * 1024
_VERSION = 1
# A payload inflates to at most this: bounded work for any key, even one signed by
# a leaked secret.
_MAX_PAYLOAD_BYTES = 1024 * 1024


class PresetNotEncodable(ValueError):
    """The preset cannot be written into a key (too deep, a NaN, ...)."""


class KeyTooLarge(ValueError):
    """The key would exceed MAX_KEY_CHARS (`size` characters)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the key would be {size} characters, over {MAX_KEY_CHARS}")
        self.size = size


@dataclass(frozen=True)
class EphemeralKey:
    """What a valid key grants."""

    key_id: str  # for logs: a key is never logged, its id may be
    expires_at: int  # unix seconds
    model: str
    preset: SessionIn | None


def new_key_secret() -> str:
    """A random secret for a server given none (256 bits)."""
    return secrets.token_urlsafe(32)


def encode_preset(preset: SessionIn) -> dict[str, Any]:
    """The preset as JSON data, only the fields the client sent (so that `null` still
    means off). Serialized the way the session's events will be, so a preset too
    deep for those fails here, at minting. Raises PresetNotEncodable."""
    try:
        data = preset.model_dump(mode="json", exclude_unset=True)
        json.dumps(data, allow_nan=False)
    except (ValueError, RecursionError) as exc:
        raise PresetNotEncodable(str(exc)) from None
    return data


def mint(
    secret: bytes, *, key_id: str, expires_at: int, model: str, preset: SessionIn | None
) -> str:
    """A signed key. Raises PresetNotEncodable or KeyTooLarge."""
    payload = {
        "v": _VERSION,
        "id": key_id,
        "exp": expires_at,
        "model": model,
        "session": encode_preset(preset) if preset is not None else None,
    }
    raw = json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()
    signed = EPHEMERAL_PREFIX + _b64encode(zlib.compress(raw, 9))
    value = f"{signed}.{_signature(secret, signed)}"
    if len(value) > MAX_KEY_CHARS:
        raise KeyTooLarge(len(value))
    return value


def verify(secret: bytes, value: str, now: float) -> EphemeralKey | None:
    """What `value` grants, or None when it is malformed, signed with another
    secret, tampered with or expired. Only a correctly signed payload is inflated
    and parsed."""
    if len(value) > MAX_KEY_CHARS or not value.startswith(EPHEMERAL_PREFIX):
        return None
    signed, dot, signature = value.rpartition(".")
    if not dot:
        return None
    expected = _signature(secret, signed)
    # Constant time, so the timing tells a forger nothing about a signature's prefix.
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        return None
    payload = _payload(signed[len(EPHEMERAL_PREFIX) :])
    if payload is None:
        return None
    try:
        expires_at, model, key_id = payload["exp"], payload["model"], payload["id"]
        session = payload["session"]
        if not (isinstance(expires_at, int) and isinstance(model, str)):
            return None
        preset = SessionIn.model_validate(session) if session is not None else None
    except (KeyError, TypeError, ValidationError):
        # Signed by a build that writes keys differently (during a rolling deploy):
        # refused like any bad key, and the client mints a new one.
        return None
    if now >= expires_at:
        return None
    return EphemeralKey(str(key_id), expires_at, model, preset)


def _payload(encoded: str) -> dict[str, Any] | None:
    try:
        compressed = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        inflater = zlib.decompressobj()
        raw = inflater.decompress(compressed, _MAX_PAYLOAD_BYTES)
        if inflater.unconsumed_tail or not inflater.eof:
            return None
        payload = json.loads(raw)
    except (binascii.Error, zlib.error, ValueError, RecursionError):
        return None
    if not isinstance(payload, dict) or payload.get("v") != _VERSION:
        return None
    return payload


def _signature(secret: bytes, signed: str) -> str:
    return _b64encode(hmac.new(secret, signed.encode(), hashlib.sha256).digest())


def _b64encode(data: bytes) -> str:
    # base64url without padding: valid in a subprotocol token and a bearer token
    # (`=` is a separator in HTTP tokens).
    return base64.urlsafe_b64encode(data).decode().rstrip("=")
