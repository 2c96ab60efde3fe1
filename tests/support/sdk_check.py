"""Strict conformance of server events to the official SDK's types, GA and beta.

The SDK's models accept unknown fields silently (extra="allow"), so validating
against the union alone would let a misspelt field through. `assert_sdk_event`
validates against the discriminated union `RealtimeServerEvent`, as the Agents SDK
does, and then refuses any field the SDK does not declare, at any depth;
`assert_beta_event` does the same against the SDK's beta union.
"""

from __future__ import annotations

import typing
from typing import Any

from openai import BaseModel
from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

_ADAPTER: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)
_BETA: TypeAdapter[Any] = TypeAdapter(BetaServerEvent)


def _no_extras(value: Any, path: str, types: str = "the SDK") -> None:
    if isinstance(value, BaseModel):
        extra = value.model_extra or {}
        assert not extra, f"{path}: fields unknown to {types}: {sorted(extra)}"
        for name in value.model_fields_set:
            _no_extras(getattr(value, name), f"{path}.{name}", types)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _no_extras(v, f"{path}[{i}]", types)
    elif isinstance(value, dict):
        for k, v in value.items():
            _no_extras(v, f"{path}.{k}", types)


def assert_sdk_event(raw: dict[str, Any]) -> Any:
    """Validate one server event (decoded JSON); returns the SDK model."""
    model = _ADAPTER.validate_python(raw)
    _no_extras(model, raw.get("type", "?"))
    return model


def assert_beta_event(raw: dict[str, Any]) -> Any:
    """Validate one server event against the SDK's beta union, strictly."""
    model = _BETA.validate_python(raw)
    _no_extras(model, raw.get("type", "?"), "the beta types")
    return model


def event_types(union: Any) -> dict[str, str]:
    """The event types of one of the SDK's unions, by model class name."""
    members = typing.get_args(typing.get_args(union)[0])  # Annotated[Union[...], ...]
    return {m.__name__: typing.get_args(m.model_fields["type"].annotation)[0] for m in members}
