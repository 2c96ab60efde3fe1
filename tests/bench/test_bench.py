"""The benchmarks are a source-checkout tool run by `make bench`: the modules it runs
exist and take their options, and the load benchmark's decisions are pure functions."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.denoise import measure
from bench.load.__main__ import DEFAULT_SWEEP, parser
from bench.load.client import chunk_holding
from bench.load.clips import ROTATIONS, Clip, rotation
from bench.load.measure import stop_plan
from bench.load.points import P99_LIMIT_MS, SCORE_P99_LIMIT_MS, Point, judge
from bench.load.profile import top_frames
from bench.load.search import next_n, settled
from bench.load.servers import SEMANTIC_VAD, Target, targets
from bench.load.stages import BARGE_S, CHUNKS_S, WORKERS_S, above_knee, plan
from bench.load.stats import dist
from bench.speech import FIXTURES, PCM_RATE, load_wav
from bench.voice_to_voice import merged
from bench.voice_to_voice import parser as v2v_parser
from bench.voice_to_voice_rtc import run_rtc
from tests.support.makefile import recipe

ROOT = Path(__file__).resolve().parents[2]


def make_bench_modules() -> list[str]:
    """The modules the Makefile's `bench` recipe runs with `python -m`, in order."""
    return re.findall(r"-m (\S+)", recipe("bench"))


def load_args(*argv: str) -> argparse.Namespace:
    return parser().parse_args(list(argv))


def test_make_bench_runs_the_benchmarks_in_order() -> None:
    assert make_bench_modules() == [
        "bench.voice_to_voice",  # ws
        "bench.voice_to_voice",  # rtc
        "bench.remote_stages",
        "bench.tts_first_audio",
        "bench.llm_sizes",
        "bench.turn_model",
        "bench.partial_transcripts",
        "bench.vad_backends",
        "bench.denoise",
        "bench.echo",
        "bench.load",
        "bench.load.mix",
    ]


def test_every_module_make_bench_runs_exists_in_this_checkout() -> None:
    for module in make_bench_modules():
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, module
        assert Path(spec.origin).is_relative_to(ROOT / "bench"), spec.origin
        if spec.submodule_search_locations is not None:  # a package runs its __main__
            assert importlib.util.find_spec(f"{module}.__main__") is not None, module


def test_python_m_bench_load_help_lists_its_options() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.load", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m bench.load")
    for option in (
        "--sweep",
        "--window",
        "--targets",
        "--barge",
        "--profile",
        "--name",
        "--turn-detection",
    ):
        assert option in done.stdout


def test_load_options_reach_the_run_and_the_rest_keep_their_defaults() -> None:
    args = load_args("--sweep", "1", "25", "--barge", "0", "--name", "x")
    assert (args.sweep, args.barge, args.name) == ([1, 25], 0, "x")
    defaults = load_args()
    assert defaults.sweep == DEFAULT_SWEEP
    assert (defaults.window, defaults.retries, defaults.refine, defaults.budget) == (
        4.0,
        1,
        1,
        480.0,
    )
    assert defaults.targets == ["parley", "parley-webrtc", "echo", "vad"]
    assert defaults.turn_detection == "both"
    assert (defaults.chunks, defaults.vad_backend, defaults.name) == (
        [20, 40, 100],
        "silero",
        "load",
    )


def test_an_unknown_target_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        load_args("--targets", "nginx")
    assert exit_.value.code == 2
    assert "invalid choice: 'nginx'" in capsys.readouterr().err


def test_every_target_the_options_name_has_a_server() -> None:
    servers = targets("silero")
    for action in parser()._actions:
        if action.dest in ("targets", "profile_target"):
            assert action.choices is not None
            assert set(action.choices) <= set(servers), action.dest
    assert {"parley-barge", "parley-2w"} <= set(servers)  # the later stages' servers
    assert servers["parley-webrtc"].vad_backend == "webrtc"
    assert servers["echo"].floor and not servers["parley"].floor


