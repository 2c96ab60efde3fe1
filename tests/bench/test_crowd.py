"""The voice count's offline replay (bench/turns/crowd.py): the engine's decisions over
hearings, on real speech and the interruption set's babble, and a one-seed run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from bench.speech import load_wav
from bench.turns.crowd import HeardAt, Replay, hearing_points, main, qualified_ms, replay_of
from bench.turns.noise import Pcm16
from bench.turns.scenarios import make_scenarios, trimmed
from engine.interruption import InterruptionParams
from engine.user_voice import profile_of
from models.listening.hearing import Hearing
from tests.support.held import squashed


def heard(pcm: Pcm16, text: str, sure: bool = True) -> Replay:
    """`pcm` heard as `text` at every hearing."""
    return replay_of(pcm, [HeardAt(ms, text, sure) for ms in hearing_points(pcm)])


def test_items_are_heard_every_100_ms_from_200_and_whole() -> None:
    one_s = load_wav("weather")[:24_000]
    assert hearing_points(one_s) == list(range(200, 1001, 100))
    assert hearing_points(one_s[: 24_000 * 45 // 100]) == [200, 300, 400, 450]
    assert hearing_points(one_s[:2400]) == []


def test_one_voices_words_qualify_and_background_talks_never() -> None:
    user = trimmed(load_wav("weather"))
    babble = [it.audio for it in make_scenarios(15).items if it.text == "babble"][1]
    params = InterruptionParams()
    assert qualified_ms(heard(user, "No, I don't."), params) == 200
    assert qualified_ms(heard(babble, "No, I don't."), params) is None
    # The count off: the same words from the babble qualify at the first hearing.
    off = replace(params, crowd_kurtosis=0.0, one_voice_kurtosis=0.0)
    assert qualified_ms(heard(babble, "No, I don't."), off) == 200
    # A backchannel never qualifies, from one voice or several.
    assert qualified_ms(heard(user, "Mm-hmm."), params) is None


def test_a_session_that_knows_the_users_voice_replays_as_one() -> None:
    """The replay hands held speech the voice the session learned: a squashed voice
    (background talk by the bands) qualifies at its first hearing with an earlier turn
    of its own, and babble still never does with a peaky user's."""
    user = squashed(trimmed(load_wav("weather")))
    babble = [it.audio for it in make_scenarios(15).items if it.text == "babble"][1]
    params = InterruptionParams()
    taught = profile_of(squashed(load_wav("lights")))
    assert qualified_ms(heard(user, "Wait, stop."), params) != 200
    assert qualified_ms(heard(user, "Wait, stop."), params, taught) == 200
    peaky = profile_of(load_wav("lights"))
    assert qualified_ms(heard(babble, "No, I don't."), params, peaky) is None


def test_one_seed_through_whisper(tmp_path: Path) -> None:
    out = tmp_path / "crowd.json"
    args = ["--seeds", "15", "--limit", "1", "--crowd", "6", "--one-voice", "7", "--clarity", "0.8"]
    args += ["--voices", "espeak"]  # the recorded set is fetched: make eval-turns has it
    assert main([*args, "--no-cache", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    [row] = report["grid"]
    assert (row["crowd_kurtosis"], row["one_voice_kurtosis"], row["one_voice_clarity"]) == (
        6.0,
        7.0,
        0.8,
    )
    assert {k: row[k]["items"] for k in ("babble", "sentence", "snr10", "snr5")} == {
        "babble": 1,
        "sentence": 1,
        "snr10": 1,
        "snr5": 1,
    }
    assert row["babble"]["qualified"] == 0
    assert row["sentence"]["qualified"] == 1
    assert report["hearings_made"] > 20


def test_after_a_laugh_the_replay_hears_what_the_engine_asks_for() -> None:
    """Held speech whose hearings from the onset are all laughter (Whisper writing the
    laugh on over the words) qualifies once the speech after the laugh, heard alone
    (`Replay.tail`), is words; without such hearings it never does."""
    user = trimmed(load_wav("weather"))
    laughs = [HeardAt(ms, "Ha-ha-ha", True) for ms in hearing_points(user)]
    params = InterruptionParams()
    assert qualified_ms(replay_of(user, laughs), params) is None
    asked: list[int] = []

    def tail(pcm: Pcm16) -> Hearing:
        asked.append(len(pcm))
        return Hearing("Stop that!", True)

    # The laugh heard at 300 ms of speech: the hearing at 400 hears from 100 ms on.
    assert qualified_ms(replay_of(user, laughs, tail), params) == 400
    assert asked[0] == (400 - (300 - 200)) * 24
