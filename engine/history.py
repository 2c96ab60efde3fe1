"""The history bound: how much conversation audio a session keeps.

Items keep their audio for later prompts (user turns) and for `retrieve` and
`truncate`. Executors read little of it: every prompt builder takes the latest user
turn as audio and at most a few earlier clips (models/audio_prompt.py), the cascade
none (it reads transcripts), and assistant audio is never in a prompt. So past
`EngineLimits.max_history_audio_ms` the oldest items' audio is released: the item
stays, addressable by id, with its transcript and the length its audio had.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from engine.conversation import Item


def audio_held_ms(items: Sequence[Item]) -> int:
    return sum(item.audio_ms for item in items if item.audio is not None)


def audio_to_release(items: Sequence[Item], max_ms: int, in_use: Collection[str]) -> list[Item]:
    """The items whose audio goes, oldest first, so that at most `max_ms` is held.

    Kept whatever the bound: the newest user audio (the turn the next response
    answers, which every executor reads as audio) and the items `in_use` by a
    running response. Only they can hold the total above the bound."""
    newest_user = next(
        (i.id for i in reversed(items) if i.role == "user" and i.audio is not None), None
    )
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
