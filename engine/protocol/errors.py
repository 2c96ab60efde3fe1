"""Refusals, reported to the client as OpenAI-style `error` events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

# Tags of the unions in `events`: pydantic puts a union member's tag in an error's
# location, and the client never sent it, so `param` leaves these out.
TAG_OBJECT, TAG_STRING, TAG_INTEGER, TAG_INF = "<object>", "<string>", "<integer>", "<inf>"
TAG_ARRAY = "<array>"
UNION_TAGS = frozenset({TAG_OBJECT, TAG_STRING, TAG_INTEGER, TAG_INF, TAG_ARRAY})

# Pydantic error type -> what the field takes, in OpenAI's words.
_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "string_type": "a string",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
    # the unions of `events`
    "int_or_inf_type": "an integer or 'inf'",
    "string_or_object_type": "a string or an object",
    "array_or_object_type": "an array or an object",
}


@dataclass
class ProtocolError(Exception):
    """A refusal reported to the client as an OpenAI-style `error` event."""

    code: str
    message: str
    param: str | None = None
    event_id: str | None = None
    type: str = "invalid_request_error"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def validation_error(exc: ValidationError, event_id: str | None) -> ProtocolError:
    """The first pydantic error as an OpenAI-style error: `param` is the path the
    client wrote (`session.tools[0].name`), a wrong JSON type is `invalid_type`."""
    first = exc.errors()[0]
    param = json_path(first["loc"])
    kind = first["type"]
    value = first.get("input")
    ctx: dict[str, Any] = first.get("ctx") or {}
    if kind == "missing":
        return ProtocolError(
            "missing_required_parameter", f"Missing required parameter: '{param}'.", param, event_id
        )
    expected = _EXPECTED.get(kind)
    if kind == "literal_error":
        if isinstance(value, str):
            return ProtocolError(
                "invalid_value",
                f"Invalid value: '{value[:64]}'. Supported values are: {ctx.get('expected')}.",
                param,
                event_id,
            )
        expected = f"one of {ctx.get('expected')}"
    if expected is not None:
        return ProtocolError(
            "invalid_type",
            f"Invalid type for '{param}': expected {expected}, but got {json_type(value)} instead.",
            param,
            event_id,
        )
    if kind == "json_too_deep":
        return ProtocolError(
            "invalid_value",
            f"Invalid value for '{param}': nesting exceeds the limit of {ctx.get('limit')} levels.",
            param,
            event_id,
        )
    return ProtocolError("invalid_value", f"Invalid '{param}': {first['msg']}.", param, event_id)


def json_path(loc: Sequence[int | str]) -> str:
    """A pydantic location as OpenAI writes a `param`: `tools[0].parameters`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part not in UNION_TAGS:
            path += f".{part}" if path else part
    return path


def json_type(value: object) -> str:
    """The JSON type of a value, as OpenAI names it in `invalid_type` messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: a bool is an int in Python
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return "an object"
