"""The recorded-voice interruption set's choices, on annotations and stand-in audio
made here (no network)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.turns import real_interruptions as ri
from bench.turns.interruptions import group_of
from bench.turns.real_sets import Segment
from bench.turns.scenarios import Scenario, write_wav
from models.base import PCM_RATE


def seg(speaker: str, start: int, end: int) -> Segment:
    return Segment("m", speaker, start, end)


def test_a_short_turn_inside_another_speakers_is_a_backchannel_over_talk() -> None:
    long = seg("A", 0, 5000)
    assert ri.is_backchannel(seg("B", 1000, 1500), [long]) == long
    assert ri.is_backchannel(seg("B", 1000, 2500), [long]) is None  # too long
    assert ri.is_backchannel(seg("B", 4900, 5300), [long]) is None  # at its edge
    assert ri.is_backchannel(seg("A", 1000, 1500), [long]) is None  # same speaker


def test_a_sentence_is_long_and_nobody_talks_into_its_cut() -> None:
    s = seg("A", 1000, 6000)
    assert ri.is_sentence(s, [s])
    assert not ri.is_sentence(s, [s, seg("B", 2000, 2300)])
    assert ri.is_sentence(s, [s, seg("B", 4500, 5000)])  # after the 3 s cut
    assert not ri.is_sentence(seg("A", 0, 900), [])


def test_ami_items_split_by_speaker_with_their_part_in_the_report_row(tmp_path: Path) -> None:
    data = tmp_path / "ami" / "tests" / "data"
    t = np.arange(12 * PCM_RATE) / PCM_RATE
    write_wav((8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16), data / "x.wav")
    lines = [
        "SPEAKER x 1 0.0 5.0 <NA> <NA> A <NA> <NA>",
        "SPEAKER x 1 2.0 0.5 <NA> <NA> B <NA> <NA>",
    ]
    lines.append("SPEAKER x 1 6.0 2.0 <NA> <NA> B <NA> <NA>")
    lines.append("SPEAKER x 1 9.0 2.0 <NA> <NA> C <NA> <NA>")
    (data / "x.rttm").write_text("\n".join(lines) + "\n")
    (tmp_path / "librivox").mkdir()
    (tmp_path / "asterisk").mkdir()
    roots = {k: tmp_path / k for k in ("ami", "librivox", "asterisk")}
    made = ri.build(roots, seed=1)
    assert sorted((s.kind, s.voice) for s in made) == [
        ("backchannel-over-talk", "ami:B"),
        ("sentence", "ami:B"),
        ("sentence", "ami:C"),
    ]  # A's turn has B's backchannel inside its first 3 s: not a clean sentence
    assert {s.part for s in made} == {"dev", "held"}
    bc = next(s for s in made if s.kind == "backchannel-over-talk")
    assert bc.audio_ms == 500
    assert group_of(bc) == f"backchannel-over-talk real-{bc.part}"
    espeak = Scenario("b", "backchannel", "yeah", "en", np.zeros(10, np.int16), 700)
    assert group_of(espeak) == "backchannel"


def test_the_trace_weighs_each_hearing_with_the_voice_count_there() -> None:
    from bench.turns.barge_trace import trace
    from bench.turns.crowd import HeardAt, Replay
    from engine.interruption import InterruptionParams

    hearings = (HeardAt(200, "Okay.", True), HeardAt(300, "Two weeks.", True))
    pcm = np.zeros(300 * PCM_RATE // 1000, np.int16)
    replay = Replay(pcm, hearings, {200: 9.0, 300: 3.5}, 300, {200: 0.0, 300: 0.0})
    rows = trace(replay, InterruptionParams())
    assert [(r["heard"], r["voices"]) for r in rows] == [("backchannel", "one"), ("words", "many")]
