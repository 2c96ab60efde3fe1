"""A session.update is never dropped whole for one value Parley cannot honour."""

from __future__ import annotations

from typing import Any

from tests.support.harness import Harness
from tests.support.mcp_server import FakeMcp


def update(session: dict[str, Any], event_id: str = "evt_1") -> dict[str, Any]:
    return {
        "type": "session.update",
        "event_id": event_id,
        "session": {"type": "realtime", **session},
    }


async def test_semantic_vad_applies_with_the_rest_of_the_update() -> None:
    # LiveKit Agents' default: semantic_vad, transcription and voice together.
    async with Harness() as h:
        await h.send(
            update(
                {
                    "instructions": "Be brief.",
                    "audio": {
                        "input": {
                            "turn_detection": {"type": "semantic_vad", "eagerness": "auto"},
                            "transcription": {"model": "gpt-4o-mini-transcribe"},
                        },
                        "output": {"voice": "marin"},
                    },
                }
            )
        )
        await h.settle()
        assert h.errors() == []
        [updated] = h.of("session.updated")
        session = updated["session"]
        assert session["instructions"] == "Be brief."
        assert session["audio"]["output"]["voice"] == "marin"
        assert session["audio"]["input"]["transcription"] == {"model": "gpt-4o-mini-transcribe"}
        assert session["audio"]["input"]["turn_detection"] == {
            "type": "semantic_vad",
            "eagerness": "auto",
            "create_response": True,
            "interrupt_response": True,
        }


async def test_an_unsupported_speed_is_reported_and_the_rest_applies() -> None:
    async with Harness() as h:
        await h.send(
            update(
                {
                    "instructions": "Slowly.",
                    "audio": {"output": {"voice": "ash", "speed": 1.25}},
                }
            )
        )
        await h.settle()
        assert h.types()[-2:] == ["session.updated", "error"]
        [updated] = h.of("session.updated")
        assert updated["session"]["instructions"] == "Slowly."
        assert updated["session"]["audio"]["output"]["voice"] == "ash"
        [error] = h.errors()
        assert error["code"] == "unsupported_value"
        assert error["param"] == "session.audio.output.speed"
        assert error["event_id"] == "evt_1"
        # The session carries on with what was applied.
        await h.send(update({"instructions": "Again."}, "evt_2"))
        await h.settle()
        assert h.of("session.updated")[-1]["session"]["instructions"] == "Again."
        assert len(h.errors()) == 1


async def test_the_default_speed_is_no_error() -> None:
    async with Harness() as h:
        await h.send(update({"audio": {"output": {"speed": 1.0}}}))
        await h.settle()
        assert h.errors() == [] and len(h.of("session.updated")) == 1


async def test_noise_reduction_is_applied_and_echoed() -> None:
    async with Harness() as h:
        nr = {"type": "far_field"}
        await h.send(update({"instructions": "Hi.", "audio": {"input": {"noise_reduction": nr}}}))
        await h.settle()
        assert h.errors() == []
        session = h.of("session.updated")[0]["session"]
        assert session["instructions"] == "Hi."
        assert session["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
        assert h.session.input.denoiser is not None and h.session.input.denoiser.kind == "far_field"
        await h.send(update({"audio": {"input": {"noise_reduction": None}}}))
        await h.settle()
        assert h.of("session.updated")[1]["session"]["audio"]["input"]["noise_reduction"] is None
        assert h.session.input.denoiser is None


async def test_an_unknown_noise_reduction_is_refused_and_nothing_changes() -> None:
    async with Harness() as h:
        nr = {"type": "studio"}
        await h.send(update({"instructions": "No.", "audio": {"input": {"noise_reduction": nr}}}))
        await h.settle()
        [error] = h.errors()
        assert error["param"] == "session.audio.input.noise_reduction.type"
        assert h.of("session.updated") == [] and h.session.input.denoiser is None


async def test_a_value_openai_refuses_still_refuses_the_whole_update() -> None:
    async with Harness() as h:
        bad_vad = {"type": "semantic_vad", "eagerness": "eager"}
        await h.send(
            update({"instructions": "No.", "audio": {"input": {"turn_detection": bad_vad}}})
        )
        await h.settle()
        assert h.of("session.updated") == []
        [error] = h.errors()
        assert error["param"] == "session.audio.input.turn_detection.eagerness"


async def test_an_mcp_tool_applies_beside_the_function_tools() -> None:
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    mcp = {"type": "mcp", "server_label": "docs", "server_url": "https://example.invalid"}
    async with Harness(mcp_client=FakeMcp()) as h:
        await h.send(update({"instructions": "Tools.", "tools": [mcp, weather]}))
        await h.settle()
        [updated] = h.of("session.updated")
        assert updated["session"]["instructions"] == "Tools."
        tools = updated["session"]["tools"]
        assert [(t["type"], t.get("name", t.get("server_label"))) for t in tools] == [
            ("function", "get_weather"),
            ("mcp", "docs"),
        ]
        assert h.of("mcp_list_tools.completed") and not h.errors()


async def test_tools_that_cannot_apply_still_refuse_their_event() -> None:
    async with Harness() as h:
        # A function without its name: OpenAI refuses it, so the whole update is refused.
        await h.send(update({"instructions": "No.", "tools": [{"type": "function"}]}))
        # A response's MCP tool: nothing of a response can run without it.
        await h.send(
            {
                "type": "response.create",
                "event_id": "evt_2",
                "response": {"tools": [{"type": "mcp", "server_label": "docs"}]},
            }
        )
        await h.settle()
        assert h.of("session.updated") == [] and h.of("response.created") == []
        first, second = h.errors()
        assert (first["code"], first["param"], first["event_id"]) == (
            "missing_required_parameter",
            "session.tools[0].name",
            "evt_1",
        )
        assert (second["code"], second["param"], second["event_id"]) == (
            "unsupported_value",
            "response.tools[0].type",
            "evt_2",
        )
