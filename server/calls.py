"""WebRTC signalling as OpenAI's GA API has it.

POST /v1/realtime/calls[?model=]   the SDP offer -> 201, the SDP answer, and
                                   `Location: /v1/realtime/calls/{call_id}`
DELETE /v1/realtime/calls/{id}     the client hangs up (an API key, or the ephemeral
                                   key that made the call)
POST /v1/realtime/calls/{id}/hangup  the application's server hangs up (API key)
POST /v1/realtime/calls?resume=true  a resumable call (server/resumable_call.py): its
                                   data channel is announced a resume token
POST /v1/realtime/calls?resume_token=rt_…&last_event_id=event_…
                                   a new offer for the same call, after its peer
                                   connection was lost: the same call id, the missed
                                   events on the new data channel

Behind a load balancer (PARLEY_REPLICA_URL) the call id names the replica holding the
call, and a hang-up that reaches another replica is forwarded there
(server/call_routes.py, server/call_forward.py).

The offer comes as `application/sdp` (the browser guide, `@openai/agents-realtime`),
as `multipart/form-data` with `sdp` and a `session` JSON part (openai-node), or as
JSON `{"sdp": ..., "session": {...}}` (openai-python). `session` is the object
`/v1/realtime/client_secrets` takes, applied over the ephemeral key's own. Every
refusal (key, body, capacity, drain) is an HTTP error before any media flows; the
body's size is bounded (server/offer_body.py) and its media checked
(server/sdp_policy.py) whatever its shape.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from engine.protocol import ProtocolError, SessionIn, loads_json
from server.auth import (
    MAX_BODY_BYTES,
    Admitted,
    ApiError,
    KeyStore,
    bad_request,
    client_secret_request,
    presented_key,
)
from server.call_forward import CallForwarder
from server.call_routes import plain_call_id
from server.logs import session_var
from server.offer_body import offer_parts
from server.origins import check_origin
from server.resumable_call import ResumableCall
from server.resume import NotResumed, ResumeRegistry, resume_flag, resume_refusal
from server.sdp_policy import layout_problem
from server.sessions import SHUTDOWN_REASON, Seat, SessionHub
from server.webrtc import Call, CallError

log = logging.getLogger(__name__)

CALLS_PATH = "/v1/realtime/calls"


@dataclass(frozen=True)
class Offer:
    sdp: str
    session: SessionIn | None = None


def _answered(answer: str, call_id: str) -> Response:
    return Response(
        answer,
        201,
        media_type="application/sdp",
        headers={"Location": f"{CALLS_PATH}/{call_id}"},
    )


def _session_of(raw: object) -> SessionIn | None:
    """The `session` part, checked as `client_secrets` checks its own."""
    return None if raw is None else client_secret_request({"session": raw}).session


def _json(text: str | bytes, what: str) -> object:
    try:
        return loads_json(text)
    except (ValueError, RecursionError):
        raise ApiError(400, "invalid_json", f"The {what} is not valid JSON.") from None


def offer_of(content_type: str, body: bytes, form: dict[str, str] | None = None) -> Offer:
    """The offer in any of the three shapes (`form`: a multipart body's fields)."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == "multipart/form-data":
        assert form is not None
        sdp = form.get("sdp")
        raw = form.get("session")
        session = _session_of(_json(raw, "'session' part")) if raw else None
    elif kind == "application/json":
        parsed = _json(body, "request body")
        if not isinstance(parsed, dict):
            raise ApiError(400, "invalid_json", "The request body must be a JSON object.")
        sdp = parsed.get("sdp")
        session = _session_of(parsed.get("session"))
    elif kind in ("application/sdp", "text/plain", ""):
        sdp, session = body.decode("utf-8", errors="replace"), None
    else:
        raise ApiError(
            415,
            "unsupported_media_type",
            "Send the SDP offer as application/sdp, multipart/form-data or application/json.",
        )
    if not isinstance(sdp, str) or not sdp.lstrip().startswith("v=0"):
        raise ApiError(400, "invalid_sdp", "The request holds no SDP offer.", "sdp")
    if (problem := layout_problem(sdp)) is not None:
        raise ApiError(400, "invalid_sdp", problem, "sdp")
    return Offer(sdp, session)


async def _read_offer(request: Request) -> Offer:
    return offer_of(*await offer_parts(request, MAX_BODY_BYTES))


class CallsEndpoint:
    """Opens calls as sessions of the hub, and hangs them up."""

    def __init__(
        self,
        hub: SessionHub,
        keys: KeyStore,
        resumes: ResumeRegistry,
        forwarder: CallForwarder | None = None,
    ) -> None:
        self.hub = hub
        self.keys = keys
        # Resumable calls' tokens: their own, not the WebSocket's (a call's session
        # is resumed as a call, a WebSocket's as a WebSocket).
        self.resumes = resumes
        self.forwarder = forwarder  # None: a single server
        self._tasks: set[asyncio.Task[None]] = set()
        self._resumable: dict[str, ResumableCall] = {}  # by session id

    async def create(self, request: Request) -> Response:
        hub = self.hub
        # A web page the operator did not allow: refused before the offer is read.
        check_origin(request.headers, hub.settings.allowed_origins, open_server=self.keys.open)
        if hub.draining:
            raise ApiError(503, "server_shutting_down", SHUTDOWN_REASON, type="server_error")
        if (token := request.query_params.get("resume_token")) is not None:
            return await self._resume(request, token)
        resumable = resume_flag(request.query_params.get("resume"))
        key = presented_key(request.headers)
        ephemeral = self.keys.authenticate(key, websocket=True)
        offer = await _read_offer(request)
        model = ephemeral.model if ephemeral else request.query_params.get("model")
        model = model or hub.settings.model
        presets = tuple(p for p in (ephemeral.preset if ephemeral else None, offer.session) if p)
        try:  # the session applies them: a bad one is a 400 now, not an error later
            session = hub.new_session(model, presets)
        except ProtocolError as exc:
            raise bad_request(exc) from None
        if (full := hub.at_capacity()) is not None:
            raise ApiError(503, "at_capacity", full, type="server_error")
        # Per-key limits (429), and an ephemeral key spent (401 once used up).
        admitted = self.keys.admit(key, ephemeral, request.client.host if request.client else None)
        call_id = self.forwarder.routes.mint() if self.forwarder else plain_call_id()
        call = Call(call_id, session, hub.settings)
        # Seated until the call ends, so that the drain can hang it up.
        seat = hub.admit(functools.partial(call.hang_up, SHUTDOWN_REASON))
        try:
            try:
                answer = await call.answer(offer.sdp)
            except CallError as exc:
                await call.pc.close()
                raise ApiError(400, "invalid_sdp", str(exc), "sdp") from None
        except BaseException:
            hub.release(seat)
            admitted.release()
            raise
        seat.session = session  # the drain's to end, once it is served
        # Only the ephemeral key that made it may hang it up (API keys: any call).
        hub.add_call(call_id, call, owner=ephemeral.key_id if ephemeral else None)
        if resumable:
            release = functools.partial(self._released, call, seat, admitted)
            owner = self.keys.owner(key, ephemeral)
            held = ResumableCall(call, owner, self.resumes, release, lambda: hub.draining)
            self._resumable[held.session_id] = held
            session_var.set(held.session_id)  # its tasks' log lines name it
            held.attach(call.peer, None)
            self._spawn(self._serve_resumable(held), call_id)
        else:
            self._spawn(self._serve(call, seat, admitted), call_id)
        log.info("call %s: answered (session %s)", call_id, session.session_id)
        return _answered(answer, call_id)

    async def _resume(self, request: Request, token: str) -> Response:
        """A resumable call's client is back with a new offer: refused before any
        media when it cannot be, else a new peer connection for the same call."""
        owner = self.keys.resuming(presented_key(request.headers))
        offer = await _read_offer(request)  # a bad body spends no token
        claimed = self.resumes.claim(token, owner, request.query_params.get("last_event_id"))
        if isinstance(claimed, NotResumed):
            raise resume_refusal(claimed)
        held = self._resumable[claimed.resumable.session_id]  # the registry is calls' only
        call = held.call
        peer = call.new_peer()
        try:
            answer = await peer.answer(offer.sdp)
        except CallError as exc:  # rare: the offer's layout was checked before the claim
            await peer.close()
            held.link.finish()  # its token is spent: nobody could resume it now
            raise ApiError(400, "invalid_sdp", str(exc), "sdp") from None
        if held.link.ending:  # its window passed, or it was hung up, meanwhile
            await peer.close()
            raise resume_refusal(NotResumed("resume_token_invalid", "The call has ended."))
        session_var.set(held.session_id)
        held.attach(peer, claimed.missed)
        log.info("call %s: resumed, %d missed event(s)", call.call_id, len(claimed.missed))
        return _answered(answer, call.call_id)

    def _spawn(self, coroutine: Coroutine[Any, Any, None], call_id: str) -> None:
        task = asyncio.create_task(coroutine, name=f"call:{call_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self, timeout_s: float = 10.0) -> None:
        """The server is stopping: hang up every call and wait (bounded) for each to
        close its peer connection. (A drain ends them first, their answers done.)"""
        self.hub.hang_up_calls(SHUTDOWN_REASON)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)
        if self.forwarder is not None:
            await self.forwarder.aclose()

    async def _serve(self, call: Call, seat: Seat, admitted: Admitted) -> None:
        session_var.set(call.session.session_id)
        try:
            reason = await call.run(self.hub)
            log.info("call %s: ended (%s)", call.call_id, reason)
        finally:
            self.hub.drop_call(call.call_id)
            self.hub.release(seat)
            admitted.release()
            self.hub.closed(call.session.session_id, 1000)

    async def _serve_resumable(self, held: ResumableCall) -> None:
        session_var.set(held.session_id)
        reason = await held.run()
        log.info("call %s: ended (%s)", held.call.call_id, reason)

    def _released(self, call: Call, seat: Seat, admitted: Admitted) -> None:
        """A resumable call's session ended: its seat and key's count are free."""
        self._resumable.pop(call.session.session_id, None)
        self.hub.drop_call(call.call_id)
        self.hub.release(seat)
        admitted.release()
        self.hub.closed(call.session.session_id, 1000)

    async def hang_up(self, call_id: str, request: Request, *, api_key_only: bool) -> Response:
        # The application's server hangs up with its API key; the client may with its
        # own (ephemeral) key too, as it may by closing the peer connection: another
        # ephemeral key finds no such call (404), so call ids cannot be probed.
        key = presented_key(request.headers)
        ephemeral = self.keys.authenticate(key, websocket=not api_key_only)
        forwarder, held = self.forwarder, self.hub.holds(call_id)
        if forwarder and (holder := forwarder.holder(call_id, request.headers, held=held)):
            # Held by another replica, which checks the key (and owner) again.
            path = f"{CALLS_PATH}/{call_id}" + ("/hangup" if api_key_only else "")
            return await forwarder.request(holder, request.method, path, request.headers)
        owner = ephemeral.key_id if ephemeral else None
        self.hub.find_call(call_id, owner).hang_up("hung up by request")
        return Response(status_code=200)
