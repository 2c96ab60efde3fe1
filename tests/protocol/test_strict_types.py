"""Strict types, as OpenAI checks them, over every field of every client event.

The cases are generated from the event models themselves: for each field, nested
ones included, a minimal valid event gets one wrong-but-coercible value ("500" for
an integer, `true` for a number, "yes" for a boolean, a number for a string...),
and the refusal must be `invalid_type` naming the field's path the way OpenAI
writes it (`session.tools[0].name`). A new field is covered by being declared.
"""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

import openai.types.realtime as sdk_types
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
        arrays = any(typing.get_origin(m) is list for m in _members(annotation))
        for value in (True, 1.5, "x" if arrays else []):  # of no member's type
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


# --- the field types are the SDK's -------------------------------------------------------

# Each event model's counterpart in the official SDK, the authority on field types.
SDK_EVENTS = {
    kind: getattr(sdk_types, name)
    for kind, name in {
        "session.update": "SessionUpdateEvent",
        "input_audio_buffer.commit": "InputAudioBufferCommitEvent",
        "input_audio_buffer.clear": "InputAudioBufferClearEvent",
        "response.create": "ResponseCreateEvent",
        "response.cancel": "ResponseCancelEvent",
        "conversation.item.truncate": "ConversationItemTruncateEvent",
        "conversation.item.create": "ConversationItemCreateEvent",
        "conversation.item.retrieve": "ConversationItemRetrieveEvent",
        "conversation.item.delete": "ConversationItemDeleteEvent",
        "output_audio_buffer.clear": "OutputAudioBufferClearEvent",
    }.items()
}
# Beta spellings: GA clients never send them, the beta SDK types them alike.
# Parley's own extensions, which no SDK types (engine/interruption.py,
# engine/postponed_speech.py).
PARLEY_ONLY = re.compile(
    r"\.turn_detection\.interruption\b|\.audio\.input\.echo_cancellation\b"
    r"|^response\.interruptible$"
)
# Read only to refuse it clearly: an image by `file_id`, as other OpenAI APIs take
# it (there is no files API).
REFUSED_ONLY = re.compile(r"\.content\.0\.file_id$")
BETA_ONLY = re.compile(
    r"session\.(modalities|voice|input_audio_format|output_audio_format|turn_detection"
    r"|input_audio_transcription|input_audio_noise_reduction|max_response_output_tokens)\b|\.max_response_output_tokens$"
    r"|response\.modalities$"
)

# Kinds the SDK types a field with that Parley refuses, and why.
NOT_TAKEN: dict[str, set[Any]] = {
    "session.audio.output.voice": {"object"},  # a custom voice: {"id": ...}
}


def kinds(annotation: Any) -> set[Any]:
    """The JSON kinds a (stripped) annotation takes."""
    annotation, _ = _strip(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return set().union(*(kinds(member) for member in typing.get_args(annotation)))
    if origin is typing.Literal:
        return {type(value) for value in typing.get_args(annotation)}
    if origin is list:
        return {"array"}
    if origin is dict or _is_model(annotation) or annotation in (object, Any):
        return {"object"}
    if annotation is type(None):
        return set()
    return {annotation}


def leaves(annotation: Any, path: tuple[str | int, ...] = ()) -> Iterator[Any]:
    """(path, annotation) of every field nested in `annotation`."""
    annotation, _ = _strip(annotation)
    origin = typing.get_origin(annotation)
    if _is_model(annotation):
        for name, field in annotation.model_fields.items():
            yield (*path, name), field.annotation
            yield from leaves(field.annotation, (*path, name))
    elif origin is list:
        yield from leaves(typing.get_args(annotation)[0], (*path, 0))
    elif origin in (typing.Union, types.UnionType):
        for member in typing.get_args(annotation):
            yield from leaves(member, path)


def sdk_at(annotation: Any, path: tuple[str | int, ...]) -> set[Any] | None:
    """The kinds the SDK takes at `path`, or None where no SDK type has it."""
    annotation, _ = _strip(annotation)
    if not path:
        return kinds(annotation)
    origin = typing.get_origin(annotation)
    step, rest = path[0], path[1:]
    if origin in (typing.Union, types.UnionType):
        found = [sdk_at(member, path) for member in typing.get_args(annotation)]
        hits = [f for f in found if f is not None]
        return set().union(*hits) if hits else None
    if origin is list and isinstance(step, int):
        return sdk_at(typing.get_args(annotation)[0], rest)
    if _is_model(annotation) and isinstance(step, str) and step in annotation.model_fields:
        return sdk_at(annotation.model_fields[step].annotation, rest)
    return None


def test_every_field_takes_the_json_kinds_the_sdk_types_it_with() -> None:
    checked = 0
    unknown = []
    for kind, model in EVENT_MODELS.items():
        for path, annotation in leaves(model):
            param = ".".join(str(p) for p in path)
            skipped = (BETA_ONLY, PARLEY_ONLY, REFUSED_ONLY)
            if path[-1] == "type" or any(p.search(param) for p in skipped):
                continue
            ours = kinds(annotation)
            sdk = sdk_at(SDK_EVENTS[kind], path)
            if sdk is None:
                unknown.append(f"{kind}:{param}")
                continue
            # Nothing the SDK refuses is taken, nothing it takes refused (but custom
            # voices, objects, which Parley has none of). A float takes an integer too.
            sdk_json = sdk | ({int} if float in sdk else set())
            ours_json = ours | ({int} if float in ours else set())
            assert ours <= sdk_json, f"{kind}:{param}: ours {ours}, the SDK's {sdk}"
            missing = sdk_json - ours_json - NOT_TAKEN.get(param, set())
            assert not missing, f"{kind}:{param}: ours {ours}, the SDK's {sdk}"
            checked += 1
    assert checked > 40
    # Fields Parley reads that this SDK does not type (its extensions aside).
    assert unknown == []


def test_every_event_model_is_strict() -> None:
    """The kinds above are what is taken only if no model coerces."""
    models = set(EVENT_MODELS.values())
    for model in EVENT_MODELS.values():
        for _, annotation in leaves(model):
            for member in [_strip(annotation)[0], *_members(_strip(annotation)[0])]:
                while typing.get_origin(member) is list:
                    member = _strip(typing.get_args(member)[0])[0]
                if _is_model(member):
                    models.add(member)
    assert len(models) > 15
    lax = [model.__name__ for model in models if not model.model_config.get("strict")]
    assert lax == []
