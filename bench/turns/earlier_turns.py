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


def own_turn(item: Scenario, items: Sequence[Scenario]) -> Pcm16 | None:
    """The first other sentence of `item`'s voice in the set (None: it has none)."""
    own = (o for o in others(item, items) if item.voice and o.voice == item.voice)
    return next((o.audio for o in own), None)


def earlier_turn(item: Scenario, items: Sequence[Scenario]) -> Pcm16 | None:
    """The turn `item`'s session hears before the answer it talks over (None: none)."""
    own = own_turn(item, items)
    if own is not None or item.kind == "sentence":
        return own
    return next((o.audio for o in others(item, items)), None)


def others(item: Scenario, items: Sequence[Scenario]) -> list[Scenario]:
    """The set's sentences but `item`."""
    return [o for o in items if o.kind == "sentence" and o.name != item.name]


def earlier_turns(items: Sequence[Scenario]) -> dict[str, Pcm16]:
    """Each item's earlier turn by item name, for the items that have one."""
    out = {}
    for item in items:
        turn = earlier_turn(item, items)
        if turn is not None:
            out[item.name] = turn
    return out
