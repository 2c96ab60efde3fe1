"""The HTTP under an MCP connection: to the checked address only, answers read to a cap.

`pin` resolves a server's host once and checks every address (engine/mcp/egress.py);
`PinnedTransport` then sends every request to that address, the `Host` header and
TLS's server name (`sni_hostname`) staying the server's own name so the certificate
is verified against it. A name that resolves elsewhere later (DNS rebinding) is never
asked again. Answers are read through `CappedStream`: past the byte cap the answer
fails, so a hostile server cannot fill memory; compressed answers are refused, so the
cap is the size of what is parsed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2

from engine.mcp.egress import DEFAULT_PORTS, Target, address_refusal

# A host name and port to the addresses they resolve to (tests give their own).
Resolver = Callable[[str, int], Awaitable[list[str]]]


class EgressRefused(Exception):
    """A connection the policy refuses; nothing was sent."""


class AnswerTooLarge(Exception):
    """An answer went past the byte cap (or came compressed); it was not read on."""


async def resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def pin(target: Target, resolver: Resolver) -> str:
    """The one address a connection to `target` goes to, every address of its host
    checked; EgressRefused if any is refused or there is none."""
    try:
        addresses = [str(ipaddress.ip_address(target.host))]
    except ValueError:
        try:
            addresses = await resolver(target.host, target.port)
        except OSError as exc:
            raise EgressRefused(f"{target.host} could not be resolved ({exc})") from None
    if not addresses:
        raise EgressRefused(f"{target.host} has no address")
    for address in addresses:
        if (refused := address_refusal(address, explicit=target.explicit)) is not None:
            raise EgressRefused(f"{target.host}: {refused}")
    return addresses[0]


class CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, max_bytes: int) -> None:
        self._inner = inner
        self._left = max_bytes
        self._max = max_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._left -= len(chunk)
            if self._left < 0:
                raise AnswerTooLarge(f"the answer is larger than {self._max} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends `target`'s requests to `address`, its answers capped at `max_bytes`
    (over `inner`, tests' own; by default HTTP with no proxy from the environment)."""

    def __init__(
        self,
        target: Target,
        address: str,
        max_bytes: int,
        inner: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self._target = target
        self._address = address
        self._max_bytes = max_bytes
        self._inner = inner or httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url, target = request.url, self._target
        sent = (
            url.scheme,
            url.host.lower().removesuffix("."),
            url.port or DEFAULT_PORTS[url.scheme],
        )
        if sent != (target.scheme, target.host, target.port):
            raise EgressRefused(f"a request left {target.host}")  # never: no redirects
        extensions = dict(request.extensions)
        if target.scheme == "https":
            extensions["sni_hostname"] = target.host
        pinned = httpx2.Request(
            request.method,
            url.copy_with(host=self._address),
            headers=request.headers,  # with Host: the server's own name
            stream=request.stream,
            extensions=extensions,
        )
        response = await self._inner.handle_async_request(pinned)
        if response.headers.get("content-encoding", "identity").lower() != "identity":
            await response.aclose()
            raise AnswerTooLarge("the answer is compressed, which the byte cap cannot bound")
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=CappedStream(response.stream, self._max_bytes),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