def test_the_stages_after_the_sweep_keep_their_time() -> None:
    full = plan(load_args("--turn-detection", "server_vad"))
    assert full.names == ["parley", "parley-webrtc", "echo", "vad"]
    assert full.workers and full.larger == [40, 100]
    assert full.keep_s == BARGE_S + WORKERS_S + CHUNKS_S
    # With webrtcvad as the VAD, "parley" is parley-webrtc already.
    assert "parley-webrtc" not in plan(load_args("--vad-backend", "webrtc")).names
    bare = plan(load_args("--barge", "0", "--workers-search", "0", "--chunks", "20"))
    assert (bare.workers, bare.larger, bare.keep_s) == (False, [], 0.0)
    floors_first = plan(load_args("--targets", "echo", "parley"))
    assert floors_first.larger == [] and floors_first.workers
    assert above_knee({"parley": 100}) == 125 and above_knee({}) == 1


def test_turn_detection_puts_semantic_vad_beside_or_instead_of_server_vad() -> None:
    assert plan(load_args()).names == ["parley", "parley-semantic", "parley-webrtc", "echo", "vad"]
    semantic = plan(load_args("--turn-detection", "semantic_vad"))
    assert semantic.names == ["parley-semantic", "parley-webrtc", "echo", "vad"]
    # Nothing to search at larger chunks or with two workers without server_vad's Parley.
    assert (semantic.workers, semantic.larger) == (False, [])
    floors = plan(load_args("--targets", "echo", "vad", "--turn-detection", "both"))
    assert floors.names == ["echo", "vad"]  # no Parley: nothing to pair
    twice = plan(load_args("--targets", "parley", "parley-semantic", "--turn-detection", "both"))
    assert twice.names == ["parley", "parley-semantic"]
    with pytest.raises(SystemExit):
        load_args("--turn-detection", "semantic")


def test_the_semantic_target_is_parley_whose_clients_set_semantic_vad() -> None:
    servers = targets("silero")
    semantic, parley = servers["parley-semantic"], servers["parley"]
    assert semantic.argv == parley.argv  # the same server; the sessions differ
    assert semantic.turn_detection == SEMANTIC_VAD and semantic.semantic
    assert SEMANTIC_VAD["type"] == "semantic_vad" and SEMANTIC_VAD["eagerness"] == "auto"
    assert parley.turn_detection is None and not parley.semantic


def test_semantic_stops_are_found_on_the_audio_clock_and_server_vad_s_by_plan() -> None:
    # Chunk k holds (k*20, (k+1)*20] ms of the session's audio.
    assert [chunk_holding(ms, 20) for ms in (1, 20, 21, 40, 41, 960)] == [0, 0, 1, 1, 2, 47]
    assert chunk_holding(0, 20) == 0 and chunk_holding(100, 100) == 0
    plans = [{500 + r: r} for r in range(ROTATIONS)]
    by_plan = stop_plan(False, 20, plans, ROTATIONS + 3)
    assert by_plan is not None and by_plan(503) == 3 and by_plan(960) is None
    on_clock = stop_plan(True, 40, plans, 0)
    assert on_clock is not None and on_clock(960) == 23
    assert stop_plan(False, 20, None, 0) is None


def test_semantic_points_are_judged_on_the_model_s_calls_not_on_stop() -> None:
    semantic = targets("silero")["parley-semantic"]
    fast = dist([1.0, 2.0, 3.0])

    def point(**figures: Any) -> Point:
        return Point(target="parley-semantic", n=25, chunk_ms=20, window_s=4.0, **figures)

    calls = dist([200.0, 250.0])
    slow_stop = dist([60.0, P99_LIMIT_MS + 20])
    assert judge(point(stop_ms=slow_stop, score_ms=calls, delta_ms=fast, slip_ms=fast), semantic)[0]
    queued = dist([300.0, SCORE_P99_LIMIT_MS + 100])
    assert judge(point(score_ms=queued, delta_ms=fast, slip_ms=fast), semantic) == (
        False,
        "score p99 597",  # 300 + 0.99 * 300
    )
    assert judge(point(delta_ms=fast, slip_ms=fast), semantic) == (False, "no score")
    # server_vad's Parley keeps its judge: the model is not its business.
    assert (
        judge(point(stop_ms=slow_stop, delta_ms=fast, slip_ms=fast), targets("silero")["parley"])[1]
        == "stop p99 70"
    )


