"""Sealed ephemeral keys (server/ephemeral_keys.py): minted and opened with an
explicit secret and clock, no server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import zlib
from typing import Any

import pytest
from pydantic import ValidationError

from engine.protocol import SessionIn, normalize_session
from server.ephemeral_keys import (
    MAX_KEY_CHARS,
    KeyTooLarge,
    PresetNotEncodable,
    _cipher,
    mint,
    new_key_secret,
    verify,
)
from server.sealing import b64encode

SECRET = b"a-secret-of-at-least-32-characters!"
T0 = 1_700_000_000
# base64url: a valid HTTP token, so a valid subprotocol and bearer.
TOKEN = re.compile(r"^ek_[A-Za-z0-9_-]+$")


def preset(raw: dict[str, Any]) -> SessionIn:
    return normalize_session(SessionIn.model_validate(raw))


def deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def minted(session: SessionIn | None = None, *, secret: bytes = SECRET, ttl: int = 60) -> str:
    return mint(secret, key_id="k1", expires_at=T0 + ttl, model="m", preset=session)


def test_a_key_carries_its_expiry_model_and_preset_as_sent() -> None:
    sent = preset(
        {
            "type": "realtime",
            "instructions": "Answer in French.",
            "audio": {"input": {"turn_detection": None}},
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
        }
    )
    value = minted(sent)
    assert TOKEN.match(value)
    key = verify(SECRET, value, T0)
    assert key is not None
    assert (key.key_id, key.expires_at, key.model) == ("k1", T0 + 60, "m")
    assert key.preset is not None
    # The same fields sent, `null` included (it turns detection off, absent would not).
    assert key.preset.model_dump(exclude_unset=True) == sent.model_dump(exclude_unset=True)
    assert key.preset.audio is not None and key.preset.audio.input is not None
    assert "turn_detection" in key.preset.audio.input.model_fields_set


def test_a_key_without_preset() -> None:
    key = verify(SECRET, minted(None), T0)
    assert key is not None and key.preset is None


def test_a_key_expires_on_the_clock() -> None:
    value = minted(ttl=10)
    assert verify(SECRET, value, T0 + 9.999) is not None
    assert verify(SECRET, value, T0 + 10) is None
    assert verify(SECRET, value, T0 + 7200) is None


def test_checking_a_key_does_not_use_it_up() -> None:
    # Uses are counted where a session opens (server/key_uses.py), not here.
    value = minted()
    assert all(verify(SECRET, value, T0) is not None for _ in range(3))


def test_another_secret_refuses_the_key() -> None:
    value = minted()
    assert verify(b"another-secret-of-32-characters!!!", value, T0) is None
    # Two workers that each made their own secret refuse each other's keys.
    mine, theirs = new_key_secret().encode(), new_key_secret().encode()
    assert mine != theirs
    assert verify(theirs, minted(secret=mine), T0) is None
    assert verify(mine, minted(secret=mine), T0) is not None


INSTRUCTIONS = "Never mention the discount code SPRING-42."
# What the application put in the preset for the server's eyes only.
HIDDEN = ("discount code", "SPRING-42", "tok-3f9a1c", "hdr-77e2b0", "mcp.example.com", "crm")


def secret_preset() -> SessionIn:
    return preset(
        {
            "type": "realtime",
            "instructions": INSTRUCTIONS,
            "tools": [
                {
                    "type": "mcp",
                    "server_label": "crm",
                    "server_url": "https://mcp.example.com/mcp",
                    "authorization": "tok-3f9a1c",
                    "headers": {"X-Api-Key": "hdr-77e2b0"},
                    "require_approval": "never",
                }
            ],
        }
    )


def readings(value: str) -> list[bytes]:
    """What a holder of the key can read from it without the secret: the key, its
    base64 decoded (each part, should it have several), and whatever inflates (zlib,
    raw deflate, gzip) from any offset of it."""
    found = [value.encode()]
    for part in value[len("ek_") :].split("."):
        raw = _b64decode(part)
        found.append(raw)
        for start in range(len(raw)):
            for wbits in (15, -15, 31):
                try:
                    found.append(zlib.decompressobj(wbits).decompress(raw[start:], 1 << 20))
                except zlib.error:
                    pass
    return found


def test_a_key_reveals_nothing_of_its_preset() -> None:
    value = minted(secret_preset())
    key = verify(SECRET, value, T0)
    assert key is not None and key.preset is not None  # the server reads it all
    assert key.preset.instructions == INSTRUCTIONS
    assert key.preset.tools is not None and key.preset.tools[0].authorization == "tok-3f9a1c"
    for text in readings(value):
        for hidden in HIDDEN:
            assert hidden.encode() not in text
    # The same preset sealed twice reads differently (a fresh nonce each time).
    assert minted(secret_preset()) != value


def test_a_tampered_key_is_refused() -> None:
    value = minted(preset({"instructions": "Be kind."}))
    # One character changed anywhere: the nonce, the ciphertext, the tag.
    for i in (3, 10, len(value) // 2, len(value) - 1):
        flipped = value[:i] + ("A" if value[i] != "A" else "B") + value[i + 1 :]
        assert verify(SECRET, flipped, T0) is None
    # Cut short, or grown.
    assert verify(SECRET, value[:-4], T0) is None
    assert verify(SECRET, value + "AAAA", T0) is None
    # Another key's nonce before this one's ciphertext.
    other, mine = _b64decode(minted()[3:]), _b64decode(value[3:])
    assert verify(SECRET, "ek_" + b64encode(other[:12] + mine[12:]), T0) is None


def test_a_key_of_the_old_signed_format_is_refused() -> None:
    """Version 1 keys (readable zlib JSON with an HMAC signature) open nothing, even
    when signed with the same secret."""
    payload = {"v": 1, "id": "k", "exp": T0 + 60, "model": "m", "session": None}
    signed = "ek_" + b64encode(zlib.compress(json.dumps(payload).encode(), 9))
    signature = b64encode(hmac.new(SECRET, signed.encode(), hashlib.sha256).digest())
    assert verify(SECRET, f"{signed}.{signature}", T0) is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "ek_",
        "ek_.",
        "ek_nodot",
        "sk-not-ephemeral.abc",
        "ek_!!!.???",
        "ek_" + "A" * MAX_KEY_CHARS,
        "ek_é.é",
    ],
)
def test_malformed_keys_are_refused(value: str) -> None:
    assert verify(SECRET, value, T0) is None


def sealed(payload: bytes, secret: bytes = SECRET) -> str:
    nonce = secrets.token_bytes(12)
    return "ek_" + b64encode(nonce + _cipher(secret).encrypt(nonce, payload, None))


def test_only_what_this_build_writes_is_accepted_even_when_sealed() -> None:
    """Sealed with the secret but not a payload this build wrote (another version,
    missing fields, a payload that inflates without bound, not compressed):
    refused, with bounded work."""
    good = {"v": 2, "id": "k", "exp": T0 + 60, "model": "m", "session": None}
    assert verify(SECRET, sealed(zlib.compress(json.dumps(good).encode())), T0) is not None
    for payload in (
        zlib.compress(json.dumps(good | {"v": 1}).encode(), 9),
        zlib.compress(json.dumps({"v": 2, "exp": T0 + 60}).encode(), 9),
        zlib.compress(json.dumps(good | {"exp": "soon"}).encode(), 9),
        # Valid but for its size: 4 MiB inflated from a key of 5 KiB.
        zlib.compress(json.dumps(good | {"pad": " " * (4 * 1024 * 1024)}).encode(), 9),
        json.dumps(good).encode(),
    ):
        assert verify(SECRET, sealed(payload), T0) is None


def test_a_preset_that_cannot_be_written_out_is_refused_at_minting() -> None:
    # Too deep to serialize: validation refuses it first (engine/protocol/nesting.py).
    with pytest.raises(ValidationError):
        preset({"tools": [{"type": "function", "name": "f", "parameters": deep_schema(300)}]})
    # Should anything valid still fail to serialize, minting refuses it (a client
    # secret request then gets a 400, never a 500): built here past validation.
    unwritable = SessionIn.model_construct().model_copy(update={"instructions": deep_schema(300)})
    with pytest.raises(PresetNotEncodable):
        minted(unwritable)


def test_presets_are_compressed_and_one_too_large_is_refused() -> None:
    # Repetitive text compresses far below the limit.
    assert len(minted(preset({"instructions": "Be brief. " * 2000}))) < 1024
    # Random text does not: somewhere below 6 KiB of it the key is too large.
    noise = secrets.token_urlsafe(MAX_KEY_CHARS)
    with pytest.raises(KeyTooLarge) as info:
        minted(preset({"instructions": noise}))
    assert info.value.size > MAX_KEY_CHARS
    assert str(MAX_KEY_CHARS) in str(info.value)


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
