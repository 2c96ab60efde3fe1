"""Strict conformance of server events to the official SDK's types.

The SDK's models accept unknown fields silently (extra="allow"), so validating
against the union alone would let a misspelt field through. `assert_sdk_event`
validates against the discriminated union `RealtimeServerEvent`, as the Agents SDK
does, and then refuses any field the SDK does not declare, at any depth.
"""

from __future__ import annotations

from typing import Any

from openai import BaseModel
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

_ADAPTER: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)


def _no_extras(value: Any, path: str) -> None:
    if isinstance(value, BaseModel):
        extra = value.model_extra or {}
        assert not extra, f"{path}: fields unknown to the SDK: {sorted(extra)}"
        for name in value.model_fields_set:
            _no_extras(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _no_extras(v, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            _no_extras(v, f"{path}.{k}")


def assert_sdk_event(raw: dict[str, Any]) -> Any:
    """Validate one server event (decoded JSON); returns the SDK model."""
    model = _ADAPTER.validate_python(raw)
    _no_extras(model, raw.get("type", "?"))
    return model
