"""The session fields beyond audio and tools: `prompt`, `tracing`, `include`,
`reasoning`, `parallel_tool_calls` and a voice given as `{id}`; each accepted,
validated, applied (or refused naming the field) and echoed in the SDK's shape."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from openai.types.realtime import RealtimeSessionCreateRequest

from engine.observer import Observer
from engine.prompts import PromptLibrary, render, resolve_prompt, with_prompt
from engine.protocol import PromptRefIn, ProtocolError, SessionUpdate, parse_client_event
from engine.response import ResponseRequest, response_prompt
from engine.session_config import SessionConfig, apply_update, to_wire
from engine.tracing import MAX_NAME, TraceNames, safe_name, trace_label
from models.base import Prompt, Tool
from models.openai_compat import chat_tools
from tests.support.harness import Harness

BASE = SessionConfig(model="m")
LIBRARY = PromptLibrary(
    {
        "support": "You help {{customer}} with {{ product }}.",
        "support@2": "Version two for {{customer}}.",
        "plain": "Speak plainly.",
        "only@1": "Only versioned.",
    }
)


def update(session: dict[str, Any]) -> SessionUpdate:
    event = parse_client_event(json.dumps({"type": "session.update", "session": session}), 1 << 20)
    assert isinstance(event, SessionUpdate)
    return event


def applied(session: dict[str, Any], prompts: PromptLibrary | None = LIBRARY) -> SessionConfig:
    return apply_update(
        BASE, update(session).session, audio_started=False, event_id="evt", prompts=prompts
    )


def refusal(session: dict[str, Any], prompts: PromptLibrary | None = LIBRARY) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        applied(session, prompts)
    assert caught.value.event_id == "evt"
    return caught.value


def echoed(config: SessionConfig) -> dict[str, Any]:
    """The wire session, checked against the SDK's own type."""
    wire = to_wire(config)
    RealtimeSessionCreateRequest.model_validate(wire, strict=True)
    return wire


# --- each field round-trips -------------------------------------------------------------

SENT: list[dict[str, Any]] = [
    {"prompt": {"id": "support", "variables": {"customer": "Ada", "product": "tea"}}},
    {"prompt": {"id": "support", "version": "2", "variables": {"customer": "Bo"}}},
    {"prompt": {"id": "plain"}},
    {"tracing": "auto"},
    {"tracing": {"workflow_name": "desk", "group_id": "g1", "metadata": {"shift": "night"}}},
    {"tracing": None},
    {"include": ["item.input_audio_transcription.logprobs"]},
    {"include": []},
    {"reasoning": {"effort": "low"}},
    {"parallel_tool_calls": False},
    {"parallel_tool_calls": True},
    {"truncation": "disabled"},
    {"truncation": "auto"},
    {"truncation": {"type": "retention_ratio", "retention_ratio": 0.8}},
    {
        "truncation": {
            "type": "retention_ratio",
            "retention_ratio": 0.5,
            "token_limits": {"post_instructions": 5000},
        }
    },
]


@pytest.mark.parametrize("session", SENT, ids=lambda s: json.dumps(s)[:50])
def test_each_field_is_echoed_as_sent(session: dict[str, Any]) -> None:
    wire = echoed(applied(session))
    for name, value in session.items():
        assert wire[name] == value


def test_a_prompt_variable_given_as_input_text_is_echoed_in_that_shape() -> None:
    variables = {"customer": {"type": "input_text", "text": "Cy"}, "product": "jam"}
    config = applied({"prompt": {"id": "support", "variables": variables}})
    assert echoed(config)["prompt"] == {"id": "support", "variables": variables}
    assert config.prompt is not None and config.prompt.text == "You help Cy with jam."


@pytest.mark.parametrize("voice", [{"id": "marin"}, "marin", {"id": "voice_1234"}, "cedar"])
def test_a_voice_is_echoed_in_the_shape_it_came_and_used_by_name(voice: Any) -> None:
    config = applied({"audio": {"output": {"voice": voice}}})
    assert config.voice == (voice["id"] if isinstance(voice, dict) else voice)
    assert echoed(config)["audio"]["output"]["voice"] == voice


def test_the_same_voice_as_an_id_is_no_change_once_spoken() -> None:
    spoke = apply_update(
        BASE, update({"audio": {"output": {"voice": "ash"}}}).session, audio_started=False
    )
    same = apply_update(
        spoke, update({"audio": {"output": {"voice": {"id": "ash"}}}}).session, audio_started=True
    )
    assert same.voice == "ash" and same.voice_as_id
    with pytest.raises(ProtocolError) as caught:
        apply_update(
            spoke,
            update({"audio": {"output": {"voice": {"id": "echo"}}}}).session,
            audio_started=True,
        )
    assert caught.value.param == "session.audio.output.voice"


