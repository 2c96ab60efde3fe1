"""`make eval-turns` (bench/turns/): the scoring of streamed turns against the truth of
synthesis as pure decisions, the noise mixed at its SNR, and a short run through a real
server whose report holds together."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.turns import consecutive
from bench.turns.__main__ import main
from bench.turns.corpus import SETS, make_corpus
from bench.turns.noise import mix, noise_bed, pink, speech_rms
from bench.turns.run import MODES, TURN_MODES, truth_of
from bench.turns.score import Truth, Turn, classify, p50_p90, summarize
from bench.turns.stream import CHUNK_MS, applied_type
from tests.support.espeak import made_twice, require_espeak
from tests.support.makefile import recipe

# Speech 1000-3000 ms; the chunk holding its last sample was sent at t = 10.0 s.
TRUTH = Truth([(1000, 3000)], end_sent_t=10.0)
HESITATION = Truth([(1000, 2000), (2800, 4000)], end_sent_t=10.0)


def test_one_turn_committed_after_the_end_is_clean_with_its_latencies() -> None:
    turn = Turn(start_ms=700, end_ms=3550, stopped_t=10.6, committed_t=10.61)
    outcome = classify([turn], TRUTH)
    assert (outcome.turns, outcome.extra, outcome.cut_off, outcome.missed) == (1, 0, False, False)
    assert outcome.audio_end_ms == 550
    assert outcome.stopped_ms == pytest.approx(600)
    assert outcome.committed_ms == pytest.approx(610)


def test_a_hesitation_split_in_two_turns_is_a_cut_off_without_latency() -> None:
    first = Turn(700, 2500, stopped_t=8.5, committed_t=8.5)
    second = Turn(2500, 4550, stopped_t=10.6, committed_t=10.6)
    outcome = classify([first, second], HESITATION)
    assert (outcome.turns, outcome.cut_off, outcome.missed, outcome.extra) == (2, True, False, 0)
    assert outcome.committed_ms is None and outcome.audio_end_ms is None
    # Two turns are a split whenever the first one was committed.
    late = Truth(HESITATION.spans, end_sent_t=8.0)
    assert classify([first, second], late).cut_off


def test_one_turn_committed_before_the_true_end_was_sent_is_a_cut_off() -> None:
    # The rest of the speech was too short to open a second turn.
    outcome = classify([Turn(700, 2900, stopped_t=9.9, committed_t=9.9)], TRUTH)
    assert outcome.cut_off and outcome.turns == 1


def test_no_commit_is_missed_even_when_speech_started() -> None:
    assert classify([], TRUTH).missed
    open_turn = classify([Turn(700)], TRUTH)  # heard, never ended (noise held it open)
    assert open_turn.missed and not open_turn.cut_off and open_turn.turns == 0
    assert open_turn.unended == 1 and classify([], TRUTH).unended == 0


def test_turns_over_no_speech_are_extra_and_do_not_split_the_utterance() -> None:
    before = Turn(0, 900, stopped_t=8.0, committed_t=8.0)  # noise in the lead
    own = Turn(700, 3550, stopped_t=10.6, committed_t=10.6)
    after = Turn(4000, 4800, stopped_t=11.5, committed_t=11.5)  # noise in the trail
    outcome = classify([before, own, after], TRUTH)
    assert (outcome.extra, outcome.turns, outcome.cut_off, outcome.missed) == (2, 1, False, False)
    assert classify([after], TRUTH).missed and classify([after], TRUTH).extra == 1


def test_percentiles_interpolate_and_are_none_without_values() -> None:
    assert p50_p90([100.0, 200.0, 300.0, 400.0, 500.0]) == {"n": 5, "p50": 300.0, "p90": 460.0}
    assert p50_p90([]) == {"n": 0, "p50": None, "p90": None}


def test_a_summary_counts_every_item_once() -> None:
    clean = classify([Turn(700, 3550, 10.6, 10.6)], TRUTH)
    cut = classify([Turn(700, 2500, 8.5, 8.5), Turn(2500, 4550, 10.6, 10.6)], HESITATION)
    missed = classify([Turn(4000, 4800, 11.5, 11.5)], TRUTH)
    s = summarize([clean, cut, missed])
    assert (s["items"], s["cut_offs"], s["missed"], s["clean"], s["extra_turns"]) == (3, 1, 1, 1, 1)
    assert s["unended_turns"] == 0
    assert s["latency_ms"] == {
        "audio_end": {"n": 1, "p50": 550.0, "p90": 550.0},
        "speech_stopped": {"n": 1, "p50": pytest.approx(600), "p90": pytest.approx(600)},
        "committed": {"n": 1, "p50": pytest.approx(600), "p90": pytest.approx(600)},
    }


def test_the_true_end_is_sent_with_the_chunk_holding_its_last_sample() -> None:
    sent = [float(k) for k in range(10)]  # chunk k covers [20k, 20k + 20) ms
    assert truth_of([(0, 100)], sent).end_sent_t == 4.0  # last sample at 99 ms
    assert truth_of([(0, 101)], sent).end_sent_t == 5.0
    assert truth_of([(0, 10_000)], sent).end_sent_t == 9.0  # never past the last chunk
    assert CHUNK_MS == 20


def test_the_noise_is_mixed_at_its_snr_below_the_speech() -> None:
    rng = np.random.default_rng(3)
    speech = np.zeros(48_000, np.int16)
    speech[12_000:36_000] = (3000 * np.sin(np.arange(24_000) / 5)).astype(np.int16)
    bed = noise_bed([rng.normal(0, 1000, 10_000).astype(np.int16)], len(speech), seed=5)
    assert np.sqrt(np.mean(bed**2)) == pytest.approx(1.0)
    for snr in (10.0, 5.0):
        noisy = mix(speech, bed, snr, speech_rms(speech)).astype(float)
        noise_rms = np.sqrt(np.mean((noisy - speech) ** 2))
        assert 20 * np.log10(speech_rms(speech) / noise_rms) == pytest.approx(snr, abs=0.1)
    # The same seed, the same noise; pink noise has more power low than high.
    assert np.array_equal(noise_bed([speech], 1000, 9), noise_bed([speech], 1000, 9))
    power = np.abs(np.fft.rfft(pink(48_000, np.random.default_rng(1)))) ** 2
    assert power[10:100].mean() > 10 * power[10_000:10_090].mean()


def test_the_mode_applied_is_read_from_session_updated() -> None:
    session = {"audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
    assert applied_type(session) == "server_vad"
    assert applied_type({"audio": {"input": {"turn_detection": None}}}) is None
    assert applied_type(None) is None


def test_every_mode_the_issue_names_is_measured() -> None:
    assert TURN_MODES == [
        "server_vad/silero",
        "server_vad/webrtc",
        "semantic_vad/low",
        "semantic_vad/medium",
        "semantic_vad/high",
        "semantic_vad/auto",
    ]
    # What only the interruption scenarios measure: qualified interruption, the echo guard.
    assert [m for m in MODES if m not in TURN_MODES] == [
        "server_vad/silero+qualified",
        "semantic_vad/auto+qualified",
        "server_vad/silero+instant",
        "server_vad/webrtc+instant",
        "semantic_vad/auto+instant",
        "server_vad/silero+aec",
        "server_vad/silero+qualified+aec",
        "server_vad/silero+aec3",
    ]
    # "+instant" turns qualified interruption off; the plain modes keep the default.
    assert MODES["server_vad/silero+instant"].turn_detection["interruption"] is None
    assert "interruption" not in MODES["server_vad/silero"].turn_detection
    assert MODES["server_vad/silero+aec3"].audio_input == {
        "echo_cancellation": {"type": "server", "cancel_input": True}
    }
    # A semantic mode streams past its longest wait, so a slow commit is seen.
    assert MODES["semantic_vad/low"].trail_ms > 8000
    assert all(m.turn_detection["create_response"] is False for m in MODES.values())


def test_make_eval_turns_runs_the_tool_and_system_deps_installs_espeak() -> None:
    assert "-m bench.turns" in recipe("eval-turns")
    assert "apt-get install -y -qq espeak-ng" in recipe("system-deps")


def test_the_set_is_the_same_for_the_same_seed_and_cached(tmp_path: Path) -> None:
    made, again = made_twice(make_corpus, tmp_path, "seed")
    assert [i.name for i in made.items] == [i.name for i in again.items]
    assert all(
        np.array_equal(a.speech, b.speech) for a, b in zip(made.items, again.items, strict=True)
    )
    assert [i.set for i in made.items] == [s for s in SETS for _ in range(10)]
    for item in made.items:
        if item.set == "hesitation":
            (_, end_a), (start_b, _) = item.segments
            assert 600 <= start_b - end_a <= 900
        assert item.segments[-1][1] == item.speech_ms
    assert len({(i.voice, i.rate_wpm) for i in made.items}) >= 4


def test_a_short_run_through_a_real_server_reports_consistent_counts(tmp_path: Path) -> None:
    """One item per set at 4x real time, server_vad with Silero and semantic_vad at auto
    (measured, or reported as not supported by this server)."""
    require_espeak()
    out = tmp_path / "turns.json"
    args = ["--limit", "1", "--speed", "4", "--out", str(out), "--seed", "15", "--voices", "espeak"]
    assert main([*args, "--modes", "server_vad/silero", "semantic_vad/auto"]) == 0
    report = json.loads(out.read_text())
    assert (report["seed"], report["speed"], report["chunk_ms"]) == (15, 4.0, 20)
    assert [m["mode"] for m in report["modes"]] == ["server_vad/silero", "semantic_vad/auto"]
    server_vad = report["modes"][0]
    assert server_vad["supported"] and server_vad["errors"] == []
    for mode in report["modes"]:
        if not mode["supported"]:
            assert mode["note"].startswith("not supported by this server")
            continue
        assert list(mode["sets"]) == SETS + consecutive.SETS
        assert list(mode["questions"]) == consecutive.SETS
        assert len(mode["items"]) == len(SETS) + len(consecutive.SETS)
        for q in mode["questions"].values():
            assert q["own_turn"] + q["merged"] + q["split"] + q["missed"] == q["questions"] == 3
        for s in mode["sets"].values():
            assert s["items"] == 1
            assert s["cut_offs"] + s["missed"] + s["clean"] == s["items"]
            for latency in s["latency_ms"].values():
                assert latency["n"] == s["clean"]
    # The clean question was heard and ended after its speech, not before.
    complete = server_vad["sets"]["complete"]
    assert complete["clean"] == 1
    assert complete["latency_ms"]["audio_end"]["p50"] > 0
    assert complete["latency_ms"]["committed"]["p50"] > 0
    # The eot-bench row of the clean espeak turns: one pause (the hesitation), two ends.
    assert (
        server_vad["eot_bench"]["espeak"]["holds"],
        server_vad["eot_bench"]["espeak"]["eots"],
    ) == (1, 2)
