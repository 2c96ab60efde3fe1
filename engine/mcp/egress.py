"""Where a session's MCP servers may be, as pure decisions over the operator's policy.

Parley sits inside its operator's network, beside vLLM, /metrics and cloud metadata;
a client that could name any URL as an MCP server would make Parley its proxy into
that network. So MCP is off unless the operator opens it (server/config.py):

- an allowlist of origins, `scheme://host[:port][/path-prefix]`, the host exact or
  `*.suffix` (any name under the suffix). An origin the operator lists is trusted
  wherever it resolves, even to a private address (an internal MCP server).
- and/or `public`: any https server whose every address is public.

A URL is checked when the session names it (`url_refusal`, `header_refusal`,
`tools_refusal`): a refused one is an `error`, and nothing is sent to it. When
Parley connects, the host is resolved once and every address checked
(`address_refusal`); the connection goes to that checked address (client.py), so a
name that resolves elsewhere the second time (DNS rebinding) changes nothing.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from engine.protocol.errors import ProtocolError
from engine.protocol.events import ToolIn

# What one session or one hostile server can cost (the operator's caps, constants
# because no deployment needs other values; McpPolicy carries them for the tests).
MAX_SERVERS = 8  # MCP servers one session may name (each is listed at once)
MAX_ANSWER_BYTES = 1 << 20  # one HTTP answer of a server, read at most this far
MAX_PAGES = 8  # tools/list pages read; a listing stops (and keeps what it has) there
MAX_TOOLS = 128  # tools kept of one server; the rest are dropped (and logged)
MAX_SCHEMA_BYTES = 16 << 10  # a tool whose input schema is larger is dropped
MAX_SCHEMA_DEPTH = 32  # ... or nested deeper
# Connections to MCP servers open at once in the process; a listing or call past it
# waits its turn within its deadline (a burst is served late rather than failed,
# and the deadline still bounds the wait).
MAX_CONNECTIONS = 32

DEFAULT_PORTS = {"http": 80, "https": 443}
# Headers a client may not set: the transport's own (Host picks the virtual host
# behind the checked address) and the hop-by-hop ones (RFC 9110 7.6.1).
FORBIDDEN_HEADERS = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "accept-encoding",  # answers are read uncompressed, so the byte cap is the size
    }
)
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_NUMERIC = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")  # what inet_aton would read as a number


@dataclass(frozen=True)
class Origin:
    """One allowlist entry: `host` is exact, or `.suffix` for `*.suffix`; `path` is
    "" or a prefix such as "/mcp" (matched whole segments only)."""

    scheme: str
    host: str
    port: int
    path: str = ""

    def matches(self, target: Target) -> bool:
        if (self.scheme, self.port) != (target.scheme, target.port):
            return False
        if self.host.startswith("."):
            if not target.host.endswith(self.host):
                return False
        elif self.host != target.host:
            return False
        prefix = self.path.rstrip("/")
        return not prefix or target.path == prefix or target.path.startswith(prefix + "/")


@dataclass(frozen=True)
class Target:
    """A URL's parts that decide where a connection goes."""

    scheme: str
    host: str  # lower case, no trailing dot; an IP literal in its usual form
    port: int
    path: str
    explicit: bool = False  # an allowlisted origin: its addresses are not checked


@dataclass(frozen=True)
class McpPolicy:
    """The operator's MCP policy (built by server/app.py from its settings)."""

    allowed: tuple[Origin, ...] = ()
    public: bool = False  # any https server whose addresses are all public
    max_servers: int = MAX_SERVERS
    max_answer_bytes: int = MAX_ANSWER_BYTES
    max_pages: int = MAX_PAGES
    max_tools: int = MAX_TOOLS
    max_schema_bytes: int = MAX_SCHEMA_BYTES
    max_schema_depth: int = MAX_SCHEMA_DEPTH
    max_connections: int = MAX_CONNECTIONS

    @property
    def enabled(self) -> bool:
        return self.public or bool(self.allowed)


OFF = McpPolicy()
OFF_MESSAGE = (
    "MCP is turned off on this server (its operator enables it with "
    "PARLEY_MCP_ALLOWED_ORIGINS or PARLEY_MCP_PUBLIC)."
)


