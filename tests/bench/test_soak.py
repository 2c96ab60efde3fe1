"""The soak (`make soak`, bench/soak/): its pure parts (the RSS slope and verdict,
percentiles, what counts as a problem), its options and Makefile target, and a
short run of three users for ten seconds against a real `parley serve`."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench.load.stats import dist
from bench.soak.__main__ import options_from, parser
from bench.soak.audio import CHUNK_MS, Audio
from bench.soak.report import build, problems, text, write
from bench.soak.run import Options, log_findings, run
from bench.soak.verdict import TOLERANCE_MB_PER_MIN, RssSample, slope_per_min, verdict
from bench.speech import FIXTURES, PCM_RATE
from tests.support.makefile import MAKEFILE, recipe


def samples(values: list[float], every_s: float = 10.0) -> list[RssSample]:
    return [RssSample(i * every_s, v) for i, v in enumerate(values)]


def test_slope_is_the_least_squares_fit_per_minute() -> None:
    assert slope_per_min([(0, 100), (60, 101), (120, 102)]) == pytest.approx(1.0)
    # Noise around a line: the fit, not the ends.
    assert slope_per_min([(0, 10), (30, 12), (60, 10), (90, 12)]) == pytest.approx(0.8)
    with pytest.raises(ValueError):
        slope_per_min([(5, 1)])


def test_the_verdict_reads_only_the_second_half() -> None:
    # A steep warm-up, then flat: flat.
    ramp_then_flat = samples([100, 140, 180, 200, 200.5, 200, 200.4, 200.2, 200.3, 200.1])
    judged = verdict(ramp_then_flat, duration_s=90)
    assert judged.flat is True and judged.samples_used == 5
    assert judged.slope_mb_per_min is not None and abs(judged.slope_mb_per_min) < 1
    assert "FLAT" in judged.line() and "45 s warm-up" in judged.line()


def test_growth_above_the_tolerance_is_not_flat() -> None:
    # 0.5 MB per 10 s sample: 3 MB/min.
    growing = samples([200 + 0.5 * i for i in range(10)])
    judged = verdict(growing, duration_s=90)
    assert judged.flat is False
    assert judged.slope_mb_per_min == pytest.approx(3.0)
    assert judged.growth_mb == pytest.approx(2.0)  # over the 40 s of the second half
    assert "GROWING" in judged.line()
    assert verdict(growing, duration_s=90, tolerance_mb_per_min=3.5).flat is True
    # Shrinking memory is flat.
    assert verdict(samples([200 - i for i in range(10)]), duration_s=90).flat is True


def test_too_few_samples_after_warm_up_give_no_verdict() -> None:
    judged = verdict(samples([100, 101, 102, 103]), duration_s=60)  # one sample at >= 30 s
    assert judged.flat is None and judged.slope_mb_per_min is None
    assert judged.line().startswith("VERDICT: unknown")
    assert TOLERANCE_MB_PER_MIN == 1.0


def test_percentiles_of_the_latencies() -> None:
    d = dist([float(v) for v in range(1, 101)])
    assert d["n"] == 100 and d["max"] == 100
    assert d["p50"] == pytest.approx(50.5) and d["p99"] == pytest.approx(99.01)
    assert dist([])["p50"] is None


def a_report(**changes: Any) -> dict[str, Any]:
    report: dict[str, Any] = {
        "verdict": {"flat": True},
        "errors_by_code": {"invalid_json": 3},
        "server_log": {"tracebacks": 0},
    }
    return report | changes


def test_problems_are_growth_internal_errors_crashes_and_tracebacks() -> None:
    assert problems(a_report()) == []
    assert problems(a_report(verdict={"flat": None})) == []
    assert problems(a_report(verdict={"flat": False})) == ["RSS grows"]
    found = problems(a_report(errors_by_code={"internal_error": 2, "soak_client_crash": 1}))
    assert found == ["2 x internal_error", "1 x soak_client_crash"]
    assert problems(a_report(server_log={"tracebacks": 1})) == ["1 tracebacks in the server log"]


def test_server_log_findings() -> None:
    log = (
        "INFO x: fine\nERROR uvicorn: boom\nTraceback (most recent call last):\n"
        '  File "a.py", line 1, in f\n    g()\nKeyError: 7\nINFO after\n'
    )
    assert log_findings(log) == {
        "tracebacks": 1,
        "error_lines": 1,
        "first_errors": ["ERROR uvicorn: boom"],
        "exceptions": {"KeyError: 7": 1},
    }


def test_options_and_their_defaults() -> None:
    defaults = options_from(parser().parse_args([]))
    assert (defaults.sessions, defaults.minutes, defaults.executor) == (50, 10.0, "scripted")
    assert defaults.url is None and defaults.seed == 1
    assert defaults.sample_interval_s() == 10.0
    assert Options(minutes=3).sample_interval_s() == 3.0
    assert Options(minutes=0.1).sample_interval_s() == 1.0
    args = ["--sessions", "3", "--minutes", "0.5", "--executor", "cascade", "--seed", "7"]
    args += ["--url", "ws://127.0.0.1:9/v1/realtime", "--pid", "42"]
    chosen = options_from(parser().parse_args(args))
    assert (chosen.sessions, chosen.minutes, chosen.executor, chosen.seed) == (3, 0.5, "cascade", 7)
    assert (chosen.url, chosen.pid) == ("ws://127.0.0.1:9/v1/realtime", 42)


def test_make_soak_runs_the_soak_with_sessions_and_minutes() -> None:
    makefile = MAKEFILE.read_text()
    assert "-m bench.soak --sessions $(SESSIONS) --minutes $(MINUTES)" in recipe("soak")
    assert re.search(r"^SESSIONS \?= 50$", makefile, re.M)
    assert re.search(r"^MINUTES \?= 10$", makefile, re.M)


def test_every_fixture_is_sent_from_its_speech_onset() -> None:
    audio = Audio.build()
    assert [u.name for u in audio.utterances] == FIXTURES
    chunk_chars = len(json.loads(audio.silence)["audio"])
    assert chunk_chars == len(base64.b64encode(bytes(2 * PCM_RATE * CHUNK_MS // 1000)))
    for u in audio.utterances:
        assert 0 < u.last_speech < len(u.chunks)
        first = json.loads(u.chunks[0])
        assert first["type"] == "input_audio_buffer.append"
        assert first["audio"] != json.loads(audio.silence)["audio"]  # speech at once


async def test_a_short_soak_against_a_real_server(tmp_path: Path) -> None:
    """Three users for ten seconds: the report has memory samples, answered turns,
    closes, no internal error, and a verdict (seed 3 starts two users talking)."""
    options = Options(sessions=3, minutes=10 / 60, sample_s=1.0, seed=3)
    outcome = await run(options)
    report = build(options, outcome, machine={})
    assert len(report["rss"]) >= 8
    assert all(s["rss_mb"] > 50 for s in report["rss"])  # a Python server, measured
    assert any(s["sessions"] for s in report["rss"])  # /healthz saw the users
    assert report["verdict"]["flat"] is not None
    assert report["verdict"]["samples_used"] >= 3
    assert report["verdict"]["line"].startswith("VERDICT: RSS ")
    assert "internal_error" not in report["errors_by_code"]
    assert report["server_log"]["tracebacks"] == 0
    assert report["latency_ms"]["speech_end_to_first_audio"]["n"] >= 1
    assert report["response_statuses"].get("completed", 0) >= 1
    assert sum(report["close_codes"].values()) >= 3  # every connection's end is counted
    assert report["unfinished_users"] == 0
    # Ten seconds are all warm-up: whether RSS is flat yet is not the question here.
    assert [p for p in problems(report) if p != "RSS grows"] == []
    out = tmp_path / "soak.json"
    write(report, out)
    assert json.loads(out.read_text())["verdict"] == report["verdict"]
    printed = text(report)
    for heading in ("RSS over time", "latency (ms)", "errors by code", "close codes"):
        assert heading in printed
