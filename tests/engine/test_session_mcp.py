"""MCP tools in a session (engine/mcp/tools.py, engine/mcp/calls.py): a server
the session names is listed into the conversation, its tools are offered to the model,
a call runs inside the response (or waits for the client's approval) and the answer
reads its result; a barge-in or a cancel cuts a running call. The scripted model calls
the first tool it is offered with the samples it heard. A fake MCP client makes the
interleavings exact; the last test runs a local MCP server for real."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bench.speech import load_wav
from engine.mcp.client import StreamableHttpMcp
from engine.mcp.rules import McpError, McpResult
from server.app import create_app
from server.config import Settings
from tests.support.harness import Harness
from tests.support.mcp_server import SCHEMA, FakeMcp, local_mcp
from tests.support.servers import TEST_SETTINGS

MANUAL = {
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}


def mcp_update(**fields: Any) -> dict[str, Any]:
    tool = {"type": "mcp", "server_label": "shop", "server_url": "https://shop.example/mcp"}
    return {
        "type": "session.update",
        "session": {"type": "realtime", "tools": [{**tool, **fields}]},
    }


async def ask(h: Harness) -> None:
    await h.append(load_wav("weather"))
    await h.send({"type": "input_audio_buffer.commit"})
    await h.send({"type": "response.create"})
    await h.settle()


async def test_an_mcp_server_is_listed_when_the_session_names_it() -> None:
    async with Harness(mcp_client=FakeMcp()) as h:
        await h.send(
            mcp_update(
                allowed_tools=["count"], headers={"X-Key": "hdr-xyzzy"}, authorization="auth-plugh"
            )
        )
        await h.settle()
        (updated,) = h.of("session.updated")
        (tool,) = updated["session"]["tools"]
        assert tool["type"] == "mcp" and tool["server_url"] == "https://shop.example/mcp"
        assert "xyzzy" not in json.dumps(updated) and "plugh" not in json.dumps(updated)
        types = h.types()
        start = types.index("session.updated")
        assert types[start:] == [
            "session.updated",
            "conversation.item.added",
            "mcp_list_tools.in_progress",
            "mcp_list_tools.completed",
            "conversation.item.done",
        ]
        added, done = h.of("conversation.item.added")[0], h.of("conversation.item.done")[0]
        assert added["item"]["type"] == "mcp_list_tools" and added["item"]["tools"] == []
        assert [t["name"] for t in done["item"]["tools"]] == ["count"]  # allowed_tools
        assert done["item"]["tools"][0]["input_schema"] == json.loads(SCHEMA)
        assert not h.errors()


async def test_a_session_given_no_client_refuses_mcp_servers() -> None:
    """Sessions built without an MCP client (tests, benchmarks) have MCP off: the
    server is refused at session.update, the session lives on unchanged."""
    async with Harness() as h:
        await h.send(mcp_update(require_approval="never"))
        await h.send({"type": "session.update", "session": {"instructions": "Still here."}})
        await h.settle()
        (error,) = h.errors()
        assert (error["code"], error["param"]) == ("mcp_disabled", "session.tools[0].server_url")
        (updated,) = h.of("session.updated")
        assert updated["session"]["tools"] == []
        assert not h.of("conversation.item.added") and not h.of("mcp_list_tools.in_progress")


def test_the_server_hands_every_session_its_one_client() -> None:
    hub = create_app(Settings(**TEST_SETTINGS)).state.hub
    one, two = hub.new_session("m"), hub.new_session("m")
    assert isinstance(one.mcp.client, StreamableHttpMcp) and one.mcp.client is two.mcp.client


async def test_a_listing_that_fails_says_so_and_offers_nothing() -> None:
    fake = FakeMcp(listing=McpError("http_error", "down", 503))
    async with Harness(mcp_client=fake) as h:
        await h.send(mcp_update(require_approval="never"))
        await h.settle()
        assert [e["item_id"] for e in h.of("mcp_list_tools.failed")] == [
            h.of("conversation.item.added")[0]["item"]["id"]
        ]
        await h.send(MANUAL)
        await ask(h)
        assert h.responses_done()[0]["output"][0]["type"] == "message"  # no tool offered
        assert fake.calls == []


async def test_an_mcp_call_runs_and_the_answer_reads_its_result() -> None:
    fake = FakeMcp()
    async with Harness(mcp_client=fake) as h:
        await h.send(mcp_update(require_approval="never"))
        await h.send(MANUAL)
        await h.settle()
        await ask(h)
        done = h.responses_done()[0]
        assert done["status"] == "completed", done
        call, answer = done["output"]
        samples = len(load_wav("weather"))
        assert call["type"] == "mcp_call" and call["name"] == "count"
        assert call["server_label"] == "shop" and call["output"] == f"count said {samples}"
        assert call["error"] is None and json.loads(call["arguments"]) == {"samples": samples}
        assert answer["content"][0]["transcript"] == f"The tool said count said {samples}."
        assert fake.calls == [("shop", "count", {"samples": samples})]
        kinds = [e["type"] for e in h.events if "mcp_call" in e["type"]]
        assert kinds == [
            "response.mcp_call_arguments.delta",
            "response.mcp_call_arguments.done",
            "response.mcp_call.in_progress",
            "response.mcp_call.completed",
        ]
        # The call stands before the answer, in the conversation and the next prompt.
        ids = [i.id for i in h.session.conversation.items]
        assert ids.index(call["id"]) + 1 == ids.index(answer["id"])
        second = h.scripted.prompts[-1]
        assert [i.kind for i in second.items][-2:] == ["function_call", "function_call_output"]
        assert second.tool_choice == "auto"
        assert not h.errors()


async def test_a_call_waits_for_approval_and_runs_once_approved() -> None:
    fake = FakeMcp()
    async with Harness(mcp_client=fake) as h:
        await h.send(mcp_update())  # require_approval: "always" by default
        await h.send(MANUAL)
        await h.settle()
        await ask(h)
        (request,) = h.responses_done()[0]["output"]
        assert request["type"] == "mcp_approval_request" and request["name"] == "count"
        assert fake.calls == []
        wrong = {"type": "mcp_approval_response", "approval_request_id": "nope", "approve": True}
        await h.send({"type": "conversation.item.create", "item": wrong})
        await h.settle()
        assert [e["code"] for e in h.errors()] == ["item_not_found"]
        answer = {**wrong, "approval_request_id": request["id"]}
        await h.send({"type": "conversation.item.create", "item": answer})
        await h.send({"type": "response.create"})
        await h.settle()
        call, spoken = h.responses_done()[1]["output"]
        assert call["type"] == "mcp_call" and call["approval_request_id"] == request["id"]
        assert spoken["content"][0]["transcript"].startswith("The tool said count said")
        assert len(fake.calls) == 1
        await h.send({"type": "response.create"})  # approved calls run once
        await h.settle()
        assert len(fake.calls) == 1


async def test_a_denied_call_never_runs() -> None:
    fake = FakeMcp()
    async with Harness(mcp_client=fake) as h:
        await h.send(mcp_update())
        await h.send(MANUAL)
        await h.settle()
        await ask(h)
        (request,) = h.responses_done()[0]["output"]
        answer = {
            "type": "mcp_approval_response",
            "approval_request_id": request["id"],
            "approve": False,
            "reason": "not now",
        }
        await h.send({"type": "conversation.item.create", "item": answer})
        await h.settle()
        (created,) = [
            e for e in h.of("conversation.item.done") if e["item"]["type"] == answer["type"]
        ]
        assert created["item"]["approve"] is False and created["item"]["reason"] == "not now"
        await h.send({"type": "response.create"})
        await h.settle()
        assert fake.calls == []


async def test_a_failing_call_is_reported_and_answered() -> None:
    error = McpError("tool_execution_error", "no such order")
    fake = FakeMcp(results={"count": McpResult(error=error)})
    async with Harness(mcp_client=fake) as h:
        await h.send(mcp_update(require_approval="never"))
        await h.send(MANUAL)
        await h.settle()
        await ask(h)
        call, answer = h.responses_done()[0]["output"]
        assert call["error"] == {"type": "tool_execution_error", "message": "no such order"}
        assert call["output"] is None and h.of("response.mcp_call.failed")
        assert answer["content"][0]["transcript"] == "The tool said Error: no such order."


async def test_a_cancel_cuts_a_running_call() -> None:
    fake = FakeMcp(hold_calls=asyncio.Event())
    async with Harness(mcp_client=fake) as h:
        await h.send(mcp_update(require_approval="never"))
        await h.send(MANUAL)
        await h.settle()
        await h.append(load_wav("weather"))
        await h.send({"type": "input_audio_buffer.commit"})
        await h.send({"type": "response.create"})
        await h.run_until(lambda: bool(h.of("response.mcp_call.in_progress")))
        await h.send({"type": "response.cancel"})
        await h.settle()
        (done,) = h.responses_done()
        assert done["status"] == "cancelled"
        (call,) = done["output"]
        assert call["error"]["message"] == "The call was cancelled with its response."
        assert fake.cancelled == ["count"]  # the call itself was stopped
        assert not h.of("response.mcp_call.completed")


async def test_an_mcp_tool_call_on_a_local_mcp_server() -> None:
    """The `mcp` package's own server, over Streamable HTTP: listed, called, answered."""
    async with local_mcp() as server, Harness(mcp_client=StreamableHttpMcp(server.policy)) as h:
        tool = {
            "type": "mcp",
            "server_label": "orders",
            "server_url": server.url,
            "allowed_tools": ["count_samples"],
            "require_approval": {"never": {"read_only": True}},
            "authorization": "tok",
        }
        await h.send({"type": "session.update", "session": {"tools": [tool]}})
        await h.send(MANUAL)
        await h.wait_until(lambda: bool(h.of("mcp_list_tools.completed")), 30)
        await h.append(load_wav("weather"))
        await h.send({"type": "input_audio_buffer.commit"})
        await h.send({"type": "response.create"})
        await h.wait_until(lambda: bool(h.responses_done()), 30)
        call, answer = h.responses_done()[0]["output"]
        samples = len(load_wav("weather"))
        assert call["output"] == f"{samples} samples counted", call
        assert answer["content"][0]["transcript"] == f"The tool said {samples} samples counted."
        assert server.calls == [("count_samples", {"samples": samples})]
        assert all(hd.get("authorization") == "Bearer tok" for hd in server.headers)
        assert not h.errors()


async def test_a_function_tool_keeps_a_name_an_mcp_server_also_lists() -> None:
    """The model is offered the function `count`, not the server's: its call is the
    client's function call, and the server is never called."""
    fake = FakeMcp()
    count = {"type": "function", "name": "count", "parameters": json.loads(SCHEMA)}
    update = mcp_update(require_approval="never")
    update["session"]["tools"].append(count)
    async with Harness(mcp_client=fake) as h:
        await h.send(update)
        await h.send(MANUAL)
        await h.settle()
        await ask(h)
        (call,) = h.responses_done()[0]["output"]
        assert call["type"] == "function_call" and call["name"] == "count"
        assert [t.name for t in h.scripted.prompts[-1].tools] == ["count", "erase"]
        assert fake.calls == []
