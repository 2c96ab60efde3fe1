"""A WebSocket client on a plain blocking socket, which reads only when told to: for
clients that stop reading, or that send while the server closes. (Client libraries
read in the background, which hides both.) Run it in a thread from async tests."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from typing import Any

TEXT, CLOSE = 0x1, 0x8


def frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame. The mask is zeros, which leaves the payload as it is
    (RFC 6455 asks for a mask, not for an unpredictable one in tests)."""
    n = len(payload)
    if n < 126:
        length = bytes([0x80 | n])
    elif n < 1 << 16:
        length = bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        length = bytes([0x80 | 127]) + struct.pack("!Q", n)
    return bytes([0x80 | opcode]) + length + bytes(4) + payload


def parse_frames(data: bytes) -> list[tuple[int, bytes]]:
    """The server's (unmasked) frames in `data`, as (opcode, payload); a frame cut
    off at the end is left out."""
    frames = []
    at = 0
    while at + 2 <= len(data):
        opcode, n = data[at] & 0x0F, data[at + 1] & 0x7F
        at += 2
        if n == 126:
            (n,) = struct.unpack("!H", data[at : at + 2])
            at += 2
        elif n == 127:
            (n,) = struct.unpack("!Q", data[at : at + 8])
            at += 8
        if at + n > len(data):
            break
        frames.append((opcode, data[at : at + n]))
        at += n
    return frames


def close_code(frames: list[tuple[int, bytes]]) -> int | None:
    """The code of the first close frame, if there is one."""
    for opcode, payload in frames:
        if opcode == CLOSE:
            return int(struct.unpack("!H", payload[:2])[0]) if len(payload) >= 2 else 1005
    return None


class RawWebSocket:
    def __init__(self, port: int, *, receive_buffer: int | None = None) -> None:
        """Connect and upgrade. `receive_buffer` shrinks the socket's receive buffer
        (before connecting, so the window is small from the start)."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(30)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                "GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)  # byte by byte: frames after the head stay queued
            if not chunk:
                raise ConnectionError("closed during the handshake")
            head += chunk
        self.status = int(head.split()[1])

    def send(self, event: dict[str, Any]) -> None:
        self.sock.sendall(frame(TEXT, json.dumps(event).encode()))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_to_end(self) -> tuple[bytes, OSError | None]:
        """Everything until the server closes; with the error if it ended in one
        (a reset) rather than a clean end of stream."""
        data = b""
        try:
            while chunk := self.sock.recv(1 << 16):
                data += chunk
        except OSError as exc:
            return data, exc
        return data, None

    def close(self) -> None:
        self.sock.close()
