"""MCP tools as OpenAI's Realtime API defines them (`{"type": "mcp", "server_label",
"server_url", "allowed_tools", "require_approval", "headers", "authorization"}`): the
server a session names, the tools it lists, and the two decisions about each tool,
as pure functions over immutable values.

- `allowed_tools` narrows what the model is offered: a list of names, or a filter
  (`tool_names`, `read_only`); absent, every listed tool is offered.
- `require_approval` says which calls wait for the client's `mcp_approval_response`:
  "always", "never", or filters under `always` / `never`. Absent, every call waits:
  OpenAI asks before sharing anything with a remote server by default. A tool that
  no filter names is asked about too.

`read_only` matches the tool's `readOnlyHint` annotation; a tool without the hint is
not read-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from engine.protocol.events import McpFilterIn, ToolIn

Approval = Literal["always", "never"]


@dataclass(frozen=True)
class ToolFilter:
    """OpenAI's MCP tool filter: by name, and/or by the read-only hint (both when
    both are given); an empty filter matches nothing."""

    tool_names: tuple[str, ...] | None = None
    read_only: bool | None = None

    def matches(self, tool: McpTool) -> bool:
        if self.tool_names is None and self.read_only is None:
            return False
        if self.tool_names is not None and tool.name not in self.tool_names:
            return False
        return self.read_only is None or tool.read_only == self.read_only


@dataclass(frozen=True)
class ApprovalFilter:
    always: ToolFilter | None = None
    never: ToolFilter | None = None


@dataclass(frozen=True)
class McpServer:
    """One `type: "mcp"` tool of a session: where the server is, how to reach it,
    and what of it the model may use."""

    label: str
    url: str
    # Secrets, kept out of reprs (and so out of logs).
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    authorization: str | None = field(default=None, repr=False)  # sent as a bearer token
    allowed: ToolFilter | None = None  # None: every tool listed
    approval: Approval | ApprovalFilter = "always"
    description: str = ""

    def request_headers(self) -> dict[str, str]:
        sent = dict(self.headers)
        if self.authorization:
            sent["Authorization"] = f"Bearer {self.authorization}"
        return sent


@dataclass(frozen=True)
class McpTool:
    """A tool as the server lists it; `input_schema` is JSON text (frozen)."""

    name: str
    description: str = ""
    input_schema: str = "{}"
    read_only: bool = False
    annotations: dict[str, object] | None = field(default=None, compare=False, hash=False)


def offered(tool: McpTool, server: McpServer) -> bool:
    """Whether the model is offered `tool` (`allowed_tools`)."""
    return server.allowed is None or server.allowed.matches(tool)


def needs_approval(tool: McpTool, server: McpServer) -> bool:
    """Whether a call of `tool` waits for the client's approval (`require_approval`):
    "never" and a matching `never` filter let it run; "always", a matching `always`
    filter, and a tool no filter names wait."""
    rule = server.approval
    if isinstance(rule, str):
        return rule == "always"
    if rule.always is not None and rule.always.matches(tool):
        return True
    return not (rule.never is not None and rule.never.matches(tool))


ErrorKind = Literal["tool_execution_error", "http_error", "protocol_error"]


@dataclass(frozen=True)
class McpError:
    """Why a listing or a call failed, in the shape of an `mcp_call` item's `error`:
    the tool reported an error, the server answered with an HTTP error status, or it
    broke the protocol (`code` is the HTTP status or the JSON-RPC error code)."""

    kind: ErrorKind
    message: str
    code: int | None = None

    def wire(self) -> dict[str, object]:
        out: dict[str, object] = {"type": self.kind, "message": self.message}
        if self.kind != "tool_execution_error":
            out["code"] = self.code if self.code is not None else 0
        return out


@dataclass(frozen=True)
class McpResult:
    """A call's outcome: the tool's text output, or an error."""

    output: str | None = None
    error: McpError | None = None


def _filter_of(sent: McpFilterIn | None) -> ToolFilter | None:
    if sent is None:
        return None
    names = None if sent.tool_names is None else tuple(sent.tool_names)
    return ToolFilter(names, sent.read_only)


def server_of(tool: ToolIn) -> McpServer:
    """A session's `type: "mcp"` tool, once `normalize` has checked that it has its
    label and URL."""
    assert tool.server_label is not None and tool.server_url is not None
    sent_allowed = tool.allowed_tools
    allowed = (
        ToolFilter(tuple(sent_allowed))
        if isinstance(sent_allowed, list)
        else _filter_of(sent_allowed)
    )
    rule = tool.require_approval
    approval: Approval | ApprovalFilter = (
        "always"
        if rule is None
        else rule
        if isinstance(rule, str)
        else ApprovalFilter(_filter_of(rule.always), _filter_of(rule.never))
    )
    return McpServer(
        tool.server_label,
        tool.server_url,
        tuple((tool.headers or {}).items()),
        tool.authorization,
        allowed,
        approval,
        tool.server_description or "",
    )
