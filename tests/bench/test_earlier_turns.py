"""The user's earlier turn in the interruption run (bench/turns/earlier_turns.py): who
is given which turn, and one sentence through a real server after its user's turn."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.turns.__main__ import main
from bench.turns.earlier_turns import earlier_turn, earlier_turns
from bench.turns.scenarios import Scenario
from tests.support.espeak import require_espeak


def item(name: str, kind: str, voice: str, fill: int) -> Scenario:
    return Scenario(name, kind, name, voice, np.full(2400, fill, np.int16), 500)


def test_each_item_hears_its_own_voice_first_else_the_first_user() -> None:
    a1, a2 = item("a1", "sentence", "ami:A", 1), item("a2", "sentence", "ami:A", 2)
    lone = item("b1", "sentence", "ami:B", 3)
    nod = item("a-bc", "backchannel", "ami:A", 4)
    stranger = item("c-bc", "backchannel", "ami:C", 5)
    burst = item("burst", "burst", "", 6)
    items = [a1, a2, lone, nod, stranger, burst]

    def said(s: Scenario) -> int | None:
        turn = earlier_turn(s, items)
        return None if turn is None else int(turn[0])

    assert said(a1) == 2 and said(a2) == 1  # the other sentence of the same voice
    assert said(nod) == 1  # their own voice, whatever the kind
    # A sentence nobody else in the set says: its speaker is the user, and no other
    # voice may stand in for theirs.
    assert said(lone) is None
    # No one's speech (a burst), or a voice with no sentence: the user is someone else.
    assert said(stranger) == 1 and said(burst) == 1
    assert set(earlier_turns(items)) == {"a1", "a2", "a-bc", "c-bc", "burst"}
    assert earlier_turns([lone]) == {}


def test_a_sentence_after_its_users_earlier_turn_through_a_real_server(tmp_path: Path) -> None:
    """Real time, server_vad with Silero: each session first hears a turn of its user's
    (committed, no answer of its own), then the item over the answer. The sentence
    still cancels it, and the earlier turn is not counted among the item's turns."""
    require_espeak()
    out = tmp_path / "interruptions.json"
    args = ["--scenarios", "interruptions", "--modes", "server_vad/silero", "--limit", "1"]
    assert main([*args, "--earlier-turn", "--out", str(out)]) == 0
    (mode,) = json.loads(out.read_text())["modes"]
    assert mode["supported"] and mode["errors"] == []
    sentence = mode["kinds"]["sentence"]
    assert sentence["cancelled"] == 1 and sentence["missed"] == 0
    assert sentence["turns_committed"] == 1
    assert mode["kinds"]["backchannel"]["cancelled"] == 0
