"""What Parley keeps of an MCP server's tool listing, so that a hostile server's
listing costs a bounded amount of memory (and of the session's events, which echo the
tools) however it is written: at most `max_tools` tools and `max_answer_bytes` of
them, each with a name a model can call, a description cut at MAX_DESCRIPTION_CHARS
and a schema within `max_schema_bytes` and `max_schema_depth`. What is dropped is
logged once per listing, never sent to the client."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from engine.mcp.egress import McpPolicy
from engine.mcp.rules import McpTool

log = logging.getLogger(__name__)

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # what a model may be offered as a name
MAX_DESCRIPTION_CHARS = 4096


def schema_depth(value: Any, limit: int) -> int:
    """How deeply `value` (JSON data) nests, counted up to `limit` + 1 (no recursion)."""
    deepest, level = 0, [value]
    while level and deepest <= limit:
        deepest += 1
        level = [
            child
            for v in level
            for child in (v.values() if isinstance(v, dict) else v if isinstance(v, list) else ())
            if isinstance(child, dict | list)
        ]
    return deepest


def tool_of(tool: Any, policy: McpPolicy) -> McpTool | str:
    """A listed tool (the `mcp` package's `Tool`) as kept, or why it is dropped."""
    if not isinstance(tool.name, str) or not NAME.match(tool.name):
        return "a name a model cannot call"
    schema = tool.input_schema or {}
    if schema_depth(schema, policy.max_schema_depth) > policy.max_schema_depth:
        return "its input schema nests too deeply"
    text = json.dumps(schema)
    if len(text) > policy.max_schema_bytes:
        return "its input schema is too large"
    annotations = tool.annotations.model_dump(exclude_none=True) if tool.annotations else None
    read_only = bool(tool.annotations and tool.annotations.read_only_hint)
    description = (tool.description or "")[:MAX_DESCRIPTION_CHARS]
    return McpTool(tool.name, description, text, read_only, annotations)


def size_of(tool: McpTool) -> int:
    return (
        len(tool.name)
        + len(tool.description)
        + len(tool.input_schema)
        + len(json.dumps(tool.annotations or {}))
    )


class Listing:
    """The tools kept of one listing, page after page."""

    def __init__(self, policy: McpPolicy, label: str) -> None:
        self.policy = policy
        self.label = label
        self.tools: list[McpTool] = []
        self.dropped: dict[str, int] = {}  # why, how many
        self._bytes = 0

    @property
    def full(self) -> bool:
        return (
            len(self.tools) >= self.policy.max_tools or self._bytes >= self.policy.max_answer_bytes
        )

    def add(self, raw: Any) -> None:
        tool = tool_of(raw, self.policy)
        if not isinstance(tool, str) and self.full:
            tool = "past the caps on tools per server"
        if isinstance(tool, str):
            self.dropped[tool] = self.dropped.get(tool, 0) + 1
            return
        self.tools.append(tool)
        self._bytes += size_of(tool)

    def report(self, pages_left: bool) -> None:
        if pages_left:
            log.info(
                "MCP server %s: listing stopped at %d pages", self.label, self.policy.max_pages
            )
        for why, count in self.dropped.items():
            log.info("MCP server %s: %d tools dropped: %s", self.label, count, why)
