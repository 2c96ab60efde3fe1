"""A call's offer body (POST /v1/realtime/calls), read with a bound on its size.

Whatever its shape (SDP, JSON or multipart), the body is read as bytes first: refused
with 413 `request_too_large` when its Content-Length says it is over the limit, before
a byte is read, and when the bytes read pass the limit, at once. Only then is a
multipart body parsed, from those bytes, so no part of any size is ever read past the
limit (Starlette's `request.form` would read a file part to its end).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from starlette.datastructures import Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from server.auth import ApiError

MULTIPART = "multipart/form-data"
FORM_FIELDS = ("sdp", "session")


def media_type(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def too_large(limit: int) -> ApiError:
    return ApiError(413, "request_too_large", f"The request body is over {limit} bytes.")


async def read_body(request: Request, limit: int) -> bytes:
    """The body's bytes, refused (413) as soon as it is known to be over `limit`."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async with contextlib.aclosing(request.stream()) as stream:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
    return b"".join(chunks)


async def form_fields(headers: Headers, body: bytes, limit: int) -> dict[str, str]:
    """The `sdp` and `session` parts of a multipart body already read (as text)."""

    async def once() -> AsyncGenerator[bytes, None]:
        yield body

    parser = MultiPartParser(headers, once(), max_files=2, max_fields=4, max_part_size=limit)
    try:
        form = await parser.parse()
    except MultiPartException as exc:  # a malformed body
        raise ApiError(
            400, "invalid_request_error", f"The form cannot be read: {exc.message}"
        ) from None
    fields: dict[str, str] = {}
    try:
        for name in FORM_FIELDS:
            value = form.get(name)
            if isinstance(value, UploadFile):
                value = (await value.read()).decode(errors="replace")
            if value is not None:
                fields[name] = value
    finally:
        await form.close()
    return fields


async def offer_parts(request: Request, limit: int) -> tuple[str, bytes, dict[str, str] | None]:
    """The offer's content type, its body and, for a multipart body, its fields:
    what `server.calls.offer_of` reads the offer from."""
    content_type = request.headers.get("content-type", "")
    body = await read_body(request, limit)
    if media_type(content_type) != MULTIPART:
        return content_type, body, None
    return content_type, b"", await form_fields(request.headers, body, limit)
