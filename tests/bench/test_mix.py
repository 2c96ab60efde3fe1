"""The realistic-mix capacity point (bench/load/mix.py, `make bench`), smoked with two
sessions for a few seconds: both servers run, the JSON has its figures, and the
sessions got their turns. No timing is asserted (speed lives in the benchmark)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.load.mix import ROLES, role_of, run, session_audio
from bench.speech import PCM_RATE, load_wav


def test_the_roles_repeat_by_ten_and_most_users_only_listen() -> None:
    assert len(ROLES) == 10 and ROLES.count("listener") == 6
    assert [role_of(i) for i in range(2)] == ["listener", "interrupter"]
    assert role_of(11) == "interrupter"


def test_a_listener_is_silent_while_the_answer_plays_and_an_interrupter_is_not() -> None:
    backchannels = [load_wav("joke")[:PCM_RATE]]
    listener, interrupter = session_audio(0, backchannels), session_audio(1, backchannels)
    question_end = (300 * PCM_RATE // 1000) + len(load_wav("weather"))
    assert not listener[question_end:].any()
    assert interrupter[(300 * PCM_RATE // 1000) + len(load_wav("joke")) :].any()


async def test_two_sessions_get_their_turns_and_the_json_has_both_targets(
    tmp_path: Path,
) -> None:
    out = tmp_path / "mix.json"
    await run(2, warmup_s=1.0, window_s=4.0, out=out)
    result = json.loads(out.read_text())
    assert result["sessions"] == 2
    assert result["roles"]["listener"] == 1 and result["roles"]["interrupter"] == 1
    parley, floor = result["targets"]
    assert (parley["target"], floor["target"]) == ("parley-mix", "vad")
    for target in (parley, floor):
        assert target["sent"] > 0 and target["cpu_us_per_msg"] is not None
        assert target["errors"] == []
    listener_turns, interrupter_turns = parley["turns"]
    assert listener_turns >= 1  # its question
    assert interrupter_turns >= 2  # its question, then the one said over the answer
    assert parley["cancelled"] >= 1  # the answer it talked over
    assert parley["overloaded"] == 0  # two sessions never fill the line
    assert result["ratio_to_floor"] is not None
