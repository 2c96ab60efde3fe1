"""Free-form client JSON (tool schemas, noise_reduction) nests at most MAX_JSON_DEPTH
deep: deeper is refused where it is parsed, naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from engine.protocol import ProtocolError, SessionIn, parse_client_event, validation_error
from engine.protocol.nesting import MAX_JSON_DEPTH, nesting_exceeds


def nested(levels: int) -> dict[str, Any]:
    """An object `levels` objects and arrays deep."""
    value: Any = "leaf"
    for level in range(levels):  # arrays and objects in turn, an object outermost
        value = {"a": value} if (levels - level) % 2 else [value]
    assert isinstance(value, dict)
    return value


def schema(levels: int) -> dict[str, Any]:
    """A JSON schema with `levels` levels of properties (two JSON levels each)."""
    value: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        value = {"type": "object", "properties": {"a": value}}
    return value


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def test_nested_builds_what_it_says() -> None:
    assert [depth(nested(n)) for n in (1, 2, 3, 64)] == [1, 2, 3, 64]


@pytest.mark.parametrize(
    ("value", "levels"),
    [
        ("x", 0),
        ({}, 1),
        ([], 1),
        ({"a": [1, {"b": None}]}, 3),
        ([[], [[[]]], {}], 4),
        (nested(64), 64),
    ],
)
def test_nesting_exceeds_counts_objects_and_arrays(value: Any, levels: int) -> None:
    assert depth(value) == levels
    assert not nesting_exceeds(value, levels)
    assert nesting_exceeds(value, levels - 1) == (levels > 0)


def test_nesting_exceeds_is_not_recursive() -> None:
    assert nesting_exceeds(nested(100_000), MAX_JSON_DEPTH)


def tools_update(parameters: dict[str, Any]) -> dict[str, Any]:
    tool = {"type": "function", "name": "f", "parameters": parameters}
    return {"type": "session.update", "session": {"tools": [tool]}}


TOO_DEEP = [
    (tools_update(schema(300)), "session.tools[0].parameters"),
    (tools_update(nested(MAX_JSON_DEPTH + 1)), "session.tools[0].parameters"),
    (
        {
            "type": "response.create",
            "response": {"tools": [tools_update(schema(40))["session"]["tools"][0]]},
        },
        "response.tools[0].parameters",
    ),
]


@pytest.mark.parametrize(("event", "param"), TOO_DEEP)
def test_too_deep_is_refused_naming_the_field(event: dict[str, Any], param: str) -> None:
    event["event_id"] = "e1"
    with pytest.raises(ProtocolError) as info:
        parse_client_event(json.dumps(event), 1 << 22)
    error = info.value
    assert (error.type, error.code, error.param, error.event_id) == (
        "invalid_request_error",
        "invalid_value",
        param,
        "e1",
    )
    assert f"exceeds the limit of {MAX_JSON_DEPTH} levels" in error.message


@pytest.mark.parametrize("parameters", [nested(MAX_JSON_DEPTH), schema(MAX_JSON_DEPTH // 2 - 1)])
def test_deep_but_within_the_limit_is_accepted(parameters: dict[str, Any]) -> None:
    parse_client_event(json.dumps(tools_update(parameters)), 1 << 22)


def test_a_preset_session_is_bounded_too() -> None:
    """Ephemeral-key presets arrive as a bare session (server/auth.py validates
    them with SessionIn), outside any event: the limit holds there as well."""
    with pytest.raises(ValidationError) as info:
        SessionIn.model_validate(tools_update(schema(300))["session"])
    error = validation_error(info.value, None)
    assert (error.code, error.param) == ("invalid_value", "tools[0].parameters")
