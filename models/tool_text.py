"""Function calling for models whose prompt Parley writes itself (the in-process
vLLM executor, the cascade with a model that calls tools): the tools in the prompt,
the call in the model's text, and the two ways a call is asked for.

- `tool_choice` "auto": the tools go into the system prompt in the Hermes format
  that Qwen's chat templates use (Qwen2.5, Qwen3, Qwen3-Omni), and the model writes
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` when it calls one;
  vLLM's `hermes` tool parser reads it (the cascade: `hermes_calls`, the same rules).
  What the model says before the tag is spoken; the tag and what follows are held
  back from the speech.
- A named function, or "required": the answer is constrained to JSON by vLLM's
  structured outputs (as `vllm serve` does it): the function's arguments, or a list
  of calls. Nothing is spoken.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from models.base import Tool

CALL_START = "<tool_call>"
CALL_END = "</tool_call>"

# Qwen2.5's chat template, word for word, around the tools' JSON.
_TOOLS_HEAD = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def tool_schema(tool: Tool) -> dict[str, Any]:
    """A session's function tool as Chat Completions and chat templates write it."""
    function: dict[str, Any] = {"name": tool.name, "parameters": json.loads(tool.parameters)}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def tools_block(tools: tuple[Tool, ...]) -> str:
    """What the system prompt ends with when the model may call `tools`."""
    lines = "".join("\n" + json.dumps(tool_schema(t), ensure_ascii=False) for t in tools)
    return _TOOLS_HEAD + lines + _TOOLS_TAIL


def call_text(name: str | None, arguments: str | None) -> str:
    """An earlier call, as the model writes one."""
    try:
        args: Any = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        args = arguments
    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"{CALL_START}\n{body}\n{CALL_END}"


def result_text(output: str | None) -> str:
    """A call's result, as the user's turn carries it."""
    return f"<tool_response>\n{output or ''}\n</tool_response>"


def template_calls_tools(chat_template: str) -> bool:
    """Whether a model's chat template writes calls in the Hermes format (Qwen2.5's,
    Qwen3's, Hermes'), so the model was trained to call tools that way."""
    return CALL_START in chat_template and "tools" in chat_template


_CALLS = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


def hermes_calls(text: str) -> list[tuple[str, str]]:
    """The calls in text from a `<tool_call>` on, read as vLLM's hermes parser reads
    them: each tag's JSON (the last may be unclosed), (name, arguments JSON) pairs;
    nothing when one of them is not a well-formed call."""
    try:
        found = [json.loads(a or b) for a, b in _CALLS.findall(text)]
        return [(str(c["name"]), json.dumps(c["arguments"], ensure_ascii=False)) for c in found]
    except (json.JSONDecodeError, KeyError, TypeError):
        return []


def forced_schema(tools: tuple[Tool, ...], choice: str) -> dict[str, Any] | None:
    """The JSON the answer must be for `choice`: the named function's parameters, or
    for "required" a non-empty list of calls to any of `tools`; None for "auto"."""
    if choice in ("auto", "none"):
        return None
    if choice != "required":
        tool = next((t for t in tools if t.name == choice), None)
        return None if tool is None else dict(json.loads(tool.parameters))
    one_of = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": json.loads(t.parameters)},
            "required": ["name", "arguments"],
        }
        for t in tools
    ]
    return {"type": "array", "minItems": 1, "items": {"anyOf": one_of}}


def forced_calls(text: str, choice: str) -> list[tuple[str, str]] | None:
    """The calls in an answer constrained by `forced_schema`: (name, arguments JSON)
    pairs; None when the text is not the JSON it had to be (cut at the token limit)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if choice != "required":
        if not isinstance(value, dict):
            return None
        return [(choice, json.dumps(value, ensure_ascii=False))]
    if not isinstance(value, list):
        return None
    calls = [
        (str(c["name"]), json.dumps(c.get("arguments", {}), ensure_ascii=False))
        for c in value
        if isinstance(c, dict) and "name" in c
    ]
    return calls or None


@dataclass
class CallSplitter:
    """Streams an "auto" answer's text: what is said before a `<tool_call>` tag goes
    on to be spoken, the tag and everything after it is held for the tool parser. The
    tail of the text that could still begin the tag waits for the next piece."""

    held: str = ""
    _pending: str = ""

    @property
    def calling(self) -> bool:
        return bool(self.held)

    def feed(self, piece: str) -> str:
        """The part of `piece` (and of what waited) that can be spoken now."""
        if self.held:
            self.held += piece
            return ""
        text = self._pending + piece
        start = text.find(CALL_START)
        if start >= 0:
            self._pending, self.held = "", text[start:]
            return text[:start]
        keep = _partial_tag(text)
        self._pending = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def end(self) -> str:
        """The rest to speak at the end of the answer."""
        rest, self._pending = self._pending, ""
        return rest


async def said_before_call(
    pieces: AsyncGenerator[str, None], splitter: CallSplitter
) -> AsyncGenerator[str, None]:
    """An answer's text up to a tool call; the call is held in `splitter`."""
    async with contextlib.aclosing(pieces):
        async for piece in pieces:
            if text := splitter.feed(piece):
                yield text
    if text := splitter.end():
        yield text


def _partial_tag(text: str) -> int:
    """How many characters at the end of `text` could be the start of CALL_START."""
    for n in range(min(len(CALL_START) - 1, len(text)), 0, -1):
        if CALL_START.startswith(text[-n:]):
            return n
    return 0