def _host(raw: str) -> str | None:
    """`raw` (a URL's host) in canonical form, or None if it is no valid host: an IP
    literal in its usual form, or a DNS name whose last label is not numeric (so
    127.1, 2130706433 or 0x7f.1, which resolvers read as addresses, are refused)."""
    host = raw.lower().removesuffix(".")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    labels = host.split(".")
    if not all(_LABEL.match(label) for label in labels) or _NUMERIC.match(labels[-1]):
        return None
    return host


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_origin(entry: str) -> Origin:
    """An allowlist entry, or ValueError saying what is wrong with it."""
    parts = urlsplit(entry.strip())
    if parts.scheme not in DEFAULT_PORTS:
        raise ValueError(f"{entry!r}: the scheme must be http or https")
    if parts.username is not None or parts.query or parts.fragment:
        raise ValueError(f"{entry!r}: an origin has no user, query or fragment")
    raw = parts.hostname or ""
    wildcard = raw.startswith("*.")
    host = _host(raw[2:] if wildcard else raw)
    if host is None or (wildcard and _is_ip(host)):
        raise ValueError(f"{entry!r}: the host must be a name, *.suffix or an IP address")
    return Origin(
        parts.scheme,
        "." + host if wildcard else host,
        parts.port or DEFAULT_PORTS[parts.scheme],
        parts.path.rstrip("/"),
    )


def policy_of(origins: Sequence[str], public: bool) -> McpPolicy:
    return McpPolicy(tuple(parse_origin(o) for o in origins), public)


def target_of(url: str, policy: McpPolicy) -> Target | str:
    """Where `url` would connect, or why the policy refuses it (nothing is sent)."""
    if not policy.enabled:
        return OFF_MESSAGE
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "The server_url is not a valid URL."
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return "The server_url must be an https:// URL."
    if parts.username is not None or parts.password is not None:
        return "The server_url must not carry a user name or password."
    host = _host(parts.hostname)
    if host is None:
        return "The server_url's host must be a DNS name or an IP address in its usual form."
    path = parts.path or "/"
    if "\\" in path or re.search(r"%(2e|2f|5c)", path, re.I):
        return "The server_url's path must not hide dots or slashes."
    if any(segment in (".", "..") for segment in path.split("/")):
        return "The server_url's path must not contain . or .. segments."
    target = Target(parts.scheme, host, port or DEFAULT_PORTS[parts.scheme], path)
    if any(origin.matches(target) for origin in policy.allowed):
        return Target(target.scheme, host, target.port, path, explicit=True)
    if not policy.public:
        return "This server does not allow that MCP server (it is not on its allowlist)."
    if target.scheme != "https":
        return "The server_url must be an https:// URL."
    if host == "localhost" or host.endswith(".localhost"):
        return "The server_url must be a public server."
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        return target
    refused = address_refusal(str(literal), explicit=False)
    return target if refused is None else refused


def url_refusal(url: str, policy: McpPolicy) -> str | None:
    """Why the policy refuses `url` as an MCP server, or None."""
    target = target_of(url, policy)
    return target if isinstance(target, str) else None


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries: IPv4-mapped (::ffff:a.b.c.d), 6to4
    (2002::/16), NAT64 (64:ff9b::/96), IPv4-compatible (::a.b.c.d), Teredo's client."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in ipaddress.IPv6Network("64:ff9b::/96") or (
        address in ipaddress.IPv6Network("::/96") and int(address) > 1
    ):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_refusal(ip: str, *, explicit: bool) -> str | None:
    """Why a connection to `ip` is refused, or None: anything but a public unicast
    address (loopback, private, link-local with cloud metadata, CGNAT, ULA,
    multicast, reserved, unspecified, and IPv6 forms that carry such an IPv4 address),
    unless the operator listed the origin (`explicit`)."""
    if explicit:
        return None
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(ip)
    except ValueError:
        return f"{ip} is not an IP address."
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_v4(address)
        if embedded is not None:
            return address_refusal(str(embedded), explicit=False)
    if (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    ):
        return "The MCP server's address is not public (loopback, private, link-local, ...)."
    return None


def header_refusal(name: str) -> str | None:
    if name.strip().lower() in FORBIDDEN_HEADERS:
        return f"The header {name!r} is set by the server itself; a client may not send it."
    return None


def tools_refusal(
    tools: Sequence[ToolIn] | None, policy: McpPolicy, event_id: str | None = None
) -> ProtocolError | None:
    """Why the policy refuses the MCP tools of a session's `tools` (the first reason,
    naming its field), or None. Checked before the session applies them."""
    servers = [(i, t) for i, t in enumerate(tools or []) if t.type == "mcp"]
    if not servers:
        return None

    def refuse(code: str, message: str, param: str) -> ProtocolError:
        return ProtocolError(code, message, param, event_id)

    if not policy.enabled:
        return refuse("mcp_disabled", OFF_MESSAGE, f"session.tools[{servers[0][0]}].server_url")
    if len(servers) > policy.max_servers:
        return refuse(
            "too_many_mcp_servers",
            f"A session may name at most {policy.max_servers} MCP servers.",
            "session.tools",
        )
    for i, tool in servers:
        refused = url_refusal(tool.server_url or "", policy)
        if refused is not None:
            return refuse("mcp_server_not_allowed", refused, f"session.tools[{i}].server_url")
        for name in tool.headers or {}:
            if (refused := header_refusal(name)) is not None:
                return refuse("mcp_header_not_allowed", refused, f"session.tools[{i}].headers")
    return None
