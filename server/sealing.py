"""Sealing under a secret every replica shares (PARLEY_KEY_SECRET): AES-256-GCM
under a key derived (HKDF) from the secret for one use, so that ephemeral keys
(server/ephemeral_keys.py) and call ids (server/call_routes.py) never share a key;
and the base64url without padding both travel in (valid in a URL path, a query, a
bearer token and a WebSocket subprotocol)."""

from __future__ import annotations

import base64
import functools

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

NONCE_BYTES = 12  # random per sealed value: 96 bits, as GCM wants


@functools.lru_cache(maxsize=8)
def cipher(secret: bytes, info: bytes) -> AESGCM:
    """AES-256-GCM under the key derived from `secret` for `info` (a process has
    one secret and a few uses; tests a few secrets)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info)
    return AESGCM(hkdf.derive(secret))


def b64encode(data: bytes) -> str:
    # `=` is a separator in HTTP tokens: no padding.
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def b64decode(encoded: str) -> bytes:
    """Raises binascii.Error (a ValueError) for what is not base64url."""
    return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
