"""Where MCP servers may be (engine/mcp/egress.py), as pure decisions: the operator's
allowlist and public mode over a URL, the addresses a host may resolve to, the
headers a client may not set, and a session's MCP tools refused naming the field."""

from __future__ import annotations

import json

import pytest

from engine.mcp.egress import (
    OFF,
    McpPolicy,
    Origin,
    address_refusal,
    header_refusal,
    parse_origin,
    policy_of,
    target_of,
    tools_refusal,
    url_refusal,
)
from engine.protocol import SessionUpdate, parse_client_event

LISTED = policy_of(
    [
        "https://mcp.example.com",
        "https://*.tools.example/mcp",
        "http://10.0.0.5:9000",
        "http://127.0.0.1:8123/mcp/",
    ],
    public=False,
)
PUBLIC = McpPolicy(public=True)


def test_origins_parse_with_their_default_port_and_path_prefix() -> None:
    assert parse_origin("https://MCP.example.com") == Origin("https", "mcp.example.com", 443)
    assert parse_origin("https://*.tools.example/mcp/") == Origin(
        "https", ".tools.example", 443, "/mcp"
    )
    assert parse_origin("http://[::1]:9000") == Origin("http", "::1", 9000)


@pytest.mark.parametrize(
    "entry",
    ["ftp://x.example", "https://user@x.example", "https://x.example/?q=1", "https://*.10.0.0.1"],
)
def test_a_bad_origin_is_refused(entry: str) -> None:
    with pytest.raises(ValueError):
        parse_origin(entry)


# (url, policy, allowed)
URLS = [
    ("https://mcp.example.com/anything", LISTED, True),
    ("https://mcp.example.com:443/x?y=1", LISTED, True),
    ("https://MCP.EXAMPLE.COM./x", LISTED, True),  # case and a trailing dot
    ("http://mcp.example.com/", LISTED, False),  # listed for https only
    ("https://mcp.example.com:8443/", LISTED, False),  # another port
    ("https://evil.example/", LISTED, False),
    ("https://mcp.example.com.evil.example/", LISTED, False),
    ("https://a.tools.example/mcp", LISTED, True),
    ("https://a.b.tools.example/mcp/sub", LISTED, True),
    ("https://tools.example/mcp", LISTED, False),  # *.suffix: names under it only
    ("https://a.tools.example/mcpx", LISTED, False),  # a prefix of whole segments
    ("https://a.tools.example/other", LISTED, False),
    ("https://a.tools.example/mcp/../admin", LISTED, False),
    ("https://a.tools.example/mcp/%2e%2e/admin", LISTED, False),
    ("https://a.tools.example/mcp%2fadmin", LISTED, False),
    ("http://10.0.0.5:9000/mcp", LISTED, True),  # http where the entry says http
    ("http://10.0.0.5/mcp", LISTED, False),
    ("http://127.0.0.1:8123/mcp", LISTED, True),
    ("http://127.0.0.1:8123/internal/admin?action=probe", LISTED, False),
    ("https://user:pw@mcp.example.com/", LISTED, False),  # userinfo
    ("https://mcp.example.com/", OFF, False),
    ("https://mcp.example.com/", PUBLIC, True),
    ("http://mcp.example.com/", PUBLIC, False),  # public servers: https only
    ("https://localhost/", PUBLIC, False),
    ("https://a.localhost/", PUBLIC, False),
    ("https://127.0.0.1/", PUBLIC, False),
    ("https://[::1]/", PUBLIC, False),
    ("https://[::ffff:127.0.0.1]/", PUBLIC, False),
    ("https://169.254.169.254/latest/meta-data", PUBLIC, False),
    ("https://127.1/", PUBLIC, False),  # what resolvers read as addresses
    ("https://2130706433/", PUBLIC, False),
    ("https://0x7f.0.0.1/", PUBLIC, False),
    ("https://8.8.8.8/", PUBLIC, True),
    ("https://[2001:4860:4860::8888]/", PUBLIC, True),
    ("file:///etc/passwd", PUBLIC, False),
    ("https:///nohost", PUBLIC, False),
    ("https://x.example:99999/", PUBLIC, False),
]


@pytest.mark.parametrize(("url", "policy", "allowed"), URLS)
def test_urls_the_policy_allows(url: str, policy: McpPolicy, allowed: bool) -> None:
    refused = url_refusal(url, policy)
    assert (refused is None) == allowed, refused


