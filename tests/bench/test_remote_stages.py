"""Voice to voice with remote stages on loopback (bench/remote_stages.py): the critical
path read from the stage servers' stamps, and a short run against a real server."""

from __future__ import annotations

import json

import pytest

from bench.remote_stages import FIGURES, MODES, critical_path, nominal_stages_ms, parser, run
from bench.stage_servers import Pacing
from tests.support.makefile import recipe


def stamps_of_a_turn(t0: float) -> list[tuple[str, float, str]]:
    """A turn 10 ms after t0: recognition 100 ms, then the model (first word at 150 ms,
    then one a 10 ms), synthesis of the five-word clause (first bytes at 80 ms)."""
    steps = [("asr_request", 0.010, ""), ("asr_answer", 0.110, "What?")]
    steps += [("llm_request", 0.120, "")]
    steps += [("llm_token", 0.270 + 0.010 * i, f" w{i}") for i in range(8)]
    steps += [("tts_request", 0.330, "w0 w1 w2 w3 w4,"), ("tts_chunk", 0.410, "")]
    steps += [("tts_chunk", 0.510, ""), ("tts_request", 0.600, "The rest."), ("tts_chunk", 0.7, "")]
    return [(step, t0 + dt, text) for step, dt, text in steps]


def test_the_critical_path_splits_voice_to_voice_into_stages_and_gaps() -> None:
    stamps = stamps_of_a_turn(100.0) + stamps_of_a_turn(200.0)  # two turns in a session
    path = critical_path(stamps, t_end=200.0, t_delta=200.520, push_to_talk=True)
    assert path is not None
    assert path["asr_stage_ms"] == pytest.approx(100)
    # The clause's five words are complete when the sixth begins: 150 + 5 * 10 ms.
    assert path["llm_stage_ms"] == pytest.approx(200)
    assert path["tts_stage_ms"] == pytest.approx(80)
    assert path["stages_ms"] == pytest.approx(380)
    assert path["v2v_ms"] == pytest.approx(520)
    gaps = ["before_asr_ms", "asr_to_llm_ms", "clause_to_tts_ms", "tts_to_client_ms"]
    assert [path[g] for g in gaps] == pytest.approx([10, 10, 10, 110])
    assert path["overhead_ms"] == pytest.approx(sum(path[g] for g in gaps))
    # With turn detection, what came before the transcription request is the turn's.
    vad = critical_path(stamps, t_end=200.0, t_delta=200.520, push_to_talk=False)
    assert vad is not None and vad["turn_ms"] == pytest.approx(10)
    assert vad["overhead_ms"] == pytest.approx(130)
    assert critical_path(stamps, t_end=90.0, t_delta=100.05, push_to_talk=True) is None


def test_the_nominal_stages_are_the_settings_with_the_clause_s_words() -> None:
    pacing = Pacing(asr_ms=100, llm_first_token_ms=150, tokens_per_s=30, tts_first_byte_ms=80)
    # "The weather today looks mild," is complete when its sixth word begins.
    assert nominal_stages_ms(pacing) == pytest.approx(100 + 150 + 5 * 1000 / 30 + 80)


def test_make_bench_runs_it_and_its_options_reach_the_pacing() -> None:
    assert "-m bench.remote_stages" in recipe("bench")
    args = parser().parse_args(["--asr-ms", "40", "--repeats", "1", "--no-embedded"])
    assert (args.asr_ms, args.repeats, args.embedded, args.tokens_per_s) == (40, 1, False, 30)


async def test_a_short_run_against_a_real_server_times_every_turn() -> None:
    """Two modes, one turn each, small delays: every figure is there, and no turn is
    faster than its stages' settings."""
    pacing = Pacing(
        asr_ms=30, llm_first_token_ms=40, tokens_per_s=100, tts_first_byte_ms=20, tts_speed=10
    )
    result = await run(pacing, repeats=1, fixtures=["weather"], embedded=False)
    json.dumps(result)  # what is written
    assert set(result["quantiles_ms"]["remote"]) == set(MODES)
    nominal = nominal_stages_ms(pacing)
    for mode in MODES:
        figures = result["quantiles_ms"]["remote"][mode]
        assert set(FIGURES) <= set(figures)
        assert figures["v2v_ms"]["n"] == 1, result["runs"]
        (turn,) = result["runs"]["remote"][mode]
        assert turn["error"] is None and turn["response_status"] == "completed"
        got = turn["stages"]
        # A stage server never answers early: each stage takes at least its setting.
        assert got["asr_stage_ms"] >= pacing.asr_ms
        assert got["tts_stage_ms"] >= pacing.tts_first_byte_ms
        assert got["stages_ms"] >= nominal - 1
        assert got["v2v_ms"] >= got["stages_ms"] + got["turn_ms"]
        assert got["overhead_ms"] >= 0
    (vad,) = result["runs"]["remote"]["server_vad"]
    assert vad["stages"]["turn_ms"] >= 120  # speculation begins at 120 ms of silence
