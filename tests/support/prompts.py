"""Prompt items of a function call and its result, as the session hands them to an
executor (the call is the assistant's, the result the user's)."""

from __future__ import annotations

from models.base import PromptItem


def function_call(item_id: str, call_id: str, name: str, arguments: str) -> PromptItem:
    return PromptItem(
        item_id, "assistant", kind="function_call", call_id=call_id, name=name, arguments=arguments
    )


def function_output(item_id: str, call_id: str, output: str) -> PromptItem:
    return PromptItem(item_id, "user", kind="function_call_output", call_id=call_id, output=output)
