"""The cascade's pure text decisions: the chat prompt and the loop guard."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.base import Prompt, PromptItem, Tool
from models.cascade.llm import cpu_flags, default_compute_type
from models.cascade.text import (
    DEFAULT_INSTRUCTIONS,
    ChatMessage,
    chat_messages,
    is_degenerate,
    render_chatml,
    spoken_end,
)
from tests.support.prompts import function_call, function_output

AUDIO = np.zeros(10, np.int16)


def prompt(*items: PromptItem, instructions: str = "") -> Prompt:
    return Prompt(request_id="r", instructions=instructions, items=items)


def test_user_audio_becomes_its_transcript_and_instructions_lead() -> None:
    p = prompt(
        PromptItem("u1", "user", audio=AUDIO),
        PromptItem("a1", "assistant", text="Sunny."),
        PromptItem("u2", "user", audio=AUDIO),
        instructions="Be terse.",
    )
    messages = chat_messages(p, {"u1": "Weather?", "u2": "Tomorrow?"})
    assert messages == [
        ChatMessage("system", "Be terse."),
        ChatMessage("user", "Weather?"),
        ChatMessage("assistant", "Sunny."),
        ChatMessage("user", "Tomorrow?"),
    ]


def test_default_instructions_and_untranscribed_or_empty_items_skipped() -> None:
    p = prompt(PromptItem("u1", "user", audio=AUDIO), PromptItem("a1", "assistant", text=""))
    assert chat_messages(p, {}) == [ChatMessage("system", DEFAULT_INSTRUCTIONS)]


def test_consecutive_user_turns_merge_and_history_is_bounded() -> None:
    items = [PromptItem(f"u{i}", "user", text=f"q{i}") for i in range(3)]
    assert chat_messages(prompt(*items), {})[1:] == [ChatMessage("user", "q0 q1 q2")]
    long = []
    for i in range(20):
        long += [
            PromptItem(f"u{i}", "user", text=f"q{i}"),
            PromptItem(f"a{i}", "assistant", text=f"a{i}"),
        ]
    long.append(PromptItem("last", "user", text="last"))
    messages = chat_messages(prompt(*long), {}, max_turns=4)
    assert messages[0].role == "system"
    assert messages[1].role == "user"  # never opens on an assistant turn
    assert messages[-1] == ChatMessage("user", "last")
    assert len(messages) <= 5


def test_chatml_leaves_the_assistant_turn_open() -> None:
    text = render_chatml([ChatMessage("system", "S"), ChatMessage("user", "U")])
    assert text == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    ("text", "loop"),
    [
        ("The moon is approximately 237.9592080000000000000", True),
        ("I'm a friendly voice assistant. I'm a friendly voice assistant.", True),
        ("ha ha ha ha", True),
        ("The weather today is mostly sunny with a light breeze.", False),
        ("Wait... what? Really!!!", False),
        ("It is 1,000 kilometers away.", False),
        ("I like it. You like it. We both like it a lot.", False),
    ],
)
def test_loop_guard(text: str, loop: bool) -> None:
    assert is_degenerate(text) is loop


def test_keep_recent_history_window() -> None:
    from models.cascade.text import keep_recent

    chat = [
        ChatMessage("system", "S"),
        ChatMessage("user", "q1"),
        ChatMessage("assistant", "a1"),
        ChatMessage("user", "q2"),
    ]
    assert keep_recent(chat, 0) == [chat[0], chat[3]]
    assert keep_recent(chat, 1) == [chat[0], chat[3]]  # never resume on an answer
    assert keep_recent(chat, 2) == chat
    assert keep_recent(chat, 8) == chat
    assert keep_recent(chat[:1], 3) == chat[:1]


def test_int8_is_chosen_where_the_cpu_has_vnni(tmp_path: Path) -> None:
    assert default_compute_type(frozenset({"avx2", "avx512f", "avx512_vnni"})) == "int8"
    assert default_compute_type(frozenset({"avx2", "avx_vnni"})) == "int8"
    assert default_compute_type(frozenset({"avx2", "fma"})) == "float32"
    assert default_compute_type(frozenset()) == "float32"
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_vnni\n\nprocessor\t: 1\n")
    assert cpu_flags(info) == frozenset({"fpu", "avx2", "avx512_vnni"})
    assert cpu_flags(tmp_path / "missing") == frozenset()


ORDER = Tool("lookup_order", parameters='{"type": "object", "properties": {}}')


def test_a_model_that_calls_tools_reads_them_and_its_calls_in_hermes_form() -> None:
    p = prompt(
        PromptItem("u1", "user", text="Where are my orders?"),
        function_call("c1", "a", "lookup_order", '{"id": 1}'),
        function_call("c2", "b", "lookup_order", '{"id": 2}'),
        function_output("o1", "a", "shipped"),
        function_output("o2", "b", "lost"),
    )
    system, user, calls, results = chat_messages(p, {}, tools=(ORDER,))
    assert system.content.startswith(DEFAULT_INSTRUCTIONS + "\n\n# Tools")
    assert system.content.endswith("</tool_call>")  # auto: no more asked
    named = chat_messages(p, {}, tools=(ORDER,), tool_choice="lookup_order")[0].content
    assert named.endswith("\n\nAnswer with a call to the function lookup_order.")
    required = chat_messages(p, {}, tools=(ORDER,), tool_choice="required")[0].content
    assert required.endswith("\n\nAnswer with a function call.")
    assert '"name": "lookup_order"' in system.content
    assert user == ChatMessage("user", "Where are my orders?")
    assert calls.role == "assistant" and calls.content.count("<tool_call>") == 2
    assert calls.content.split("\n</tool_call>\n")[1].startswith("<tool_call>")  # a line apart
    assert results.role == "user"
    assert results.content == (
        "<tool_response>\nshipped\n</tool_response>\n<tool_response>\nlost\n</tool_response>"
    )


def test_a_model_without_tools_sees_no_calls() -> None:
    p = prompt(
        PromptItem("u1", "user", text="Where is my order?"),
        function_call("c1", "a", "f", "{}"),
        function_output("o1", "a", "shipped"),
    )
    messages = chat_messages(p, {})
    assert messages == [
        ChatMessage("system", DEFAULT_INSTRUCTIONS),
        ChatMessage("user", "Where is my order?"),
    ]


@pytest.mark.parametrize(
    ("text", "sentences", "kept"),
    [
        ("One. Two! Three? Four.", 3, "One. Two! Three?"),
        ("Dr. Smith is here. He is nice. Yes", 2, "Dr. Smith is here. He is nice."),
        ("Pi is 3.14 and e is 2.7. Done. Next", 2, "Pi is 3.14 and e is 2.7. Done."),
        # The bundled model's answer to "Can you recommend a good book?", abridged.
        (
            'Some popular books:\n\n- "The Nightingale" by Elizabeth\n- "A Christmas Carol"\n- "',
            3,
            'Some popular books:\n\n- "The Nightingale" by Elizabeth\n- "A Christmas Carol"',
        ),
    ],
)
def test_a_spoken_answer_ends_after_its_sentences(text: str, sentences: int, kept: str) -> None:
    end = spoken_end(text, sentences)
    assert end is not None and text[:end] == kept


def test_a_short_answer_is_not_cut() -> None:
    assert spoken_end("Paris is the capital of France.", 3) is None
    assert spoken_end("One. Two.", 3) is None  # the last end waits for what follows
    assert spoken_end("One. Two. Three.", 3) is None
    assert spoken_end("One. Two. Three. ", 3) == len("One. Two. Three.")
