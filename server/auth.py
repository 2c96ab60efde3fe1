"""API keys, ephemeral client secrets, and refusals in OpenAI's error envelope.

Real keys come from the settings (PARLEY_API_KEYS). Ephemeral keys (`ek_…`) are made
by `POST /v1/realtime/client_secrets` for a browser that must not hold a real key:
each opens one session (PARLEY_EPHEMERAL_KEY_USES, server/key_uses.py) before it
expires, with the session configuration fixed when it was made, on any process that
shares the key secret (server/ephemeral_keys.py). `KeyStore.admit` lets a session
open under the per-key limits (server/key_limits.py). With no real keys configured
the server is open, which is meant for a loopback address only (server/exposure.py
refuses it elsewhere).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from openai.types.realtime import SessionCreatedEvent
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.emitter import build
from engine.mcp.egress import OFF, McpPolicy, tools_refusal
from engine.prompts import PromptLibrary
from engine.protocol import (
    ProtocolError,
    SessionIn,
    loads_json,
    normalize_session,
    validation_error,
)
from engine.session_config import apply_update, new_config, to_wire
from engine.transcription_session import session_type
from server.ephemeral_keys import (
    EPHEMERAL_PREFIX,
    EphemeralKey,
    KeyTooLarge,
    PresetNotEncodable,
    mint,
    verify,
)
from server.key_limits import KeyLimits, RefusalReason, client_of
from server.key_uses import KeyUses

log = logging.getLogger(__name__)

# Browsers cannot set headers, so they offer the key as a subprotocol.
KEY_SUBPROTOCOL = "openai-insecure-api-key."
MAX_BODY_BYTES = 1024 * 1024


@dataclass
class ApiError(Exception):
    """An HTTP refusal: a status and OpenAI's `{"error": {...}}` body."""

    status: int
    code: str | None
    message: str
    param: str | None = None
    type: str = "invalid_request_error"

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "type": self.type,
                "code": self.code,
                "message": self.message,
                "param": self.param,
            }
        }

    def headers(self) -> dict[str, str] | None:
        return {"WWW-Authenticate": "Bearer"} if self.status == 401 else None


def presented_key(headers: Mapping[str, str], subprotocols: Sequence[str] = ()) -> str | None:
    """The key from `Authorization: Bearer …` (what the SDKs send), else from the
    browser's `openai-insecure-api-key.…` subprotocol."""
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    for offered in subprotocols:
        if offered.startswith(KEY_SUBPROTOCOL) and len(offered) > len(KEY_SUBPROTOCOL):
            return offered[len(KEY_SUBPROTOCOL) :]
    return None


@dataclass
class Admitted:
    """A session let in by `KeyStore.admit`: `release` it when the session ends."""

    client: str  # who it counts against (server/key_limits.py), never a key
    limits: KeyLimits | None
    released: bool = False

    def release(self) -> None:
        if not self.released and self.limits is not None:
            self.limits.close(self.client)
        self.released = True


