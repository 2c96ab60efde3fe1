"""Ephemeral keys (`ek_…`) that any worker and any replica can check on its own.

A key is sealed, not stored: `ek_` + base64url(nonce + AEAD ciphertext). The
plaintext, a compressed JSON payload, carries what the session it opens needs: its
expiry, model, preset session and an id. It is encrypted and authenticated with
AES-256-GCM under a key derived from the key secret (`PARLEY_KEY_SECRET`, HKDF), so
the browser that holds the key reads nothing of the preset (instructions, MCP
tokens and headers) and cannot change a byte of it; every process given the same
secret opens the keys of every other.

How often a key opens a session is not the key's to say: server/key_uses.py
records the ids of keys used (once each by default, PARLEY_EPHEMERAL_KEY_USES).

Pure functions over an explicit secret and clock, tested directly
(tests/server/test_ephemeral_keys.py); server/auth.py wires them to settings.
"""

from __future__ import annotations

import binascii
import json
import secrets
import zlib
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import ValidationError

from engine.protocol import SessionIn
from server.sealing import NONCE_BYTES, b64decode, b64encode, cipher

EPHEMERAL_PREFIX = "ek_"
# Longest key, in characters. Browsers send it inside the Sec-WebSocket-Protocol
# header, and header lines are capped at 8 KiB by the websockets library (client
# and server) and by nginx's default buffers; this leaves room for the header's
# name and the other subprotocols offered beside it.
MAX_KEY_CHARS = 6 * 1024
# 1: signed, readable (zlib + HMAC); 2: encrypted. A key of another version is
# refused like any invalid key, and its client mints a new one.
_VERSION = 2
# What the cipher key is derived for: another use of the same secret derives another.
_HKDF_INFO = b"parley ephemeral key v2: AES-256-GCM"
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
    """A sealed key. Raises PresetNotEncodable or KeyTooLarge."""
    payload = {
        "v": _VERSION,
        "id": key_id,
        "exp": expires_at,
        "model": model,
        "session": encode_preset(preset) if preset is not None else None,
    }
    raw = json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()
    # Compressed, then encrypted: the key's length tells a little about the preset's
    # content, which matters only when attacker-chosen text sits beside a secret in
    # what is compressed. Here all of it comes from the API-key holder who mints the
    # key; the browser holding it chooses nothing in it.
    nonce = secrets.token_bytes(NONCE_BYTES)
    sealed = _cipher(secret).encrypt(nonce, zlib.compress(raw, 9), None)
    value = EPHEMERAL_PREFIX + b64encode(nonce + sealed)
    if len(value) > MAX_KEY_CHARS:
        raise KeyTooLarge(len(value))
    return value


def verify(secret: bytes, value: str, now: float | None) -> EphemeralKey | None:
    """What `value` grants, or None when it is malformed, sealed with another
    secret, tampered with or expired (`now` None: its expiry is not checked, for a
    session it opened that resumes). Only a payload that decrypts (so was sealed
    with this secret, unchanged) is inflated and parsed."""
    if len(value) > MAX_KEY_CHARS or not value.startswith(EPHEMERAL_PREFIX):
        return None
    payload = _payload(secret, value[len(EPHEMERAL_PREFIX) :])
    if payload is None:
        return None
    try:
        expires_at, model, key_id = payload["exp"], payload["model"], payload["id"]
        session = payload["session"]
        if not (isinstance(expires_at, int) and isinstance(model, str)):
            return None
        preset = SessionIn.model_validate(session) if session is not None else None
    except (KeyError, TypeError, ValidationError):
        # Sealed by a build that writes keys differently (during a rolling deploy):
        # refused like any bad key, and the client mints a new one.
        return None
    if now is not None and now >= expires_at:
        return None
    return EphemeralKey(str(key_id), expires_at, model, preset)


def _payload(secret: bytes, encoded: str) -> dict[str, Any] | None:
    try:
        sealed = b64decode(encoded)
        nonce, ciphertext = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
        # GCM checks the tag in constant time: a forger learns nothing from timing.
        compressed = _cipher(secret).decrypt(nonce, ciphertext, None)
        inflater = zlib.decompressobj()
        raw = inflater.decompress(compressed, _MAX_PAYLOAD_BYTES)
        if inflater.unconsumed_tail or not inflater.eof:
            return None
        payload = json.loads(raw)
    except (binascii.Error, InvalidTag, zlib.error, ValueError, RecursionError):
        return None
    if not isinstance(payload, dict) or payload.get("v") != _VERSION:
        return None
    return payload


def _cipher(secret: bytes) -> AESGCM:
    return cipher(secret, _HKDF_INFO)
