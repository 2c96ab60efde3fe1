"""Strict types, as OpenAI checks them, over every field of every client event.

The cases are generated from the event models themselves: for each field, nested
ones included, a minimal valid event gets one wrong-but-coercible value ("500" for
an integer, `true` for a number, "yes" for a boolean, a number for a string...),
and the refusal must be `invalid_type` naming the field's path the way OpenAI
writes it (`session.tools[0].name`). A new field is covered by being declared.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from engine.protocol import ProtocolError, parse_client_event
from engine.protocol.errors import json_type
from engine.protocol.parse import EVENT_MODELS

# What each kind of field takes, in OpenAI's words, and values JSON can carry that
# a lax parser would coerce into it.
EXPECTED = {
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    str: "a string",
    "object": "an object",
    "array": "an array",
}
WRONG: dict[Any, list[Any]] = {
    int: ["500", True, 1.5, None],
    float: ["0.5", True, False],
    bool: ["yes", "true", 1, 0],
    str: [5, 1.5, True, {}],
    "object": ["x", 1, []],
    "array": ["x", {}],
}


def _strip(annotation: Any) -> tuple[Any, bool]:
    """The annotation without Annotated, and whether it was optional."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(members) < len(typing.get_args(annotation))
        if len(members) == 1:
            return _strip(members[0])[0], optional
        return typing.Union[tuple(members)], optional  # noqa: UP007
    return annotation, False


def _members(annotation: Any) -> list[Any]:
    return [_strip(a)[0] for a in typing.get_args(annotation)]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def sample(annotation: Any) -> Any:
    """A valid value of `annotation`."""
    annotation, _ = _strip(annotation)
    origin = typing.get_origin(annotation)
    if _is_model(annotation):
        return minimal(annotation)
    if origin is typing.Literal:
        return typing.get_args(annotation)[0]
    if origin in (typing.Union, types.UnionType):
        return sample(_members(annotation)[0])
    if origin is list:
        return [sample(typing.get_args(annotation)[0])]
    if origin is dict:
        return {"k": sample(typing.get_args(annotation)[1])}
    return {int: 1, float: 0.5, bool: True, str: "x", Any: 1}[annotation]


def minimal(model: type[BaseModel]) -> dict[str, Any]:
    """The required fields of `model`, each with a valid value."""
    return {
        name: sample(field.annotation)
        for name, field in model.model_fields.items()
        if field.is_required()
    }


def wrong_values(annotation: Any) -> Iterator[tuple[Any, str, str | None]]:
    """(value with one wrong leaf, path of that leaf, what the leaf expects): for the
    value itself and for every field nested in it. `expects` None: a union, whose
    wording is its own."""
    annotation, optional = _strip(annotation)
    origin = typing.get_origin(annotation)
    kind: Any
    if _is_model(annotation):
        kind = "object"
        base = minimal(annotation)
        for name, field in annotation.model_fields.items():
            for value, path, expects in wrong_values(field.annotation):
                yield {**base, name: value}, f".{name}{path}", expects
    elif origin is list:
        kind = "array"
        for value, path, expects in wrong_values(typing.get_args(annotation)[0]):
            yield [value], f"[0]{path}", expects
    elif origin is dict:
        kind = "object"
        value_type = typing.get_args(annotation)[1]
        if value_type is not Any:
            for value, path, expects in wrong_values(value_type):
                yield {"k": value}, f".k{path}", expects
    elif origin is typing.Literal:
        for value in (5, True):
            yield value, "", "one of"
        return
    elif origin in (typing.Union, types.UnionType):
        for member in _members(annotation):
            if _is_model(member):
                for name, field in member.model_fields.items():
                    for value, path, expects in wrong_values(field.annotation):
                        yield {**minimal(member), name: value}, f".{name}{path}", expects
        for value in (True, 1.5, []):
            yield value, "", None
        return
    else:
        kind = annotation
    for value in WRONG[kind]:
        if not (value is None and optional):
            yield value, "", EXPECTED[kind]


def cases() -> Iterator[Any]:
    for kind, model in EVENT_MODELS.items():
        base = {**minimal(model), "type": kind}
        for name, field in model.model_fields.items():
            if name == "type":
                continue
            for value, path, expects in wrong_values(field.annotation):
                param = f"{name}{path}"
                yield pytest.param({**base, name: value}, param, expects, id=f"{kind}:{param}")