def test_fields_absent_stay_and_defaults_are_echoed() -> None:
    config = applied({"tracing": "auto", "parallel_tool_calls": False})
    later = apply_update(config, update({"instructions": "x"}).session, audio_started=False)
    wire = echoed(later)
    assert (wire["tracing"], wire["parallel_tool_calls"]) == ("auto", False)
    fresh = echoed(BASE)
    assert (fresh["prompt"], fresh["tracing"], fresh["include"]) == (None, None, None)
    assert fresh["truncation"] == "auto"
    assert echoed(applied({"truncation": None}))["truncation"] == "auto"  # null: the default
    assert "reasoning" not in fresh and "parallel_tool_calls" not in fresh
    assert applied({"prompt": {"id": "plain"}, "reasoning": {"effort": "high"}}) != BASE
    cleared = apply_update(
        applied({"prompt": {"id": "plain"}, "reasoning": {"effort": "high"}}),
        update({"prompt": None, "reasoning": None}).session,
        audio_started=False,
    )
    assert echoed(cleared)["prompt"] is None and "reasoning" not in echoed(cleared)


# --- refusals name the field ------------------------------------------------------------


@pytest.mark.parametrize(
    ("session", "code", "param"),
    [
        ({"include": ["item.logprobs"]}, "invalid_value", "session.include[0]"),
        (
            {"include": ["item.input_audio_transcription.logprobs", "x"]},
            "invalid_value",
            "session.include[1]",
        ),
        ({"tracing": "on"}, "invalid_value", "session.tracing"),
        ({"tracing": {"workflow_name": 3}}, "invalid_type", "session.tracing.workflow_name"),
        ({"reasoning": {"effort": "max"}}, "invalid_value", "session.reasoning.effort"),
        ({"parallel_tool_calls": "yes"}, "invalid_type", "session.parallel_tool_calls"),
        ({"audio": {"output": {"voice": {}}}}, "missing_required_parameter", None),
        ({"audio": {"output": {"voice": 7}}}, "invalid_type", "session.audio.output.voice"),
        (
            {"audio": {"output": {"voice": {"id": ""}}}},
            "invalid_value",
            "session.audio.output.voice.id",
        ),
        ({"prompt": {"version": "1"}}, "missing_required_parameter", "session.prompt.id"),
        ({"truncation": "sometimes"}, "invalid_value", "session.truncation"),
        (
            {"truncation": {"type": "retention_ratio", "retention_ratio": 1.5}},
            "invalid_value",
            "session.truncation.retention_ratio",
        ),
        (
            {"truncation": {"type": "retention_ratio"}},
            "missing_required_parameter",
            "session.truncation.retention_ratio",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_field(
    session: dict[str, Any], code: str, param: str | None
) -> None:
    with pytest.raises(ProtocolError) as caught:
        update(session)
    assert caught.value.code == code
    assert caught.value.param == (param or "session.audio.output.voice.id")


@pytest.mark.parametrize(
    ("prompt", "code", "param"),
    [
        ({"id": "nope"}, "invalid_value", "session.prompt.id"),
        ({"id": "support", "version": "9"}, "invalid_value", "session.prompt.version"),
        ({"id": "only"}, "invalid_value", "session.prompt.version"),
        ({"id": "support"}, "missing_required_parameter", "session.prompt.variables.customer"),
        (
            {"id": "support", "variables": {"customer": {"type": "input_image"}, "product": "x"}},
            "unsupported_value",
            "session.prompt.variables.customer",
        ),
    ],
)
def test_prompt_refusals(prompt: dict[str, Any], code: str, param: str) -> None:
    error = refusal({"prompt": prompt})
    assert (error.code, error.param) == (code, param)


@pytest.mark.parametrize(
    "prompt_id",
    ["../support", "/etc/passwd", "support/../plain", "sup port", "support.txt", "..", "a\nb", ""],
)
def test_a_prompt_id_is_a_plain_name_never_a_path(prompt_id: str) -> None:
    error = refusal({"prompt": {"id": prompt_id}})
    assert (error.code, error.param) == ("invalid_value", "session.prompt.id")


@pytest.mark.parametrize("version", ["../2", "/2", ".hidden", "2/x", "a b"])
def test_a_prompt_version_is_a_plain_name(version: str) -> None:
    error = refusal({"prompt": {"id": "support", "version": version}})
    assert (error.code, error.param) == ("invalid_value", "session.prompt.version")


def test_without_prompts_configured_a_prompt_is_refused() -> None:
    error = refusal({"prompt": {"id": "plain"}}, prompts=None)
    assert (error.code, error.param) == ("unsupported_value", "session.prompt.id")
    assert "PARLEY_PROMPTS_DIR" in error.message


# --- the decisions, directly ------------------------------------------------------------


def test_render_substitutes_variables_and_names_a_missing_one() -> None:
    assert render("Hi {{name}}, {{ name }}!", {"name": "Al"}) == "Hi Al, Al!"
    assert render("No {braces} here.", {}) == "No {braces} here."
    with pytest.raises(KeyError, match="who"):
        render("Hi {{who}}", {})


def test_a_variable_value_is_not_rendered_again() -> None:
    ref = resolve_prompt(
        PromptRefIn(id="support", variables={"customer": "{{product}}", "product": "tea"}),
        LIBRARY,
    )
    assert ref.text == "You help {{product}} with tea."


def test_the_prompt_goes_before_the_instructions() -> None:
    ref = resolve_prompt(PromptRefIn(id="plain"), LIBRARY)
    assert with_prompt(ref, "Be brief.") == "Speak plainly.\n\nBe brief."
    assert with_prompt(ref, "") == "Speak plainly."
    assert with_prompt(None, "Be brief.") == "Be brief."


@pytest.mark.parametrize(
    ("tracing", "label"),
    [
        (None, None),
        ("auto", "trace=auto"),
        (TraceNames(), "trace=auto"),
        (TraceNames("desk", "g1"), "workflow=desk group=g1"),
        (TraceNames(group_id="g1"), "group=g1"),
        (TraceNames("a\nINFO forged line\r"), "workflow=a?INFO forged line?"),
        (TraceNames("x] [sess_other"), "workflow=x? ?sess_other"),
        (TraceNames("\u2028\x1b[31m"), "workflow=???31m"),
    ],
)
def test_the_trace_label_is_safe_for_a_log_line(tracing: Any, label: str | None) -> None:
    assert trace_label(tracing) == label


def test_a_trace_name_is_cut_to_its_bound() -> None:
    assert len(safe_name("w" * 1000)) == MAX_NAME


def model_prompt(config: SessionConfig, instructions: str | None = None) -> Prompt:
    """The model's prompt for a client's response.create over no items."""
    request = ResponseRequest(from_client=True, instructions=instructions)
    return response_prompt(
        "r", request, (), config, "s", modalities=("audio",), max_output_tokens="inf"
    )


def test_the_session_settings_reach_the_model_prompt() -> None:
    config = applied(
        {
            "prompt": {"id": "plain"},
            "instructions": "Be brief.",
            "reasoning": {"effort": "minimal"},
            "parallel_tool_calls": False,
        }
    )
    prompt = model_prompt(config)
    assert prompt.instructions == "Speak plainly.\n\nBe brief."
    assert (prompt.parallel_tool_calls, prompt.reasoning_effort) == (False, "minimal")
    asked = model_prompt(config, instructions="Other.")
    assert asked.instructions == "Speak plainly.\n\nOther."


def test_chat_requests_carry_parallel_tool_calls_and_reasoning_effort() -> None:
    config = applied({"reasoning": {"effort": "high"}, "parallel_tool_calls": False})
    base = model_prompt(config)
    assert chat_tools(base) == {"reasoning_effort": "high"}  # no tools: no tool settings
    tool = Tool("f", "d", "{}")
    with_tools = chat_tools(replace(base, tools=(tool,)))
    assert with_tools["parallel_tool_calls"] is False
    assert with_tools["reasoning_effort"] == "high"
    plain = model_prompt(BASE)
    assert "parallel_tool_calls" not in chat_tools(replace(plain, tools=(tool,)))
    assert "reasoning_effort" not in chat_tools(plain)


# --- in a session -------------------------------------------------------------------------


class Traces(Observer):
    def __init__(self) -> None:
        self.labels: list[str | None] = []

    def tracing_set(self, session_id: str, label: str | None) -> None:
        self.labels.append(label)


async def test_tracing_is_told_to_the_observer_when_it_changes() -> None:
    traces = Traces()
    async with Harness(observer=traces) as h:
        tracing = {"workflow_name": "desk\nforged", "group_id": "g1"}
        await h.send({"type": "session.update", "session": {"tracing": tracing}})
        await h.send({"type": "session.update", "session": {"instructions": "x"}})
        await h.send({"type": "session.update", "session": {"tracing": None}})
        await h.settle()
    assert traces.labels == ["workflow=desk?forged group=g1", None]
    first = h.of("session.updated")[0]["session"]
    assert first["tracing"] == tracing  # echoed as sent; only the label is cleaned


async def test_a_prompt_applies_and_an_unknown_one_leaves_the_session_as_it_was() -> None:
    async with Harness(prompts=LIBRARY) as h:
        prompt = {"id": "plain"}
        await h.send({"type": "session.update", "session": {"prompt": prompt}})
        await h.send(
            {"type": "session.update", "event_id": "e2", "session": {"prompt": {"id": "nope"}}}
        )
        await h.settle()
        assert h.session.config.prompt is not None
        assert h.session.config.prompt.text == "Speak plainly."
    (updated,) = h.of("session.updated")
    assert updated["session"]["prompt"] == prompt
    (error,) = h.errors()
    assert (error["code"], error["param"], error["event_id"]) == (
        "invalid_value",
        "session.prompt.id",
        "e2",
    )
