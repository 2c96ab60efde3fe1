"""A GGUF model's own chat template (its `tokenizer.chat_template`), rendered the
way transformers' `apply_chat_template` renders it: Jinja in a sandbox, with
`raise_exception`, `tojson` and `strftime_now`, the BOS and EOS token strings, and
the assistant's turn opened at the end.

Models differ: SmolLM2 and Qwen2 write ChatML, Llama 3 its header tokens, Gemma
`<start_of_turn>` turns and no system role at all (Gemma 1's template refuses one,
later ones fold it into the first user turn). A template that refuses the system
role gets the instructions at the head of the first user turn instead.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NoReturn

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from models.cascade.text import ChatMessage


def _raise(message: str) -> NoReturn:
    raise TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def folded_system(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The system message's text at the head of the first user message."""
    if not messages or messages[0].role != "system":
        return messages
    system, rest = messages[0], messages[1:]
    if rest and rest[0].role == "user":
        return [ChatMessage("user", f"{system.content}\n\n{rest[0].content}"), *rest[1:]]
    return [ChatMessage("user", system.content), *rest]


class ChatTemplate:
    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._template = env.from_string(source)
        self._tokens = {"bos_token": bos_token, "eos_token": eos_token}

    def render(self, messages: list[ChatMessage]) -> str:
        """The prompt text, ending with the assistant's turn open."""
        try:
            return self._render(messages)
        except TemplateError:
            folded = folded_system(messages)
            if folded == messages:
                raise
            return self._render(folded)

    def _render(self, messages: list[ChatMessage]) -> str:
        return self._template.render(
            messages=[{"role": m.role, "content": m.content} for m in messages],
            add_generation_prompt=True,
            **self._tokens,
        )
