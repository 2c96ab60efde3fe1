"""A GGUF's own chat template renders the cascade's prompt (models/cascade/chat_template.py)."""

from __future__ import annotations

import pytest
from jinja2 import TemplateError

from models.cascade.chat_template import ChatTemplate, folded_system
from models.cascade.text import ChatMessage, render_chatml
from tests.support.tiny_gguf import GEMMA_TEMPLATE, QWEN25_TEMPLATE

CHAT = [
    ChatMessage("system", "Be brief."),
    ChatMessage("user", "Hi"),
    ChatMessage("assistant", "Hello."),
    ChatMessage("user", "Bye"),
]


def test_the_bundled_models_template_renders_what_chatml_did() -> None:
    """SmolLM2's template, read from the bundled GGUF: the same prompt as before."""
    from gguf import GGUFReader

    from models.cascade.llm import bundled_gguf

    source = GGUFReader(str(bundled_gguf())).fields["tokenizer.chat_template"].contents()
    assert ChatTemplate(source).render(CHAT) == render_chatml(CHAT)
    assert ChatTemplate(QWEN25_TEMPLATE).render(CHAT) == render_chatml(CHAT)


def test_a_template_without_a_system_role_gets_the_instructions_in_the_first_turn() -> None:
    rendered = ChatTemplate(GEMMA_TEMPLATE, bos_token="<bos>").render(CHAT)
    assert rendered == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
    )


def test_folding_the_system_message() -> None:
    assert folded_system(CHAT)[0] == ChatMessage("user", "Be brief.\n\nHi")
    assert folded_system(CHAT[1:]) == CHAT[1:]
    only = [ChatMessage("system", "Be brief.")]
    assert folded_system(only) == [ChatMessage("user", "Be brief.")]


def test_a_template_that_refuses_for_another_reason_says_so() -> None:
    """Two user turns in a row break Gemma's alternation with or without a system."""
    twice = [ChatMessage("user", "Hi"), ChatMessage("user", "again")]
    with pytest.raises(TemplateError, match="alternate"):
        ChatTemplate(GEMMA_TEMPLATE).render(twice)


def test_templates_are_sandboxed() -> None:
    from jinja2.exceptions import SecurityError

    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(SecurityError):
        template.render(CHAT)
