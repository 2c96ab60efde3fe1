"""Refusals, reported to the client as OpenAI-style `error` events."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError


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
    """The first pydantic error as an OpenAI-style error with a dotted `param`."""
    first = exc.errors()[0]
    param = ".".join(str(part) for part in first["loc"])
    if first["type"] == "missing":
        return ProtocolError(
            "missing_required_parameter", f"Missing required parameter: '{param}'.", param, event_id
        )
    wrong_type = first["type"].endswith(("_type", "_parsing"))
    code = "invalid_type" if wrong_type else "invalid_value"
    return ProtocolError(code, f"Invalid '{param}': {first['msg']}.", param, event_id)