CASES = list(cases())


def test_every_event_and_field_is_covered() -> None:
    """Guards the generator: every event model yields cases, deep fields too."""
    params = {case.values[1] for case in CASES}
    assert {str(case.id).split(":")[0] for case in CASES} >= set(EVENT_MODELS) - {
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "output_audio_buffer.clear",
    }
    for deep in (
        "session.audio.input.turn_detection.silence_duration_ms",
        "session.audio.output.speed",
        "session.tools[0].name",
        "session.tool_choice.name",
        "response.input[0].content[0].text",
        "response.metadata.k",
        "item.content[0].audio",
        "audio_end_ms",
        "event_id",
    ):
        assert deep in params


@pytest.mark.parametrize(("event", "param", "expects"), CASES)
def test_wrong_type_is_invalid_type_naming_the_field(
    event: dict[str, Any], param: str, expects: str | None
) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_client_event(json.dumps(event), 1 << 20)
    error = info.value
    assert (error.type, error.code, error.param) == ("invalid_request_error", "invalid_type", param)
    prefix = f"Invalid type for '{param}': expected "
    assert error.message.startswith(prefix), error.message
    if expects is not None:
        assert error.message.startswith(prefix + expects), error.message
    got = json_type(json.loads(json.dumps(event_value(event, param))))
    assert error.message.endswith(f", but got {got} instead."), error.message


def event_value(event: Any, param: str) -> Any:
    """The value at an OpenAI-style path."""
    for part in param.replace("[", ".").replace("]", "").split("."):
        event = event[int(part)] if isinstance(event, list) else event[part]
    return event


@pytest.mark.parametrize(
    ("session", "field"),
    [
        ({"audio": {"input": {"turn_detection": {"threshold": 1}}}}, "threshold"),
        ({"audio": {"output": {"speed": 1}}}, "speed"),
    ],
)
def test_an_integer_is_a_number(session: dict[str, Any], field: str) -> None:
    """JSON has one number type: 1 is a fine value for a float field."""
    parse_client_event(json.dumps({"type": "session.update", "session": session}), 1 << 20)


def test_every_float_field_takes_an_integer() -> None:
    floats = [case for case in CASES if case.values[2] == "a number"]
    assert floats
    for case in floats:
        event, param = case.values[0], case.values[1]
        holder = event
        *parents, last = param.replace("[", ".").replace("]", "").split(".")
        for part in parents:
            holder = holder[int(part)] if isinstance(holder, list) else holder[part]
        holder[last] = 1
        parse_client_event(json.dumps(event), 1 << 20)


@pytest.mark.parametrize(
    ("event", "param", "message"),
    [
        (
            {"type": "session.update", "session": {"max_output_tokens": "500"}},
            "session.max_output_tokens",
            "Invalid type for 'session.max_output_tokens': expected an integer or 'inf', "
            "but got a string instead.",
        ),
        (
            {"type": "session.update", "session": {"tool_choice": 5}},
            "session.tool_choice",
            "Invalid type for 'session.tool_choice': expected a string or an object, "
            "but got an integer instead.",
        ),
        (
            {"type": "session.update", "session": {"turn_detection": {"type": "x"}}},
            "session.turn_detection.type",
            "Invalid value: 'x'. Supported values are: 'server_vad' or 'semantic_vad'.",
        ),
    ],
)
def test_unions_and_enums_name_the_field(event: dict[str, Any], param: str, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_client_event(json.dumps(event), 1 << 20)
    assert (info.value.param, info.value.message) == (param, message)


@pytest.mark.parametrize(
    "session",
    [
        {"max_output_tokens": "inf"},
        {"max_output_tokens": 100},
        {"max_response_output_tokens": "inf"},
        {"tool_choice": "auto"},
        {"tool_choice": "get_weather"},
        {"tool_choice": {"type": "function", "name": "get_weather"}},
    ],
)
def test_every_union_member_is_still_accepted(session: dict[str, Any]) -> None:
    parse_client_event(json.dumps({"type": "session.update", "session": session}), 1 << 20)
