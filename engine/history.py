"""The history bound: how much conversation audio a session keeps.

Items keep their audio for later prompts (user turns) and for `retrieve` and
`truncate`. Executors read little of it: every prompt builder takes the latest user
turn as audio and at most a few earlier clips (models/audio_prompt.py), the cascade
none (it reads transcripts), and assistant audio is never in a prompt. So past
`EngineLimits.max_history_audio_ms` the oldest items' audio is released: the item
stays, addressable by id, with its transcript and the length its audio had.

What is left of an item then is text (its transcript, typed text, a call's
arguments or output) and a few small records; but a client can create items, each
with up to a message's worth of text. So the items themselves are bounded too, by
count (`max_history_items`) and by text (`max_history_text_chars`), far beyond what
any prompt reads (the cascade reads 8 turns, an audio model's prompt a 4096-token
context): past either, the oldest items are dropped, and the client is told with
`conversation.item.deleted` as if it had deleted them.

Images (a user message's, for an executor that sees) are bounded apart and never
dropped to make room: an item that would take the conversation past
`max_history_images` is refused (engine/images.py).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from engine.conversation import Item


def text_chars(item: Item) -> int:
    """The text an item holds, whatever its kind."""
    return (
        len(item.transcript)
        + len(item.text or "")
        + len(item.arguments or "")
        + len(item.output or "")
        + len(item.name or "")
    )


def _newest_user_audio(items: Sequence[Item]) -> str | None:
    return next((i.id for i in reversed(items) if i.role == "user" and i.audio is not None), None)


def audio_held_ms(items: Sequence[Item]) -> int:
    return sum(item.audio_ms for item in items if item.audio is not None)


def audio_to_release(items: Sequence[Item], max_ms: int, in_use: Collection[str]) -> list[Item]:
    """The items whose audio goes, oldest first, so that at most `max_ms` is held.

    Kept whatever the bound: the newest user audio (the turn the next response
    answers, which every executor reads as audio) and the items `in_use` by a
    running response. Only they can hold the total above the bound."""
    newest_user = _newest_user_audio(items)
    held = audio_held_ms(items)
    released: list[Item] = []
    for item in items:
        if held <= max_ms:
            break
        if item.audio is None or item.id == newest_user or item.id in in_use:
            continue
        released.append(item)
        held -= item.audio_ms
    return released


def items_to_drop(
    items: Sequence[Item], max_items: int, max_chars: int, in_use: Collection[str]
) -> list[Item]:
    """The items that leave the conversation, oldest first, so that at most
    `max_items` items and `max_chars` characters of text are left. The newest user
    audio and the items `in_use` stay, as for the audio bound."""
    newest_user = _newest_user_audio(items)
    count = len(items)
    chars = sum(text_chars(item) for item in items)
    dropped: list[Item] = []
    for item in items:
        if count <= max_items and chars <= max_chars:
            break
        if item.id == newest_user or item.id in in_use:
            continue
        dropped.append(item)
        count -= 1
        chars -= text_chars(item)
    return dropped
