"""`session.prompt`: a prompt template the operator configured, by name.

OpenAI's `prompt` names a saved prompt (`id`, `version`) and its `variables`. In
Parley the operator's prompts are read at start (server/prompts.py, from
PARLEY_PROMPTS_DIR) into a `PromptLibrary`: a client's id is only ever a key looked
up in it, never a path, so no client string reaches the file system. The rendered
template goes before the session's instructions in the model's system prompt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from engine.protocol import PromptRefIn, ProtocolError

# A prompt's id and version are plain names (OpenAI's look like `pmpt_68ab…` and `3`):
# no separators, no dots leading, nothing a file name could misread.
PROMPT_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
PROMPT_VERSION = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")
VARIABLE = re.compile(r"\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}")


@dataclass(frozen=True)
class PromptLibrary:
    """The operator's prompts: `key(id, version)` -> template text."""

    templates: Mapping[str, str]


def key(prompt_id: str, version: str | None) -> str:
    """A template's key: `id`, or `id@version` for one version of it."""
    return prompt_id if version is None else f"{prompt_id}@{version}"


@dataclass(frozen=True)
class PromptRef:
    """The session's prompt: what the client sent (echoed as given) and its text."""

    id: str
    version: str | None
    # name -> a string, or an input_text part's text (kept apart to echo the shape)
    variables: tuple[tuple[str, str, bool], ...]  # (name, text, sent as input_text)
    text: str

    def wire(self) -> dict[str, object]:
        out: dict[str, object] = {"id": self.id}
        if self.version is not None:
            out["version"] = self.version
        if self.variables:
            out["variables"] = {
                name: {"type": "input_text", "text": text} if as_part else text
                for name, text, as_part in self.variables
            }
        return out


def render(template: str, variables: Mapping[str, str]) -> str:
    """`{{name}}` replaced by its variable's text; raises KeyError naming a
    variable the template needs and the client did not give."""
    return VARIABLE.sub(lambda m: variables[m.group(1)], template)


def resolve_prompt(
    wire: PromptRefIn, library: PromptLibrary | None, event_id: str | None = None
) -> PromptRef:
    """The operator's template `wire` names, rendered with its variables; raises
    ProtocolError naming the field at fault."""

    def fail(code: str, message: str, param: str) -> ProtocolError:
        return ProtocolError(code, message, f"session.prompt.{param}", event_id)

    if library is None:
        raise fail(
            "unsupported_value",
            "This server has no prompts configured (the operator sets PARLEY_PROMPTS_DIR); "
            "send instructions instead.",
            "id",
        )
    if PROMPT_ID.fullmatch(wire.id) is None:
        raise fail(
            "invalid_value", "A prompt id is a plain name: letters, digits, '_' and '-'.", "id"
        )
    if wire.version is not None and PROMPT_VERSION.fullmatch(wire.version) is None:
        raise fail(
            "invalid_value",
            "A prompt version is a plain name: letters, digits, '_', '-' and '.'.",
            "version",
        )
    if key(wire.id, None) not in library.templates and not any(
        k.startswith(wire.id + "@") for k in library.templates
    ):
        raise fail("invalid_value", f"No prompt '{wire.id}' is configured.", "id")
    template = library.templates.get(key(wire.id, wire.version))
    if template is None:
        raise fail(
            "invalid_value", f"Prompt '{wire.id}' has no version '{wire.version}'.", "version"
        )
    variables: list[tuple[str, str, bool]] = []
    for name, value in (wire.variables or {}).items():
        if isinstance(value, str):
            variables.append((name, value, False))
        elif value.type == "input_text":
            variables.append((name, value.text or "", True))
        else:
            raise fail(
                "unsupported_value",
                f"A prompt variable can be text only, not {value.type}: the model cannot "
                "read images or files.",
                f"variables.{name}",
            )
    try:
        text = render(template, {name: text for name, text, _ in variables})
    except KeyError as exc:
        raise fail(
            "missing_required_parameter",
            f"Prompt '{wire.id}' needs the variable '{exc.args[0]}'.",
            f"variables.{exc.args[0]}",
        ) from None
    return PromptRef(wire.id, wire.version, tuple(variables), text)


def with_prompt(prompt: PromptRef | None, instructions: str) -> str:
    """The model's system prompt: the session's prompt, then the instructions."""
    if prompt is None or not prompt.text:
        return instructions
    return f"{prompt.text}\n\n{instructions}" if instructions else prompt.text