def test_a_listed_origin_is_explicit_and_a_public_one_is_not() -> None:
    listed = target_of("http://127.0.0.1:8123/mcp", LISTED)
    assert not isinstance(listed, str) and listed.explicit
    public = target_of("https://mcp.example.org/", PUBLIC)
    assert not isinstance(public, str) and not public.explicit
    assert (public.host, public.port, public.path) == ("mcp.example.org", 443, "/")


# (address, refused unless the origin is listed)
ADDRESSES = [
    ("8.8.8.8", False),
    ("2001:4860:4860::8888", False),
    ("127.0.0.1", True),
    ("127.5.5.5", True),
    ("::1", True),
    ("10.1.2.3", True),
    ("172.16.0.1", True),
    ("192.168.1.1", True),
    ("169.254.169.254", True),  # cloud metadata
    ("fe80::1", True),
    ("100.64.0.1", True),  # CGNAT
    ("fc00::1", True),  # ULA
    ("fd12:3456::1", True),
    ("224.0.0.1", True),  # multicast
    ("ff02::1", True),
    ("240.0.0.1", True),  # reserved
    ("255.255.255.255", True),
    ("0.0.0.0", True),
    ("::", True),
    ("192.0.2.1", True),  # documentation
    ("::ffff:127.0.0.1", True),  # IPv4-mapped
    ("::ffff:169.254.169.254", True),
    ("::ffff:8.8.8.8", False),
    ("2002:7f00:1::", True),  # 6to4 of 127.0.0.1
    ("2002:0808:0808::", False),  # 6to4 of 8.8.8.8
    ("64:ff9b::a00:1", True),  # NAT64 of 10.0.0.1
    ("::127.0.0.1", True),  # IPv4-compatible
    ("not-an-address", True),
]


@pytest.mark.parametrize(("address", "refused"), ADDRESSES)
def test_addresses_a_connection_may_go_to(address: str, refused: bool) -> None:
    assert (address_refusal(address, explicit=False) is not None) == refused
    if address != "not-an-address":
        assert address_refusal(address, explicit=True) is None  # the operator listed it


@pytest.mark.parametrize(
    "name",
    ["Host", "connection", "Keep-Alive", "Proxy-Authorization", "TE", "Trailer",
     "Transfer-Encoding", "Upgrade", "Content-Length", " host "],
)  # fmt: skip
def test_headers_a_client_may_not_set(name: str) -> None:
    assert header_refusal(name) is not None


def test_other_headers_are_the_clients() -> None:
    assert header_refusal("X-Team") is None and header_refusal("Authorization") is None


def update(*tools: dict[str, object]) -> SessionUpdate:
    event = {"type": "session.update", "event_id": "evt_9", "session": {"tools": list(tools)}}
    parsed = parse_client_event(json.dumps(event), 1 << 20)
    assert isinstance(parsed, SessionUpdate)
    return parsed


def mcp(url: str, **fields: object) -> dict[str, object]:
    return {"type": "mcp", "server_label": "s", "server_url": url, **fields}


FUNCTION = {"type": "function", "name": "f"}
SECOND = "session.tools[1]"


@pytest.mark.parametrize(
    ("tools", "policy", "code", "param"),
    [
        ([FUNCTION, mcp("https://mcp.example.com/")], OFF, "mcp_disabled", f"{SECOND}.server_url"),
        ([FUNCTION, mcp("https://evil.example/")], LISTED, "mcp_server_not_allowed",
         f"{SECOND}.server_url"),
        ([mcp("https://mcp.example.com/", headers={"Host": "internal"})], LISTED,
         "mcp_header_not_allowed", "session.tools[0].headers"),
        ([mcp("https://mcp.example.com/")] * 3, McpPolicy(public=True, max_servers=2),
         "too_many_mcp_servers", "session.tools"),
    ],
)  # fmt: skip
def test_a_sessions_mcp_tools_are_refused_naming_the_field(
    tools: list[dict[str, object]], policy: McpPolicy, code: str, param: str
) -> None:
    refused = tools_refusal(update(*tools).session.tools, policy, "evt_9")
    assert refused is not None
    assert (refused.code, refused.param, refused.event_id) == (code, param, "evt_9")
    assert refused.type == "invalid_request_error"


def test_tools_the_policy_allows_and_no_mcp_at_all_pass() -> None:
    allowed = update(FUNCTION, mcp("https://mcp.example.com/", headers={"X-Team": "blue"}))
    assert tools_refusal(allowed.session.tools, LISTED) is None
    assert tools_refusal(update(FUNCTION).session.tools, OFF) is None
    assert tools_refusal(None, OFF) is None
