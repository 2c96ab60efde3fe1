"""A call's sideband, hang-up and DELETE sent on to the replica holding the call
(server/call_routes.py reads which one from the call id).

request: the hang-up or DELETE is made again on the holder, with the client's
         Authorization, and its answer handed back as it is
relay:   the sideband WebSocket is opened on the holder the same way, and frames
         pass both ways, one at a time: each is sent before the next is read, so
         a slow side slows the other instead of filling memory. When either side
         closes, the other is closed with its code and reason; a side that drops
         (or a client that stops reading for `write_timeout_s`) has the other's
         connection aborted or closed, never left open.

The holder checks the key (and the call's owner) as for a request it got itself.
The forwarding replica checks the key first, so no unauthenticated request costs a
hop, and a page's Origin, which only it can check (the holder's Host is not the one
the page called). What is forwarded carries FORWARDED_HEADER and is answered where
it lands. Replicas reach each other directly: no proxy from the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import websockets
from fastapi import WebSocket
from fastapi.responses import Response
from starlette.websockets import WebSocketState
from websockets.asyncio.client import ClientConnection
from websockets.frames import Close
from websockets.typing import Subprotocol

from server.auth import ApiError
from server.call_routes import FORWARDED_HEADER, CallRoutes, forward_to
from server.config import Settings
from server.ws_protocol import abort_connection

log = logging.getLogger(__name__)

# How long the holder may take to answer a forwarded request or WebSocket handshake.
FORWARD_TIMEOUT_S = 10.0
# What a forward carries of the client's request: its key, which the holder checks
# as for a request of its own. Not the Origin: this replica checked it against the
# Host the page called, and the holder's Host is the internal one.
_CARRIED = ("authorization",)
# The holder's answer headers a client needs.
_ANSWERED = ("content-type", "www-authenticate")
# Close codes that may be sent in a close frame (RFC 6455 7.4); others (1005 none
# given, 1006 dropped, 1015 TLS) are read only, and pass on as 1000.
_SENDABLE = {1000, 1001, 1002, 1003, *range(1007, 1015), *range(3000, 5000)}


def unreachable(holder: str) -> ApiError:
    log.warning("the replica holding a call cannot be reached: %s", holder)
    return ApiError(
        502,
        "replica_unreachable",
        "The server holding the call cannot be reached; try again.",
        type="server_error",
    )


def sendable(code: int) -> int:
    return code if code in _SENDABLE else 1000


def carried(headers: Mapping[str, str]) -> dict[str, str]:
    out = {name: value for name in _CARRIED if (value := headers.get(name))}
    return out | {FORWARDED_HEADER: "1"}


def refusal_of(status: int, body: bytes) -> ApiError:
    """The holder's refusal of a handshake, in its own words where it gave some."""
    try:
        error = json.loads(body)["error"]
        return ApiError(
            status,
            error.get("code"),
            str(error.get("message") or ""),
            error.get("param"),
            str(error.get("type") or "invalid_request_error"),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return ApiError(status, None, "Refused by the server holding the call.")


class CallForwarder:
    """Forwards what reaches this replica for a call another replica holds."""

    def __init__(self, routes: CallRoutes, write_timeout_s: float, max_message_bytes: int):
        self.routes = routes
        self.write_timeout_s = write_timeout_s
        # What a client may send Parley (frames past it close the connection): the
        # largest event the holder's sideband is let send through.
        self.max_frame_bytes = 2 * max_message_bytes
        self._http: httpx.AsyncClient | None = None

    def holder(self, call_id: str, headers: Mapping[str, str], *, held: bool) -> str | None:
        """The replica to forward to (None: answer here)."""
        return forward_to(self.routes, call_id, held=held, forwarded=FORWARDED_HEADER in headers)

    async def request(
        self, holder: str, method: str, path: str, headers: Mapping[str, str]
    ) -> Response:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S, trust_env=False)
        try:
            answer = await self._http.request(method, holder + path, headers=carried(headers))
        except httpx.HTTPError:
            raise unreachable(holder) from None
        kept = {name: value for name in _ANSWERED if (value := answer.headers.get(name))}
        return Response(answer.content, answer.status_code, headers=kept)

    async def connect(
        self, holder: str, call_id: str, headers: Mapping[str, str], offered: Sequence[str]
    ) -> ClientConnection:
        """The call's sideband opened on the holder, or ApiError: the holder's
        refusal (404 when the call ended meanwhile), or 502. (`call_id` opened, so
        it is base64url: nothing to quote.)"""
        url = f"ws{holder.removeprefix('http')}/v1/realtime?call_id={call_id}"  # ws://
        try:
            return await websockets.connect(
                url,
                additional_headers=carried(headers),
                subprotocols=[Subprotocol(p) for p in offered] or None,
                proxy=None,
                open_timeout=FORWARD_TIMEOUT_S,
                # A holder that does not take the close frame is dropped after this
                # long, as Parley drops a client that does not read.
                close_timeout=self.write_timeout_s,
                max_size=self.max_frame_bytes,
                compression=None,
                user_agent_header=None,
            )
        except websockets.InvalidStatus as refused:
            response = refused.response
            raise refusal_of(response.status_code, response.body or b"") from None
        except (OSError, TimeoutError, websockets.InvalidHandshake):
            raise unreachable(holder) from None

    async def relay(self, ws: WebSocket, upstream: ClientConnection) -> None:
        """Accept the client (`ws`) as the holder accepted this replica, then frames
        both ways until either closes; then the other is closed as it was."""
        down: asyncio.Task[Close | None] | None = None
        up: asyncio.Task[tuple[int, str]] | None = None
        try:
            await ws.accept(subprotocol=upstream.subprotocol)
            down = asyncio.create_task(self._down(ws, upstream), name="relay-down")
            up = asyncio.create_task(_up(ws, upstream), name="relay-up")
            done, _ = await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
            if up in done and not up.cancelled() and up.exception() is None:
                code, reason = up.result()  # the client closed: so does the holder's side
                await upstream.close(sendable(code), reason)
            elif down in done and not down.cancelled() and down.exception() is None:
                await _close_client(ws, down.result(), self.write_timeout_s)
            else:  # a side failed (the client did not read in time): both dropped
                log.info("sideband relay cut off: %r", _failure(done))
                abort_connection(ws)
                upstream.transport.abort()
        finally:
            for task in (up, down):
                if task is not None:
                    task.cancel()
            await upstream.close()

    async def _down(self, ws: WebSocket, upstream: ClientConnection) -> Close | None:
        """The holder's frames to the client, until the holder closes: its close
        frame (None: it dropped the connection)."""
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in upstream:
                async with asyncio.timeout(self.write_timeout_s):
                    if isinstance(message, str):
                        await ws.send_text(message)
                    else:
                        await ws.send_bytes(message)
        return upstream.protocol.close_rcvd

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()


