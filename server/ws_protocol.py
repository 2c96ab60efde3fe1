"""uvicorn's sans-I/O WebSocket protocol with the three things Parley needs of a transport
that uvicorn does not give:

- the app can abort the connection (`abort_connection`): a client that stopped reading
  never frees the socket space a polite close needs, and `transport.close()` waits for
  that space forever (and with it uvicorn's shutdown);
- an oversize message's 1009 close frame reaches a client that is still sending.
  uvicorn closes the socket right after writing the close frame; with the client's data
  still arriving (or unread), the kernel answers with a TCP reset, which discards the
  close frame on the client's side: it saw 1006. Here the server half-closes after the
  frame and keeps reading, discarding, until the client closes its side, for at most
  `LINGER_S`;
- a text message that is not UTF-8 closes the connection (1007) with one log line,
  not a server error's traceback: a client's bad input is no fault of the server.

`server.cli.uvicorn_options` selects it (`ws=`), so every `parley serve` process and
the test servers run it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable
from typing import Any

from starlette.websockets import WebSocket
from uvicorn._types import ASGISendEvent
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Request

# The ASGI scope extension under which the protocol offers `{"abort": callable}`.
ABORT_EXTENSION = "parley.abort"
# How long a connection failed by the server (1009) reads on, waiting for the client
# to close its side, before it is aborted.
LINGER_S = 5.0


class WebSocketProtocol(WebSocketsSansIOProtocol):
    _failed = False

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        scope: dict[str, Any] | None = getattr(self, "scope", None)  # none if refused
        if scope is not None:
            scope["extensions"][ABORT_EXTENSION] = {"abort": self.abort}

    def abort(self) -> None:
        """Drop the connection now: unsent data is discarded, the peer sees a reset.
        `connection_lost` follows, which tells the app (`websocket.disconnect`) and
        wakes a send waiting for socket space."""
        if self.transport is None or self.disconnected:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            # transport.abort() drops only asyncio's buffer; the kernel would go on
            # holding (and offering) what it has queued, megabytes for a stalled
            # client. Lingering 0 s makes the close a reset that frees it at once.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    async def send(self, message: ASGISendEvent) -> None:
        await super().send(message)
        if message["type"] == "websocket.close" and self.close_timer is not None:
            # uvicorn then waits for the client's close frame and, without it, calls
            # transport.close(), which waits for socket space a stalled client never
            # frees: abort instead.
            self.close_timer.cancel()
            self.close_timer = self.loop.call_later(self.close_timeout, self.abort)

    def shutdown(self) -> None:
        # uvicorn's shutdown (after the drain) closes the transport, which then waits
        # for a stalled client to take what is still buffered, and so keeps the
        # process waiting (and the kernel holding it after exit): abort instead.
        super().shutdown()
        if self.transport.get_write_buffer_size():
            self.abort()

    def send_receive_event_to_app(self) -> None:
        # A text message that is not UTF-8 is the client's fault: closed with 1007 as
        # uvicorn does, but logged as one line, where uvicorn logs a traceback.
        if self.curr_msg_data_type == "text" and not self.close_sent:
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            try:
                if not data.isascii():  # ASCII (every append) is UTF-8: no second decode
                    data.decode()
            except UnicodeDecodeError:
                self.frames = []
                self.logger.info("closing a WebSocket with 1007: a text message is not UTF-8")
                self.conn.send_close(1007, "Text messages must be UTF-8.")
                self.handle_parser_exception()
                return
        super().send_receive_event_to_app()

    def handle_parser_exception(self) -> None:
        # The parser failed the connection (1009 for a message over ws_max_size; also
        # a protocol violation): the close frame is queued. Called again for every
        # later chunk of data, which the parser now discards.
        if self._failed:
            return
        self._failed = True
        close = self.conn.close_sent
        assert close is not None
        self.queue.put_nowait(
            {"type": "websocket.disconnect", "code": close.code, "reason": close.reason}
        )
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        if self.transport.can_write_eof():
            self.transport.write_eof()  # the close frame, then FIN: nothing more comes
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        # Set, so that run_asgi does not close the transport when the app returns;
        # the client's EOF closes it (eof_received), or this timer aborts it.
        self.close_timer = self.loop.call_later(LINGER_S, self.abort)


def abort_connection(ws: WebSocket) -> bool:
    """Abort `ws`'s transport, if the server offers it (see above); whether it did."""
    offered = ws.scope.get("extensions", {}).get(ABORT_EXTENSION)
    abort: Callable[[], None] | None = offered.get("abort") if offered else None
    if abort is None:
        return False
    abort()
    return True
