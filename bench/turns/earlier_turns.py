"""The user's earlier turn, for the interruption run's `--earlier-turn`.

An assistant usually speaks because the user asked something: by the time the user
talks over it, the session has heard one of their turns, said while it was silent,
and learned their voice from it (engine/user_voice.py). Each item is given the turn
its speaker would have said before: the first other sentence of the same voice in
the set. A sound that is no one's speech (a burst, echo, a backchannel of a voice
with no sentence) gets the set's first sentence: the user is someone else. A
sentence whose voice says nothing else in the set gets none: in a session its
speaker would be the user, and no one else's voice may stand in for theirs.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.turns.noise import Pcm16
from bench.turns.scenarios import Scenario


def earlier_turn(item: Scenario, items: Sequence[Scenario]) -> Pcm16 | None:
    """The turn `item`'s session hears before the answer it talks over (None: none)."""
    sentences = [o for o in items if o.kind == "sentence" and o.name != item.name]
    own = next((o for o in sentences if item.voice and o.voice == item.voice), None)
    if own is not None:
        return own.audio
    if item.kind == "sentence" or not sentences:
        return None
    return sentences[0].audio


def earlier_turns(items: Sequence[Scenario]) -> dict[str, Pcm16]:
    """Each item's earlier turn by item name, for the items that have one."""
    out = {}
    for item in items:
        turn = earlier_turn(item, items)
        if turn is not None:
            out[item.name] = turn
    return out
