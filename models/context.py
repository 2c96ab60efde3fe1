"""How much of a model's context a prompt takes, part by part: what the session's
`truncation` (engine/truncation.py) reads to choose the oldest items the model
does not see.

Exact where the executor holds its model's tokenizer (each part's text counted by
it, plus a chat frame per message); estimated where it does not (a remote backend):
text at `estimate_tokens`' three characters a token, which errs high.

Audio is estimated everywhere: a model that reads the transcript (the cascade, a
text backend) reads some `SPOKEN_TOKENS_PER_S` a second of speech while the
transcript is not known yet; an audio model reads its encoder's rate
(models/audio_prompt.py STYLES). So are images, `IMAGE_TOKENS` each.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from models.audio_prompt import IMAGE_TOKENS, estimate_tokens
from models.base import Prompt, PromptItem

# Speech runs at some 150 words a minute, about 1.3 tokens a word: 3.3 tokens a
# second; 4 so that an estimate errs high.
SPOKEN_TOKENS_PER_S = 4.0
# `<|im_start|>role\n` ... `<|im_end|>\n`: ChatML's frame of a message, about the
# size of the other chat formats'.
CHAT_FRAME_TOKENS = 5


@dataclass(frozen=True)
class PromptTokens:
    """A prompt's tokens: the instructions (with the tools' definitions), and each
    item in order. `exact`: counted by the model's own tokenizer (audio excepted)."""

    instructions: int
    items: tuple[int, ...]
    exact: bool


def cached_counter(count: Callable[[str], int], size: int = 4096) -> Callable[[str], int]:
    """`count` remembering its last `size` texts: every response counts the whole
    conversation again, and a tokenizer over a thousand items takes some 25 ms of
    the session's loop where the remembered counts take under 1."""
    return functools.lru_cache(maxsize=size)(count)


def answer_tokens(prompt: Prompt, cap: int) -> int:
    """The tokens an executor leaves its answer: the response's `max_output_tokens`
    up to its own `cap`."""
    return min(prompt.max_output_tokens or cap, cap)


def item_text(item: PromptItem, transcripts: Mapping[str, str]) -> str | None:
    """The text a model reads of an item; None for audio it has no transcript of."""
    if item.kind == "function_call":
        return f"{item.name or ''} {item.arguments or ''}"
    if item.kind == "function_call_output":
        return item.output or ""
    if item.text is not None:
        return item.text
    if item.audio is not None:
        return transcripts.get(item.id)
    return ""


def count_prompt(
    prompt: Prompt,
    count_text: Callable[[str], int] = estimate_tokens,
    *,
    exact: bool = False,
    audio_tokens_per_s: float = SPOKEN_TOKENS_PER_S,
    frame: int = CHAT_FRAME_TOKENS,
    transcripts: Mapping[str, str] | None = None,
) -> PromptTokens:
    """`prompt`'s tokens with `count_text` as the model's tokenizer."""
    known = transcripts or {}
    tools = "".join(t.name + t.description + t.parameters for t in prompt.tools)
    instructions = count_text(prompt.instructions) + count_text(tools) + frame

    def one(item: PromptItem) -> int:
        text = item_text(item, known)
        pictures = IMAGE_TOKENS * len(item.images)
        if text is None and item.audio is not None:
            return frame + pictures + math.ceil(len(item.audio) / item.rate * audio_tokens_per_s)
        return frame + pictures + count_text(text or "")

    return PromptTokens(instructions, tuple(one(i) for i in prompt.items), exact)
