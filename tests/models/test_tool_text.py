"""Function calling in prompts Parley writes (models/tool_text.py): the Hermes tools
block, the streamed split between speech and a call, and forced calls' JSON."""

from __future__ import annotations

import json

import pytest

from models.base import Tool
from models.tool_text import (
    CallSplitter,
    call_text,
    forced_calls,
    forced_schema,
    hermes_calls,
    result_text,
    template_calls_tools,
    tools_block,
)
from tests.support.tiny_gguf import QWEN25_TEMPLATE

ORDER = Tool(
    "lookup_order",
    "Look up an order.",
    json.dumps({"type": "object", "properties": {"order_id": {"type": "string"}}}),
)
CALL = '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "A1"}}\n</tool_call>'


def test_the_tools_block_is_qwens_with_each_tool_on_its_line() -> None:
    block = tools_block((ORDER,))
    assert block.startswith("\n\n# Tools\n")
    lines = block.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line)["function"]["name"] for line in lines] == ["lookup_order"]
    assert json.loads(lines[0])["function"]["description"] == "Look up an order."
    assert block.endswith("</tool_call>")


def test_earlier_calls_and_results_are_written_as_the_model_writes_them() -> None:
    assert call_text("lookup_order", '{"order_id": "A1"}') == CALL
    assert call_text("f", "not json").endswith('"arguments": "not json"}\n</tool_call>')
    assert result_text("shipped") == "<tool_response>\nshipped\n</tool_response>"


@pytest.mark.parametrize(
    "pieces",
    [
        ["Let me check. ", CALL],
        [
            "Let me check. <tool",
            '_call>\n{"name": "lookup_order", "arguments": ',
            '{"order_id": "A1"}}',
        ],
        list("Let me check. " + CALL),  # a character at a time
    ],
)
def test_the_splitter_speaks_up_to_the_call_and_holds_the_rest(pieces: list[str]) -> None:
    splitter = CallSplitter()
    spoken = "".join(splitter.feed(p) for p in pieces) + splitter.end()
    assert spoken == "Let me check. "
    assert splitter.calling
    assert splitter.held.startswith("<tool_call>\n{")
    assert "<" not in spoken


def test_the_splitter_passes_an_answer_without_a_call_whole() -> None:
    splitter = CallSplitter()
    first = splitter.feed("It is 3 < 4, and x <")
    assert first == "It is 3 < 4, and x "  # "<" could begin a tag: it waits
    assert first + splitter.feed("b.") == "It is 3 < 4, and x <b."
    assert splitter.feed(" <tool") == " "
    assert splitter.end() == "<tool"  # the answer ended: what waited is said
    assert not splitter.calling


def test_forced_schemas() -> None:
    other = Tool("ping", parameters='{"type": "object", "properties": {}}')
    assert forced_schema((ORDER,), "auto") is None
    assert forced_schema((ORDER,), "lookup_order") == json.loads(ORDER.parameters)
    assert forced_schema((ORDER,), "missing") is None
    required = forced_schema((ORDER, other), "required")
    assert required is not None and required["type"] == "array" and required["minItems"] == 1
    names = [a["properties"]["name"]["const"] for a in required["items"]["anyOf"]]
    assert names == ["lookup_order", "ping"]


def test_forced_calls_read_the_json_or_nothing() -> None:
    assert forced_calls('{"order_id":"A1"}', "lookup_order") == [
        ("lookup_order", '{"order_id": "A1"}')
    ]
    assert forced_calls('{"order_id":"A', "lookup_order") is None  # cut at the limit
    assert forced_calls("[1]", "lookup_order") is None
    two = '[{"name":"ping","arguments":{}},{"name":"lookup_order","arguments":{"order_id":"B"}}]'
    assert forced_calls(two, "required") == [
        ("ping", "{}"),
        ("lookup_order", '{"order_id": "B"}'),
    ]
    assert forced_calls("[]", "required") is None
    assert forced_calls('{"name": "ping"}', "required") is None


def test_hermes_calls_read_every_tag_or_nothing() -> None:
    two = CALL + "\n" + CALL.replace('"A1"', '"B2"')
    assert hermes_calls(two) == [
        ("lookup_order", '{"order_id": "A1"}'),
        ("lookup_order", '{"order_id": "B2"}'),
    ]
    assert hermes_calls(CALL[: -len("</tool_call>")]) == [("lookup_order", '{"order_id": "A1"}')]
    assert hermes_calls('<tool_call>\n{"name": "f"}') == []  # no arguments
    assert hermes_calls("<tool_call>\n{not json}\n</tool_call>") == []


def test_which_templates_call_tools() -> None:
    """SmolLM2-135M's (the bundled model's, read from its GGUF) has no tools; Qwen2.5's
    writes `<tool_call>` tags inside its tools block."""
    from gguf import GGUFReader

    from models.cascade.llm import bundled_gguf

    field = GGUFReader(str(bundled_gguf())).fields["tokenizer.chat_template"]
    assert not template_calls_tools(field.contents())
    assert template_calls_tools(QWEN25_TEMPLATE)
