"""`GET /metrics` (server/metrics.py): a real turn through a served app moves the
counters and histograms by what happened; the route is behind the keys; hooks never
raise; the pieces are tested directly."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from websockets.asyncio.client import connect

from bench.speech import load_wav, silence
from engine.observer import Observer
from models.listening.fair_pool import FairPool
from models.stage_timing import StageTiming
from server.app import create_app
from server.config import Settings
from server.metrics import (
    Metrics,
    MetricsObserver,
    close_code_label,
    exited_workers,
    probe_loop,
    render,
)
from server.observers import FanOut
from tests.support.audio import ws_append_chunked
from tests.support.clock import FakeClock
from tests.support.events import Events
from tests.support.scrape import Samples, parse, value
from tests.support.servers import TEST_SETTINGS, RunningServer, ServerFactory, serving_app
from tests.support.timed_stages import cascade

KEY = "sk-metrics-test"
VAD = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
STAGES = ("commit", "model", "audio", "total")


async def scrape(server: RunningServer, key: str | None = None) -> Samples:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as http:
        response = await http.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


async def scrape_when_closed(server: RunningServer, sessions: int) -> Samples:
    """The scrape once the server has closed `sessions` connections (it finishes a
    session after the client has gone)."""
    for _ in range(200):
        samples = await scrape(server)
        if sum(
            v for (name, _), v in samples.items() if name == "parley_connections_closed_total"
        ) >= sessions and not value(samples, "parley_sessions_open"):
            return samples
        await asyncio.sleep(0.05)
    raise AssertionError("the server did not close the sessions")


async def test_a_turn_moves_every_counter_and_histogram_by_what_happened(
    server: RunningServer,
) -> None:
    before = await scrape(server)
    assert value(before, "parley_sessions_total") == 0
    for stage in STAGES:  # the series exist before the first turn
        assert ("parley_turn_latency_seconds_count", (("stage", stage),)) in before
    stage_series = {
        labels for name, labels in before if name == "parley_stage_seconds_count"
    }  # each model stage's, embedded and remote: 8, and never more
    assert len(stage_series) == 8
    assert (("phase", "first_audio"), ("stage", "tts"), ("where", "remote")) in stage_series
    pcm = np.concatenate([silence(300), load_wav("timer"), silence(900)])
    async with connect(server.ws_url) as ws:
        events = Events(ws.recv)
        await events.until("session.created")
        await ws.send(json.dumps({"type": "session.update", "session": VAD}))
        appends = await ws_append_chunked(ws, pcm)
        await events.until("response.done")
        await ws.send("not json")
        await events.until("error")
        await ws.send(json.dumps({"type": "response.cancel"}))  # nothing to cancel
        await events.until("error")
        during = await scrape(server)
        await ws.close(code=1001)  # the client going away
    assert value(during, "parley_sessions_open") == 1
    after = await scrape_when_closed(server, 1)

    assert value(after, "parley_sessions_total") == 1
    assert value(after, "parley_sessions_open") == 0
    assert value(after, "parley_connections_closed_total", code="1001") == 1
    assert value(after, "parley_client_events_total", type="session.update") == 1
    assert value(after, "parley_client_events_total", type="input_audio_buffer.append") == appends
    assert value(after, "parley_client_events_total", type="response.cancel") == 1
    assert value(after, "parley_errors_total", code="invalid_json") == 1
    assert value(after, "parley_errors_total", code="response_cancel_not_active") == 1
    assert value(after, "parley_responses_total", status="completed") == 1
    assert value(after, "parley_responses_total", status="cancelled") == 0
    assert value(after, "parley_barge_ins_total") == 0
    # One turn: one observation per stage, each a plausible time.
    for stage in STAGES:
        assert value(after, "parley_turn_latency_seconds_count", stage=stage) == 1, stage
        assert 0 <= value(after, "parley_turn_latency_seconds_sum", stage=stage) < 10
    assert value(after, "parley_executor_queued") == 0
    assert ("parley_event_loop_lag_seconds_count", ()) in after


async def test_metrics_need_a_key_when_keys_are_set(serve: ServerFactory) -> None:
    server = await serve(api_keys=[KEY])
    async with httpx.AsyncClient(base_url=server.http_url, trust_env=False) as http:
        refused = await http.get("/metrics")
        wrong = await http.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "missing_api_key"
    assert wrong.status_code == 401
    assert value(await scrape(server, KEY), "parley_sessions_total") == 0


async def test_metrics_are_open_on_an_open_server_and_gone_when_turned_off(
    serve: ServerFactory,
) -> None:
    assert value(await scrape(await serve()), "parley_sessions_total") == 0
    off = await serve(metrics=False)
    async with httpx.AsyncClient(base_url=off.http_url, trust_env=False) as http:
        assert (await http.get("/metrics")).status_code == 404


def direct() -> tuple[Metrics, MetricsObserver]:
    metrics = Metrics(CollectorRegistry())
    return metrics, MetricsObserver(metrics, clock=lambda: 0.0)


def test_barge_ins_statuses_and_refused_connections_are_counted() -> None:
    metrics, observer = direct()
    observer.session_opened("s")
    observer.barge_in("s", "resp1")
    observer.response_done("s", "resp1", "cancelled")
    observer.session_closed("s")
    observer.connection_closed("s", 1000)
    observer.connection_closed(None, 1013)
    observer.connection_closed("t", 4321)  # a client's own code
    samples = parse(render(metrics).decode())
    assert value(samples, "parley_barge_ins_total") == 1
    assert value(samples, "parley_responses_total", status="cancelled") == 1
    assert value(samples, "parley_connections_closed_total", code="1013") == 1
    assert value(samples, "parley_connections_closed_total", code="other") == 1
    assert value(samples, "parley_sessions_open") == 0


def test_close_codes_outside_the_known_set_share_one_label() -> None:
    assert [close_code_label(c) for c in (1000, 1008, 1013, 1006)] == [
        "1000", "1008", "1013", "1006",
    ]  # fmt: skip
    assert {close_code_label(c) for c in (1002, 3000, 4000, 4999, 0)} == {"other"}


def test_a_failing_metric_does_not_raise_out_of_its_hook(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("server.metrics._reported", set())
    metrics, observer = direct()

    class Broken:
        def labels(self, *_: Any) -> Any:
            raise RuntimeError("broken collector")

    metrics.client_events = Broken()  # type: ignore[assignment]
    observer.frame_parsed("s", "session.update")
    observer.frame_parsed("s", "session.update")
    failures = [r for r in caplog.records if "frame_parsed" in r.getMessage()]
    assert len(failures) == 1  # reported once, not once per frame


def test_fan_out_calls_each_overriding_observer_and_survives_a_failing_one() -> None:
    seen: list[tuple[str, str]] = []

    class Failing(Observer):
        def session_opened(self, session_id: str) -> None:
            raise RuntimeError("observer bug")

    class Listening(Observer):
        def session_opened(self, session_id: str) -> None:
            seen.append(("opened", session_id))

    fan = FanOut([Failing(), Observer(), Listening()])
    fan.session_opened("s")
    fan.session_closed("s")  # overridden by none: nothing to call
    assert seen == [("opened", "s")]


async def test_the_probe_records_loop_lag_and_the_executor_queue() -> None:
    metrics = Metrics(CollectorRegistry())
    now = [0.0]
    slept = asyncio.Event()
    wakes = iter([0.130, 0.100])  # how long each sleep of 0.1 s really took

    async def sleep(interval: float) -> None:
        try:
            now[0] += next(wakes)
        except StopIteration:
            slept.set()
            await asyncio.Event().wait()  # park the probe forever

    probe = asyncio.create_task(probe_loop(metrics, lambda: 3, lambda: now[0], sleep, 0.1))
    await slept.wait()
    probe.cancel()
    samples = parse(render(metrics).decode())
    assert value(samples, "parley_event_loop_lag_seconds_count") == 2
    assert value(samples, "parley_event_loop_lag_seconds_sum") == pytest.approx(0.030)
    assert value(samples, "parley_event_loop_lag_seconds_bucket", le="0.025") == 1
    assert value(samples, "parley_executor_queued") == 3


def test_exited_workers_are_found_by_their_live_gauge_files() -> None:
    files = [
        "gauge_livesum_11.db",
        "gauge_livesum_12.db",
        "gauge_livemax_13.db",
        "counter_13.db",
        "counter_14.db",  # an exited worker's counters stay: they were counted
        "histogram_12.db",
    ]
    assert exited_workers(files, alive=lambda pid: pid == 12) == {11, 13}


async def test_requests_the_shared_models_drop_are_counted_by_model_and_reason() -> None:
    metrics, _ = direct()
    samples = parse(render(metrics).decode())
    assert (
        value(samples, "parley_model_requests_dropped_total", model="hearing", reason="superseded")
        == 0
    )
    # The overloaded series is there from the start, at zero (a dashboard sees no gap).
    overloaded = (("model", "hearing"), ("reason", "overloaded"))
    assert samples[("parley_model_requests_dropped_total", overloaded)] == 0
    pool = FairPool(1, "test")
    pool.on_drop = metrics.dropped_by("end_of_turn")
    release = threading.Event()
    try:
        running = asyncio.create_task(pool.run(lambda: release.wait(10)))
        waiting = asyncio.create_task(pool.run(lambda: True))
        await asyncio.sleep(0)  # the first is on the thread, the second in line
        assert pool.queued == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        assert await running
    finally:
        pool.close()
    samples = parse(render(metrics).decode())
    assert (
        value(
            samples, "parley_model_requests_dropped_total", model="end_of_turn", reason="abandoned"
        )
        == 1
    )


def test_seconds_of_paced_audio_are_counted() -> None:
    metrics, observer = direct()
    observer.audio_paced("s", 1.5)
    observer.audio_paced("t", 0.25)
    samples = parse(render(metrics).decode())
    assert value(samples, "parley_input_audio_paced_seconds_total") == 1.75


def test_each_model_stage_is_timed_by_stage_where_and_phase() -> None:
    metrics, observer = direct()
    observer.stage_timed("s", "r1", StageTiming("asr", "remote", "transcript", 0.3, "r1"))
    observer.stage_timed("s", "r1", StageTiming("llm", "embedded", "first_token", 0.2, "r1"))
    observer.stage_timed("s", "r1", StageTiming("tts", "remote", "first_audio", 0.04, "r1"))
    spoken = StageTiming("asr", "remote", "transcript", 0.0, "r2", speculative=True)
    observer.stage_timed("s", "r2", spoken)
    samples = parse(render(metrics).decode())

    def seconds(suffix: str, stage: str, where: str, phase: str) -> float:
        labels = {"stage": stage, "where": where, "phase": phase}
        return value(samples, f"parley_stage_seconds_{suffix}", **labels)

    assert seconds("count", "asr", "remote", "transcript") == 2
    assert seconds("sum", "asr", "remote", "transcript") == pytest.approx(0.3)
    assert seconds("count", "llm", "embedded", "first_token") == 1
    assert seconds("count", "llm", "remote", "first_token") == 0
    tts = {"stage": "tts", "where": "remote", "phase": "first_audio"}
    assert value(samples, "parley_stage_seconds_bucket", le="0.025", **tts) == 0
    assert value(samples, "parley_stage_seconds_bucket", le="0.05", **tts) == 1
    assert value(samples, "parley_speculative_transcripts_total") == 1


def test_a_stage_timing_outside_the_fixed_series_is_refused(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("server.metrics._reported", set())
    metrics, observer = direct()
    odd = StageTiming("tts", "embedded", "first_token", 0.1, "r")  # no such phase of tts
    observer.stage_timed("s", "r", odd)
    samples = parse(render(metrics).decode())
    assert not [
        labels
        for (name, labels) in samples
        if dict(labels).get("phase") == "first_token" and dict(labels).get("stage") == "tts"
    ]
    assert any("stage_timed" in r.getMessage() for r in caplog.records)


def test_docs_metrics_lists_every_metric_with_its_type() -> None:
    rows = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    metrics = Metrics(CollectorRegistry())
    for family in metrics.registry.collect():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        assert f"| `{name}` | {family.type} |" in rows, name


async def test_a_served_cascade_shows_each_stage_of_its_answer_in_the_scrape() -> None:
    ex, _, _ = cascade(FakeClock(), written=True)
    settings = Settings(**TEST_SETTINGS)
    app = create_app(settings, executor=ex)
    pcm = np.concatenate([silence(300), load_wav("timer"), silence(900)])
    async with serving_app(app, settings, name="cascade") as running:
        async with connect(running.ws_url) as ws:
            events = Events(ws.recv)
            await events.until("session.created")
            await ws.send(json.dumps({"type": "session.update", "session": VAD}))
            await ws_append_chunked(ws, pcm)
            await events.until("response.done")
            samples = await scrape(running)
    await ex.aclose()
    for stage, phase in [
        ("asr", "transcript"),
        ("llm", "first_token"),
        ("llm", "total"),
        ("tts", "first_audio"),
    ]:
        labels = {"stage": stage, "where": "embedded", "phase": phase}
        assert value(samples, "parley_stage_seconds_count", **labels) == 1, labels
        assert value(samples, "parley_stage_seconds_count", **{**labels, "where": "remote"}) == 0