def test_voice_to_voice_takes_a_transport_and_keeps_the_other_s_results() -> None:
    args = v2v_parser().parse_args([])
    assert (args.transport, args.repeats, args.fixtures) == ("ws", 0, FIXTURES)
    args = v2v_parser().parse_args(["--transport", "inproc", "--fixtures", "joke,timer"])
    assert (args.transport, args.fixtures) == ("inproc", ["joke", "timer"])
    with pytest.raises(SystemExit):
        v2v_parser().parse_args(["--fixtures", "opera"])
    previous = {"machine": {"a": 1}, "medians_ms": {"all": {}}, "ws": {"old": True}}
    ws = {"new": True}
    assert merged(previous, None, ws) == {"machine": {"a": 1}, "medians_ms": {"all": {}}, "ws": ws}
    inproc = {"machine": {"b": 2}, "runs": []}
    assert merged(previous, inproc, None) == {**inproc, "ws": {"old": True}}
    assert merged({}, inproc, None) == inproc
    # The WebRTC comparison has its own section, kept like the others.
    rtc = {"quantiles_ms": {}}
    assert merged(previous, None, None, rtc)["rtc"] == rtc
    assert merged({**previous, "rtc": rtc}, inproc, None)["rtc"] == rtc
    assert v2v_parser().parse_args(["--transport", "rtc"]).transport == "rtc"


async def test_the_webrtc_bench_times_a_call_beside_a_websocket_session() -> None:
    """A smoke run of `--transport rtc` on the scripted executor: both transports
    answer each utterance and are timed from the end of speech."""
    scripted = [sys.executable, "-m", "bench.probed_server", "parley", "--port", "{port}"]
    target = Target("parley-scripted", [*scripted, "--executor", "scripted"], False, "silero")
    result = await run_rtc(1, ["weather"], target=target)
    for transport in ("webrtc", "websocket"):
        total = result["quantiles_ms"][transport]["total_ms"]
        assert total["n"] == 1, result["runs"]
        # The server VAD's 500 ms of silence comes first, then the scripted answer.
        assert total["p50"] is not None and 450 < total["p50"] < 5000, result["runs"]
    (call,) = result["runs"]["webrtc"]
    assert call["status"] == "completed" and call["error"] is None


def test_a_point_passes_under_the_limits_and_names_what_failed() -> None:
    servers = targets("silero")
    fast, slow = dist([1.0, 2.0, 3.0]), dist([10.0, P99_LIMIT_MS + 5])

    def point(**figures: Any) -> Point:
        return Point(target="t", n=25, chunk_ms=20, window_s=4.0, **figures)

    assert judge(point(ack_ms=fast, slip_ms=fast), servers["echo"]) == (True, "")
    assert judge(point(stop_ms=fast, delta_ms=fast, slip_ms=fast), servers["parley"]) == (
        True,
        "",
    )
    passed, why = judge(point(stop_ms=slow, slip_ms=dist([30.0])), servers["parley"])
    assert not passed
    assert why == "slip 30, stop p99 55, no delta"
    # `parley serve` has no probe: only the client-side figures count.
    assert judge(point(stop_ms=fast, slip_ms=fast), servers["parley-2w"]) == (True, "")
    assert judge(point(errors=["boom"], ack_ms=fast, slip_ms=fast), servers["echo"]) == (
        False,
        "errors",
    )


