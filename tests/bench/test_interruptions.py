"""`make eval-turns`' interruptions (bench/turns/interruptions.py): the scoring of what a
client saw while the assistant talked as pure decisions, the speaker that makes echo,
the seeded set, and one backchannel and one interrupting sentence through a real server."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.turns.__main__ import main
from bench.turns.bursts import BURSTS, make_burst
from bench.turns.interrupt_score import Heard, react, summarize_kind, table
from bench.turns.interruptions import CHUNK, mic_chunk
from bench.turns.scenarios import KINDS, TALKOVER, TALKOVER_DB, Scenario, make_scenarios
from bench.turns.speaker import Speaker
from tests.support.espeak import made_twice, require_espeak
from tests.support.makefile import recipe


def test_a_cancel_after_the_onset_is_timed_from_the_onset_chunk() -> None:
    heard = Heard(
        first_delta_t=1.0,
        onset_sent_t=2.0,
        speech_started_t=[2.1],
        committed=1,
        status="cancelled",
        done_t=2.15,
    )
    r = react(heard)
    assert (r.spoke, r.cancelled, r.speech_started, r.committed) == (True, True, 1, 1)
    assert r.reaction_ms == pytest.approx(150)
    assert r.talked_ms == pytest.approx(1150)


def test_no_reaction_without_a_cancel_or_before_the_onset_or_for_echo() -> None:
    talking = react(Heard(1.0, 2.0, status=None))
    assert not talking.cancelled and talking.reaction_ms is None and talking.talked_ms is None
    early = react(Heard(1.0, 2.0, [1.5], status="cancelled", done_t=1.6))
    assert early.cancelled and early.reaction_ms is None  # something else cut it first
    assert early.early and not talking.early
    echo = react(Heard(1.0, None, [1.3], committed=2, status="cancelled", done_t=1.4))
    assert echo.cancelled and echo.reaction_ms is None
    assert echo.talked_ms == pytest.approx(400)
    completed = react(Heard(1.0, 2.0, status="completed", done_t=9.0))
    assert not completed.cancelled


def test_false_and_missed_interruptions_are_counted_per_kind() -> None:
    cancelled = react(Heard(1.0, 2.0, [2.1], 1, "cancelled", 2.2))
    started_only = react(Heard(1.0, 2.0, [2.1, 2.5], 0, None, None))
    untouched = react(Heard(1.0, 2.0))
    silent = react(Heard(None, None))  # the assistant never spoke: not measured
    backchannels = summarize_kind("backchannel", [cancelled, started_only, untouched, silent])
    assert backchannels["items"] == 4 and backchannels["no_assistant_audio"] == 1
    assert backchannels["false_cancels"] == backchannels["cancelled"] == 1
    assert backchannels["false_speech_started"] == backchannels["speech_started_items"] == 2
    assert backchannels["speech_started_events"] == 3 and backchannels["turns_committed"] == 1
    assert "missed" not in backchannels
    sentences = summarize_kind("sentence", [cancelled, untouched, silent])
    assert sentences["missed"] == 1 and "false_cancels" not in sentences
    assert sentences["reaction_ms"] == {
        "n": 1,
        "p50": pytest.approx(200),
        "p90": pytest.approx(200),
    }
    report = {
        "modes": [
            {"mode": "m", "supported": True, "kinds": {"sentence": sentences}},
            {"mode": "x", "supported": False, "note": "not supported by this server"},
        ]
    }
    rows = table(report).splitlines()
    assert rows[2] == "m | sentence | 3 (1 without assistant audio) | 1/2 | 1/2 | 1/2 | 200/200 | 1"
    # Said over the echo: a cancel before the sentence began is the echo's, not a catch.
    early = react(Heard(1.0, 2.0, [1.5], 1, "cancelled", 1.6))
    over = summarize_kind("talkover", [early, cancelled])
    assert over["missed"] == 0 and over["cancelled_before_onset"] == 1
    row = table({"modes": [{"mode": "m", "supported": True, "kinds": {"talkover": over}}]})
    assert "0/2 (1 cancelled before it began)" in row
    assert rows[3] == "x | not supported by this server"


def test_the_speaker_plays_deltas_back_to_back_and_stops_on_a_cancel() -> None:
    speaker = Speaker(rate=1000)
    speaker.play(np.full(100, 7, np.int16), arrived_s=0.5)  # samples 500-599
    speaker.play(np.full(100, 9, np.int16), arrived_s=0.55)  # queued after: 600-699
    speaker.play(np.full(10, 3, np.int16), arrived_s=1.0)  # after a gap: 1000-1009
    heard = speaker.heard(590, 20)
    assert list(heard[:10]) == [7] * 10 and list(heard[10:]) == [9] * 10
    assert speaker.heard(-5, 5).tolist() == [0] * 5
    assert speaker.heard(995, 20).tolist() == [0] * 5 + [3] * 10 + [0] * 5
    speaker.stop(0.65)
    assert speaker.heard(640, 20).tolist() == [9] * 10 + [0] * 10
    speaker.play(np.full(5, 1, np.int16), arrived_s=0.66)
    assert speaker.heard(660, 5).tolist() == [1] * 5


def test_the_microphone_carries_the_sound_from_its_chunk_and_the_delayed_echo() -> None:
    speaker = Speaker()
    played = np.full(10 * CHUNK, 10_000, np.int16)
    speaker.play(played, arrived_s=0.0)
    sound = np.full(CHUNK + 10, 500, np.int16)
    item = Scenario("s", "sentence", "Wait.", "en-us", sound, offset_ms=500)
    assert not mic_chunk(2, 3, item, speaker).any()  # before its chunk: silence, no echo
    assert (mic_chunk(3, 3, item, speaker) == 500).all()
    tail = mic_chunk(4, 3, item, speaker)
    assert (tail[:10] == 500).all() and not tail[10:].any()
    echo = Scenario("e", "echo", "echo", "", np.zeros(CHUNK, np.int16), 500, -20.0, 10)
    delay = 10 * 24  # 10 ms at 24 kHz
    first = mic_chunk(0, None, echo, speaker)
    assert not first[:delay].any() and (first[delay:] == 1000).all()  # -20 dB: a tenth


def test_every_burst_is_seeded_loud_and_not_silent() -> None:
    voices = [np.random.default_rng(1).normal(0, 3000, 24_000).astype(np.int16)]
    for kind in BURSTS:
        a, b = make_burst(kind, voices, 3), make_burst(kind, voices, 3)
        assert np.array_equal(a, b), kind
        assert np.max(np.abs(a)) == pytest.approx(1.0), kind
        assert 0.3 < len(a) / 24_000 <= 2.5, kind
    assert not np.array_equal(make_burst("cough", voices, 3), make_burst("cough", voices, 4))


def test_make_eval_turns_measures_interruptions_too() -> None:
    assert "--scenarios interruptions" in recipe("eval-turns")


def test_the_set_is_seeded_cached_and_ten_of_each_kind(tmp_path: Path) -> None:
    made, again = made_twice(make_scenarios, tmp_path, "interruptions")
    assert [(i.name, i.offset_ms) for i in made.items] == [
        (i.name, i.offset_ms) for i in again.items
    ]
    assert all(
        np.array_equal(a.audio, b.audio) for a, b in zip(made.items, again.items, strict=True)
    )
    counts = {k: 10 for k in KINDS} | {"talkover": TALKOVER}
    assert [i.kind for i in made.items] == [k for k in KINDS for _ in range(counts[k])]
    assert all(500 <= i.offset_ms <= 1500 for i in made.items)
    echo = [i for i in made.items if i.kind == "echo"]
    assert sorted({i.echo_db for i in echo}) == [-20.0, -10.0]
    assert all(50 <= i.echo_delay_ms <= 200 and not i.audio.any() for i in echo)
    sounds = [i for i in made.items if i.kind not in ("echo", "talkover")]
    assert all(i.audio.any() and i.echo_db is None for i in sounds)
    # The first sentences again, said over the assistant's echo.
    over = [i for i in made.items if i.kind == "talkover"]
    said = [i for i in made.items if i.kind == "sentence"][:TALKOVER]
    assert [(i.text, i.audio.tobytes()) for i in over] == [
        (i.text, i.audio.tobytes()) for i in said
    ]
    assert all(i.echo_db == TALKOVER_DB and 50 <= i.echo_delay_ms <= 200 for i in over)
    assert len({i.voice for i in made.items if i.kind == "backchannel"}) >= 3


def test_a_backchannel_and_a_sentence_through_a_real_server(tmp_path: Path) -> None:
    """Real time, server_vad with Silero: the report holds together, and a real
    sentence said over the assistant cancels it (today and after any change)."""
    require_espeak()
    out = tmp_path / "interruptions.json"
    args = ["--scenarios", "interruptions", "--modes", "server_vad/silero", "--limit", "1"]
    assert main([*args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (mode,) = report["modes"]
    assert mode["supported"] and mode["errors"] == []
    assert list(mode["kinds"]) == ["backchannel", "burst", "sentence", "echo -10 dB", "talkover"]
    assert len(mode["items"]) == len(KINDS)
    for kind, s in mode["kinds"].items():
        assert s["items"] == 1 and s["no_assistant_audio"] == 0, kind
        assert s["cancelled"] <= 1 and s["speech_started_items"] <= 1
    sentence = mode["kinds"]["sentence"]
    assert sentence["missed"] == 0 and sentence["reaction_ms"]["n"] == 1
