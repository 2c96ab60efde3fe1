"""A call's offer body is bounded whatever its shape (server/offer_body.py): a body
over the limit is refused with 413 before it is read past the limit, and a body
that declares its size over the limit before any of it is read."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from starlette.requests import Request
from starlette.types import Message

from server.auth import MAX_BODY_BYTES, ApiError
from server.calls import _read_offer

CHUNK = 64 * 1024
HUGE = 50 * 1024 * 1024
SDP = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"
BOUNDARY = "parleyboundary"


@dataclass
class CountingBody:
    """An ASGI `receive` that hands out a body in chunks and counts what it gave."""

    chunks: Iterator[bytes]
    given: int = 0

    async def __call__(self) -> Message:
        chunk = next(self.chunks, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        self.given += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}


def huge_body(head: bytes, tail: bytes) -> Iterator[bytes]:
    """`head`, 50 MB of filler, `tail`: made as it is read, never held whole."""
    yield head
    filler = b"x" * CHUNK
    for _ in range(HUGE // CHUNK):
        yield filler
    yield tail


def multipart() -> tuple[str, bytes, bytes]:
    """A multipart offer whose second part is a 50 MB file (its head and tail)."""
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="sdp"\r\n\r\n{SDP}\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="session"; filename="s.json"\r\n'
        "Content-Type: application/json\r\n\r\n"
    ).encode()
    return f"multipart/form-data; boundary={BOUNDARY}", head, f"\r\n--{BOUNDARY}--\r\n".encode()


SHAPES = {
    "multipart": multipart(),
    "sdp": ("application/sdp", SDP.encode(), b""),
    "json": ("application/json", b'{"sdp": "' + SDP.encode() + b'", "pad": "', b'"}'),
}


def request(content_type: str, body: CountingBody, length: int | None) -> Request:
    headers = [(b"content-type", content_type.encode())]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    scope = {"type": "http", "method": "POST", "path": "/v1/realtime/calls", "headers": headers}
    return Request(scope, body)


@pytest.mark.parametrize("shape", SHAPES)
async def test_an_oversize_offer_is_refused_before_it_is_read_past_the_limit(shape: str) -> None:
    content_type, head, tail = SHAPES[shape]
    size = len(head) + HUGE + len(tail)
    # Declared: refused before a byte is read.
    declared = CountingBody(huge_body(head, tail))
    with pytest.raises(ApiError) as refused:
        await _read_offer(request(content_type, declared, size))
    assert (refused.value.status, refused.value.code) == (413, "request_too_large")
    assert declared.given == 0
    # Streamed with no length: refused at the first chunk past the limit.
    streamed = CountingBody(huge_body(head, tail))
    with pytest.raises(ApiError) as refused:
        await _read_offer(request(content_type, streamed, None))
    assert (refused.value.status, refused.value.code) == (413, "request_too_large")
    assert MAX_BODY_BYTES < streamed.given <= MAX_BODY_BYTES + CHUNK