class KeyStore:
    """The configured API keys, the secret that seals and opens ephemeral keys
    (server/ephemeral_keys.py), the record of their uses (`uses`; None: a key opens
    sessions until it expires) and the per-key limits (`limits`; None: none);
    `refused` counts what they refuse (/metrics).

    `now` is the clock for expiry (unix seconds); tests replace it to expire keys
    without waiting.
    """

    def __init__(
        self,
        api_keys: Sequence[str],
        key_secret: str,
        *,
        uses: KeyUses | None = None,
        limits: KeyLimits | None = None,
        refused: Callable[[RefusalReason], object] = lambda reason: None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._api_keys = [key.encode() for key in api_keys]
        self._secret = key_secret.encode()
        self.uses = uses
        self.limits = limits
        self.refused = refused
        self.now = now

    @property
    def open(self) -> bool:
        return not self._api_keys

    def authenticate(self, key: str | None, *, websocket: bool) -> EphemeralKey | None:
        """Check a presented key: returns what the ephemeral key grants (None for a
        real key, or none on an open server), or raises ApiError. Ephemeral keys are
        good for the realtime WebSocket and calls only; `admit` spends them."""
        if self.open and not websocket:
            return None
        if key is not None and key.startswith(EPHEMERAL_PREFIX):
            found = verify(self._secret, key, self.now())
            # Checked even on an open server: the client asked for the preset session,
            # and a default one in its place would be a silent surprise.
            if found is None:
                raise ApiError(401, "invalid_api_key", "The ephemeral key is invalid or expired.")
            if not websocket:
                raise ApiError(
                    403,
                    "insufficient_permissions",
                    "Ephemeral keys only open /v1/realtime; use an API key here.",
                )
            return found
        if self.open:
            return None
        if key is None:
            raise ApiError(
                401,
                "missing_api_key",
                "No API key provided: send 'Authorization: Bearer <key>'.",
            )
        if not self._is_api_key(key):
            raise ApiError(401, "invalid_api_key", "Incorrect API key provided.")
        return None

    def owner(self, key: str | None, ephemeral: EphemeralKey | None) -> str:
        """Whom a session opened with `key` belongs to, for binding its resume token
        (server/resume_tokens.py): the ephemeral key's id, the API key's hash, or
        anyone on an open server (there the 256-bit token alone is the proof; the
        address is not, since a phone that changed networks has a new one)."""
        if ephemeral is not None:
            return f"ek:{ephemeral.key_id}"
        if self.open or key is None:
            return "open"
        return "key:" + hashlib.sha256(key.encode()).hexdigest()

    def resuming(self, key: str | None) -> str:
        """The owner a reconnecting client proves with `key`, or ApiError 401. The
        ephemeral key that opened the session may have expired or been spent since:
        it opened this session, and still names it."""
        if key is not None and key.startswith(EPHEMERAL_PREFIX):
            found = verify(self._secret, key, None)
            if found is None:
                raise ApiError(401, "invalid_api_key", "The ephemeral key is invalid.")
            return self.owner(key, found)
        self.authenticate(key, websocket=True)
        return self.owner(key, None)

    def admit(
        self, key: str | None, ephemeral: EphemeralKey | None, address: str | None
    ) -> Admitted:
        """A session opens with `key` (`ephemeral`: what `authenticate` found): it
        counts against its client's limits, and spends one use of an ephemeral key.
        Called once nothing else can refuse the session (capacity, drain), so a
        refusal never spends a key. Raises ApiError 429 (a per-key limit) or 401 (the
        ephemeral key is used up)."""
        client = client_of(key, ephemeral, open_server=self.open, address=address)
        if self.limits is not None and (refusal := self.limits.open(client)) is not None:
            log.info("session refused for %s: %s", client, refusal.message)
            self.refused(refusal.reason)
            # OpenAI names the kind of limit in `type` ("requests" for request rates).
            raise ApiError(429, "rate_limit_exceeded", refusal.message, type="requests")
        admitted = Admitted(client, self.limits)
        if ephemeral is not None and self.uses is not None:
            try:
                fresh = self.uses.claim(ephemeral.key_id, ephemeral.expires_at, self.now())
            except sqlite3.Error:
                admitted.release()
                log.exception("the record of used ephemeral keys cannot be written")
                raise ApiError(
                    503, "server_error", "Try again in a moment.", type="server_error"
                ) from None
            if not fresh:
                admitted.release()
                self.refused("key_used")
                raise ApiError(
                    401,
                    "invalid_api_key",
                    "The ephemeral key was already used: each opens "
                    f"{self.uses.uses_per_key} session(s). Mint a new one to reconnect.",
                )
        return admitted

    def issue(self, model: str, preset: SessionIn | None, ttl_s: int) -> tuple[str, int]:
        """A new ephemeral key and its expiry (unix seconds); raises ApiError 400 for
        a preset that cannot be carried by a key."""
        expires_at = int(self.now()) + ttl_s
        try:
            value = mint(
                self._secret,
                key_id=secrets.token_hex(12),  # 96 bits: ids never collide
                expires_at=expires_at,
                model=model,
                preset=preset,
            )
        except PresetNotEncodable:
            raise _unwritable() from None
        except KeyTooLarge as exc:
            raise ApiError(
                400,
                "invalid_value",
                f"The session is too large for an ephemeral key: {exc} (keys travel in a "
                "WebSocket header). Shorten the instructions or tools, or send them with "
                "session.update after connecting.",
                "session",
            ) from None
        return value, expires_at

    def _is_api_key(self, key: str) -> bool:
        # Compared with every configured key in constant time, so the timing gives
        # away neither how much of a key matched nor which one did.
        candidate = key.encode()
        matched = False
        for known in self._api_keys:
            matched |= hmac.compare_digest(candidate, known)
        return matched


# --- POST /v1/realtime/client_secrets -----------------------------------------------


class _ExpiresAfter(BaseModel):
    # Strict as the session is: "600" or 600.0 is an invalid_type, as OpenAI says.
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)
    anchor: Literal["created_at"] = "created_at"
    seconds: int = Field(ge=10, le=7200)  # OpenAI's bounds


class ClientSecretRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    expires_after: _ExpiresAfter | None = None
    session: SessionIn | None = None


def parse_client_secret_request(body: bytes) -> ClientSecretRequest:
    """The request body, or ApiError 400 naming the offending `param`."""
    try:
        raw = loads_json(body) if body.strip() else {}
    except (ValueError, RecursionError):
        raise ApiError(400, "invalid_json", "The request body is not valid JSON.") from None
    if not isinstance(raw, dict):
        raise ApiError(400, "invalid_json", "The request body must be a JSON object.")
    return client_secret_request(raw)


def client_secret_request(raw: dict[str, Any]) -> ClientSecretRequest:
    """A parsed request body checked, its preset in GA shape (as a session.update's
    session is), or ApiError 400 naming the offending `param`. A WebRTC call's
    `session` is checked here too."""
    try:
        request = ClientSecretRequest.model_validate(raw)
    except ValidationError as exc:
        raise bad_request(validation_error(exc, None)) from None
    if request.session is None:
        return request
    try:
        session = normalize_session(request.session)
    except ProtocolError as exc:
        raise bad_request(exc) from None
    return request.model_copy(update={"session": session})


def create_client_secret(
    keys: KeyStore,
    request: ClientSecretRequest,
    *,
    default_model: str,
    default_ttl_s: int,
    mcp_policy: McpPolicy = OFF,
    prompts: PromptLibrary | None = None,
) -> bytes:
    """Mint an ephemeral key for `request.session`: the JSON body of the SDK's
    `ClientSecretCreateResponse`. The session is checked the way `session.update`
    is, so a bad one fails here (400) rather than at connect time; the body is
    encoded here too, so that one which cannot be written out is a 400 as well,
    never a 500. Nothing is kept either way: the key is the only record (its uses
    are recorded when it opens a session)."""
    preset = request.session
    # The key fixes the model too: the session it opens uses this one whatever the
    # client puts in `?model=`, so the preset always applies cleanly.
    model = preset.model if preset and preset.model else default_model
    kind = session_type([preset] if preset else [])
    config = new_config(model, kind)
    if preset is not None:
        try:
            config = apply_update(config, preset, audio_started=False, prompts=prompts)
        except ProtocolError as exc:
            raise bad_request(exc) from None
        if (refused := tools_refusal(preset.tools, mcp_policy)) is not None:
            raise bad_request(refused)  # its MCP servers, as session.update checks them
    ttl = request.expires_after.seconds if request.expires_after else default_ttl_s
    # Written out as session.created will write it, so that a session too deep for
    # its events is refused now, not when the key opens it.
    wire = to_wire(config)
    try:
        build(SessionCreatedEvent, "event_check", session=wire).model_dump_json()
    except (ValueError, RecursionError):
        raise _unwritable() from None
    # The key is bound to its session's type: the preset names it, so a connection
    # asking for the other type (?intent=, a call's session) is refused.
    typed = (preset or SessionIn()).model_copy(update={"type": kind})
    value, expires_at = keys.issue(model, typed, ttl)
    # The SDK's RealtimeSessionCreateResponse or RealtimeTranscriptionSessionCreateResponse.
    kind_object = (
        "realtime.transcription_session" if kind == "transcription" else "realtime.session"
    )
    session = {"id": "sess_" + secrets.token_hex(12), "object": kind_object}
    body = {"value": value, "expires_at": expires_at, "session": session | wire}
    try:
        return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
    except (ValueError, RecursionError):
        raise _unwritable() from None


def _unwritable() -> ApiError:
    return ApiError(
        400,
        "invalid_value",
        "The session cannot be written out as JSON: it is nested too deeply (as a tool's "
        "parameters schema can be) or holds a value JSON cannot carry (NaN, Infinity).",
        "session",
    )


def bad_request(exc: ProtocolError) -> ApiError:
    """A refused session or preset as an HTTP 400 with OpenAI's error body."""
    return ApiError(400, exc.code, exc.message, exc.param, exc.type)