def test_the_search_steps_and_knows_when_the_knee_is_found() -> None:
    assert next_n(100, True, best=100, worst=None) == 125  # up a quarter
    assert next_n(100, True, best=100, worst=150) == 125  # halfway to the failure
    assert next_n(100, False, best=60, worst=100) == 80  # halfway down to the pass
    assert next_n(100, False, best=0, worst=100) == 75  # no pass yet
    assert next_n(1, True, best=1, worst=None) == 2
    assert settled(100, 110) and not settled(100, 111)
    assert settled(5, 7) and not settled(5, 8)


def test_distributions_of_samples_and_of_none() -> None:
    d = dist([float(v) for v in range(1, 101)])
    assert d["n"] == 100 and d["max"] == 100.0
    assert d["p50"] == pytest.approx(50.5) and d["p99"] == pytest.approx(99.01)
    assert dist([]) == {"n": 0, "p50": None, "p95": None, "p99": None, "max": None}
    assert Point(target="t", n=1, chunk_ms=20, window_s=1.0).stop_ms == dist([])


def test_top_frames_leave_out_the_event_loop(tmp_path: Path) -> None:
    raw = tmp_path / "profile.txt"
    raw.write_text(
        "asyncio/base_events.py:run;engine/session.py:feed;engine/vad.py:score 60\n"
        "asyncio/base_events.py:run;engine/session.py:feed 30\n"
        "asyncio/base_events.py:run;server/realtime.py:send 10\n"
    )
    frames = top_frames(raw)
    assert frames["samples"] == [("total", 100.0)]
    assert frames["self"] == [
        ("engine/vad.py:score", 60.0),
        ("engine/session.py:feed", 30.0),
        ("server/realtime.py:send", 10.0),
    ]
    assert frames["inclusive"][0] == ("engine/session.py:feed", 90.0)


def test_the_clip_cuts_into_whole_chunks_and_rotates() -> None:
    clip = Clip.build(lead_ms=300, trail_ms=1200)
    assert len(clip.pcm) % (PCM_RATE // 5) == 0
    for chunk_ms in (20, 40, 100):
        assert {len(c) for c in clip.chunks(chunk_ms)} == {PCM_RATE * chunk_ms // 1000}
    assert len(clip.onsets_ms) == len(FIXTURES)
    assert clip.onsets_ms == sorted(clip.onsets_ms) and clip.onsets_ms[0] >= 300
    n = len(clip.chunks(20))
    assert rotation(0, n) == 0 == rotation(ROTATIONS, n)
    assert len({rotation(i, n) for i in range(ROTATIONS)}) == ROTATIONS
    assert all(len(load_wav(name)) > PCM_RATE // 2 for name in FIXTURES)


def test_the_noise_reduction_bench_measures_both_types() -> None:
    rng = np.random.default_rng(0)
    mixed = np.clip(rng.normal(0, 1000, 24_000), -32768, 32767).astype(np.int16)
    row = measure("far_field", mixed, slice(2400, 21_600))
    assert row["type"] == "far_field" and row["cpu_ms_per_audio_s"] > 0
    assert row["noise_db_after"] < row["noise_db_before"]


def test_llm_sizes_times_a_model_of_random_weights_at_a_shape(tmp_path: Path) -> None:
    """The smoke version of `python -m bench.llm_sizes`: a tiny Qwen2 shape is written,
    converted by Parley's converter and timed; nothing is left behind."""
    from bench.llm_sizes import NEW_TOKENS, Shape, measure

    shape = Shape("tiny", "qwen2", hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, vocab=64)
    row = measure(shape, tmp_path)
    assert row["model"] == "tiny" and row["params_m"] == round(shape.params / 1e6)
    assert row["first_token_ms"] > 0 and row["tokens_per_s"] > 0
    assert row["compute_type"] in ("int8", "float32") and row["threads"] in (1, 2)
    assert NEW_TOKENS > 1 and list(tmp_path.iterdir()) == []
