"""Pure text decisions of the cascade: the chat prompt and the loop guard."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from models.base import Prompt, PromptItem, Tool
from models.speech.sentences import is_abbreviation
from models.tool_text import call_text, result_text, tools_block

DEFAULT_INSTRUCTIONS = (
    "You are a friendly voice assistant. Answer in one or two short spoken sentences. "
    "Do not use lists, markdown or emoji."
)


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str


def chat_messages(
    prompt: Prompt,
    transcripts: Mapping[str, str],
    *,
    max_turns: int = 8,
    tools: tuple[Tool, ...] = (),
    tool_choice: str = "auto",
) -> list[ChatMessage]:
    """The conversation as chat messages: the session's instructions as the system
    message, then the latest `max_turns` items as text (user audio as its transcript).
    With `tools` (a model that calls them) the system message lists them and function
    calls and their results are written in the Hermes format; without, they are left
    out. A named `tool_choice` or "required" is asked for in words: CTranslate2 has
    no constrained decoding to force it.

    Small models lose the thread in long contexts, and the context window is small:
    keep the recent turns only.
    """
    messages: list[ChatMessage] = []
    for item in prompt.items:
        text = _text_of(item, transcripts, tools=bool(tools))
        if not text:
            continue
        role = "user" if item.kind == "function_call_output" else item.role
        if messages and messages[-1].role == role:
            # Two user turns in a row (the answer between them was cut), or calls made
            # together: one message.
            joint = "\n" if item.kind != "message" else " "
            messages[-1] = ChatMessage(role, f"{messages[-1].content}{joint}{text}")
        else:
            messages.append(ChatMessage(role, text))
    messages = messages[-max_turns:]
    while messages and messages[0].role == "assistant":
        messages.pop(0)  # a chat starts with the user
    system = prompt.instructions.strip() or DEFAULT_INSTRUCTIONS
    if tools:
        system += tools_block(tools)
        if tool_choice == "required":
            system += "\n\nAnswer with a function call."
        elif tool_choice != "auto":
            system += f"\n\nAnswer with a call to the function {tool_choice}."
    return [ChatMessage("system", system), *messages]


def _text_of(item: PromptItem, transcripts: Mapping[str, str], *, tools: bool) -> str:
    if item.kind == "function_call":
        return call_text(item.name, item.arguments) if tools else ""
    if item.kind == "function_call_output":
        return result_text(item.output) if tools else ""
    text = item.text if item.text is not None else transcripts.get(item.id, "")
    return text.strip()


def keep_recent(messages: list[ChatMessage], history: int) -> list[ChatMessage]:
    """The system message, `history` earlier messages, and the latest message."""
    system = [m for m in messages[:1] if m.role == "system"]
    rest = messages[len(system) :]
    kept = rest[-(history + 1) :] if rest else []
    while len(kept) > 1 and kept[0].role == "assistant":
        kept.pop(0)  # a chat resumes with the user
    return system + kept


def render_chatml(messages: list[ChatMessage]) -> str:
    """ChatML, the template SmolLM2 and Qwen were trained on, ending with the
    assistant's turn open."""
    parts = [f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages]
    return "".join(parts) + "<|im_start|>assistant\n"


# A sentence end: . ! or ? (and any closing quotes or brackets) before whitespace.
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]\u201d\u2019]*(?=\s)")


def spoken_end(text: str, max_sentences: int) -> int | None:
    """Where a spoken answer stops (an index into `text`): after its
    `max_sentences`-th sentence, a line counting as one (a list item, a heading);
    None while the answer is shorter. The bundled model answered "recommend a book"
    with a list it never finished (75 words, 30 s of speech) and "make pancakes" with
    65 words; its other answers to one-line questions were one or two sentences."""
    ends = [
        m.end()
        for m in _SENTENCE_END.finditer(text)
        if not (m.group() == "." and is_abbreviation(text[: m.start()]))  # "Dr.", "e.g."
    ]
    ends += [i for i, ch in enumerate(text) if ch == "\n"]
    said, last = 0, 0
    for end in sorted(set(ends)):
        if text[last:end].strip():  # something was said since the last end
            said += 1
            if said >= max_sentences:
                return end
        last = end
    return None


def is_degenerate(text: str, *, window: int = 48, max_period: int = 16, repeats: int = 3) -> bool:
    """True when the tail of `text` is a loop: one short unit (a digit, a word, a
    phrase up to `max_period` characters) repeated at least `repeats` times, or one
    sentence said twice. Tiny models fall into both ("0000000…", "I'm a voice
    assistant. I'm a voice assistant.")."""
    tail = text[-window:]
    for period in range(1, max_period + 1):
        span = period * repeats
        if len(tail) < span:
            continue
        unit = tail[-period:]
        if not any(c.isalnum() for c in unit):
            continue  # "..." or "!!!" is punctuation, not a loop
        if tail[-span:] == unit * repeats:
            return True
    sentences = [s.strip() for s in text.replace("!", ".").replace("?", ".").split(".")]
    sentences = [s for s in sentences if len(s) >= 12]
    return len(sentences) >= 2 and sentences[-1] in sentences[:-1]
