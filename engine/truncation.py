"""The session's `truncation`: which of the oldest items its model does not read
when the conversation would overflow the model's context.

The room is the executor's (`Executor.context_limit`: its context length less the
answer's tokens) less the instructions (with the tools), and at most
`token_limits.post_instructions` when a retention ratio sets it; the tokens are
the executor's count (`Executor.prompt_tokens`, models/context.py).

- `auto`: the oldest items are dropped until the rest fits the room.
- `{type: "retention_ratio", retention_ratio: r}`: until the rest takes at most r
  of the room, so the next turns fit without another cut.
- `disabled`: nothing is dropped; a prompt that does not fit fails its response
  (`ContextTooLong`: `invalid_request_error` / `context_length_exceeded`).

The cut stays where it was while the rest fits (`ContextCut` keeps the id of the
first item the model reads, and only a new overflow moves it on): the prefix the
model reads is then the same turn after turn and its prompt cache survives. The
items stay in the conversation; the client is told nothing of the cut.
`plan_cut` is the decision, pure; `ContextCut` applies it to a prompt.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from engine.session_config import RetentionRatio, Truncation
from models.base import Executor, Prompt


@dataclass(frozen=True)
class Fits:
    first: int  # the index of the first item the model reads


@dataclass(frozen=True)
class TooLong:
    tokens: int  # what the items after the instructions take
    room: int  # what they may take


class ContextTooLong(Exception):
    """A response's prompt does not fit and the session's truncation is disabled."""

    def __init__(self, too_long: TooLong, exact: bool) -> None:
        counted = "" if exact else " (estimated)"
        super().__init__(
            f"The conversation takes {too_long.tokens} tokens{counted} after the "
            f"instructions, over the {max(too_long.room, 0)} the model's context leaves "
            "for it, and truncation is disabled."
        )


def room_after_instructions(
    instructions: int, limit: int | None, truncation: Truncation
) -> int | None:
    """The tokens the items may take: the executor's `limit` less the instructions,
    and at most `token_limits.post_instructions`; None: not bounded."""
    room = None if limit is None else limit - instructions
    if isinstance(truncation, RetentionRatio) and truncation.post_instructions is not None:
        cap = truncation.post_instructions
        room = cap if room is None else min(room, cap)
    return room


def plan_cut(
    items: Sequence[int],
    can_start: Sequence[bool],
    room: int | None,
    truncation: Truncation,
    first: int = 0,
) -> Fits | TooLong:
    """Where the model starts reading the items (their tokens, oldest first), given
    the last cut `first`. `can_start[i]`: the model may start at item i (not at a
    function call's output whose call is cut). The latest item is always read: an
    executor cuts a turn too long for its context itself (models/audio_prompt.py)."""
    if truncation == "disabled":
        first = 0
    first = max(0, min(first, len(items) - 1))
    total = sum(items[first:])
    if room is None or total <= room:
        return Fits(first)
    if truncation == "disabled":
        return TooLong(total, room)
    ratio = truncation.retention_ratio if isinstance(truncation, RetentionRatio) else 1.0
    target = math.floor(room * ratio)
    while first < len(items) - 1 and (total > target or not can_start[first]):
        total -= items[first]
        first += 1
    return Fits(first)


class ContextCut:
    """The session's cut: the id of the first item its model reads (None: all)."""

    def __init__(self) -> None:
        self.first_id: str | None = None

    def apply(
        self,
        prompt: Prompt,
        executor: Executor,
        truncation: Truncation,
        *,
        conversation: bool = True,
        keep: bool = True,
    ) -> Prompt:
        """`prompt` with the items its model does not read left out. A prompt of the
        `conversation` starts from the session's cut, and moves it when `keep` (not
        an early answer's, which may never be asked for); a response's own input
        starts from its first item. Raises ContextTooLong when it does not fit and
        truncation is disabled."""
        limit = executor.context_limit(prompt)
        capped = isinstance(truncation, RetentionRatio) and truncation.post_instructions is not None
        if not prompt.items or (limit is None and not capped):
            return prompt  # nothing bounds it: no need to count
        ids = [item.id for item in prompt.items]
        first = ids.index(self.first_id) if conversation and self.first_id in ids else 0
        tokens = executor.prompt_tokens(prompt)
        plan = plan_cut(
            tokens.items,
            [item.kind != "function_call_output" for item in prompt.items],
            room_after_instructions(tokens.instructions, limit, truncation),
            truncation,
            first,
        )
        if isinstance(plan, TooLong):
            raise ContextTooLong(plan, tokens.exact)
        if conversation and keep:
            self.first_id = ids[plan.first] if plan.first else None
        return replace(prompt, items=prompt.items[plan.first :])