def _failure(done: set[asyncio.Task[Any]]) -> BaseException | None:
    return next((t.exception() for t in done if not t.cancelled() and t.exception()), None)


async def _up(ws: WebSocket, upstream: ClientConnection) -> tuple[int, str]:
    """The client's frames to the holder, until the client closes: its code and
    reason. A send waits while the holder is not reading."""
    while True:
        message = await ws.receive()
        if message["type"] == "websocket.disconnect":
            return int(message.get("code") or 1005), str(message.get("reason") or "")
        text, data = message.get("text"), message.get("bytes")
        with contextlib.suppress(websockets.ConnectionClosed):  # _down sees it end
            await upstream.send(text if text is not None else data or b"")


async def _close_client(ws: WebSocket, closed: Close | None, timeout_s: float) -> None:
    """The holder closed (`closed`: its close frame): the client gets its code and
    reason; a holder that dropped the connection has the client's dropped too."""
    if closed is None:
        abort_connection(ws)
        return
    if ws.client_state is WebSocketState.CONNECTED:
        try:
            async with asyncio.timeout(timeout_s):
                await ws.close(sendable(closed.code), closed.reason)
        except TimeoutError:
            abort_connection(ws)
        except Exception:  # the client went away meanwhile
            log.debug("close failed", exc_info=True)


def forwarder_of(settings: Settings) -> CallForwarder | None:
    """The forwarder of a replica (PARLEY_REPLICA_URL set), None for a single server."""
    if settings.replica_url is None or settings.key_secret is None:
        return None
    routes = CallRoutes(settings.key_secret.get_secret_value().encode(), settings.replica_url)
    return CallForwarder(routes, settings.write_timeout_s, settings.max_message_bytes)
