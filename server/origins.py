"""Which web pages may open sessions: the browser's `Origin`, checked at the WebSocket
upgrade (/v1/realtime) and at the WebRTC offer (POST /v1/realtime/calls).

A browser sends `Origin` with every WebSocket upgrade and every cross-origin POST, and
a page cannot forge it; SDKs and servers send none, and are not affected. Neither
route is protected by CORS: a WebSocket upgrade never is, and a `text/plain` offer is a
"simple" request that needs no preflight. So without this check any page a user
visits could drive a server the user can reach (a keyless one on their own machine).

A page is allowed when it is the server's own, or the operator listed its origin
(`allowed_origins`, PARLEY_ALLOWED_ORIGINS; `*` allows any). The server's own page is
one whose Origin names the host and port the request was sent to (its `Host`).
Schemes are not compared: behind a TLS-terminating proxy the page is `https` while
Parley sees plain `ws`/`http`; the browser leaves the port out of both headers
exactly when it is its scheme's default, so a `Host` without a port stands for the
Origin's default port. A keyless server trusts its own page only on a loopback
`Host` (localhost, 127.0.0.0/8, ::1): with DNS rebinding, any site can make its page
look same-origin to a server on the user's machine.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from urllib.parse import urlsplit

from server.exposure import is_loopback

ANY = "*"
NULL = "null"  # what sandboxed frames and file:// pages send
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(netloc: str, default_port: int | None) -> tuple[str, int | None] | None:
    """(host, port) of `host[:port]`, lower-cased, IPv6 without brackets; None when it
    is not one (a path, credentials, a bad port)."""
    try:
        parts = urlsplit("//" + netloc)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.path or parts.query or parts.fragment or "@" in netloc:
        return None
    return parts.hostname, port if port is not None else default_port


def parse_origin(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an `http(s)://host[:port]` origin, else None."""
    scheme, sep, rest = origin.strip().partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in _DEFAULT_PORTS:
        return None
    found = _host_port(rest, _DEFAULT_PORTS[scheme])
    if found is None or found[1] is None:
        return None
    return scheme, found[0], found[1]


def normalize_origin(origin: str) -> str:
    """An allowlist entry as browsers write origins (`https://host[:port]`, the
    default port left out), `*` or `null`; ValueError for anything else."""
    text = origin.strip()
    if text in (ANY, NULL):
        return text
    parsed = parse_origin(text.rstrip("/"))
    if parsed is None:
        raise ValueError(
            f"{origin!r} is not an origin: write scheme://host[:port] (http or https), "
            "'null' or '*'"
        )
    scheme, host, port = parsed
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" if port == _DEFAULT_PORTS[scheme] else f"{scheme}://{shown}:{port}"


def origin_allowed(
    origin: str | None, host: str | None, allowed: Collection[str], *, open_server: bool
) -> bool:
    """Whether a request with this `Origin` and `Host` may go on. `allowed` holds
    normalized entries (normalize_origin); `open_server`: the server has no API keys."""
    if origin is None:
        return True  # not a browser: SDKs and servers send no Origin
    if ANY in allowed:
        return True
    if origin.strip() == NULL:
        return NULL in allowed
    try:
        if normalize_origin(origin) in allowed:
            return True
    except ValueError:
        return False  # not an origin a browser would send
    parsed = parse_origin(origin)
    assert parsed is not None  # normalize_origin accepted it
    _, origin_host, origin_port = parsed
    own = _host_port(host or "", origin_port)
    if own is None or own != (origin_host, origin_port):
        return False
    return not open_server or is_loopback(origin_host)


def check_origin(
    headers: Mapping[str, str], allowed: Collection[str], *, open_server: bool
) -> None:
    """Raise ApiError 403 for a page that may not open sessions here."""
    # Imported here: the settings read this module (normalize_origin) before the
    # app's modules load, and server.auth loads the protocol's (server/cli.py).
    from server.auth import ApiError

    if not origin_allowed(
        headers.get("origin"), headers.get("host"), allowed, open_server=open_server
    ):
        raise ApiError(
            403,
            "origin_not_allowed",
            "Requests from this web page's origin are not allowed. The server's operator "
            "can allow it with PARLEY_ALLOWED_ORIGINS.",
        )
