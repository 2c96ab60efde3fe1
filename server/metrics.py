"""Prometheus metrics (`GET /metrics`), fed by an engine observer (engine/observer.py).

`Metrics` holds the collectors, `MetricsObserver` turns hooks into counts and
latencies (turn stages from server/turn_timing.py), `probe_loop` samples event-loop
lag and the executor's queue, and `render` is the scrape. docs/metrics.md lists
every metric.

With `parley serve --workers N` every worker writes its values to files in
`PROMETHEUS_MULTIPROC_DIR` (server/cli.py makes a fresh directory for each run) and
a scrape, whichever worker answers it, sums them all. prometheus_client chooses
that mode when it is imported, from the environment; gauges say how workers'
values combine (`livesum`: the sum over workers alive), and a scrape first drops
the gauges of workers that have exited.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import ParamSpec, get_args

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from engine.observer import DetachEnd, Observer, ResponseStatus
from models.listening.fair_pool import ABANDONED, OVERLOADED, SUPERSEDED
from models.stage_timing import PHASES, WHERE, StageTiming
from server.key_limits import RefusalReason
from server.turn_timing import STAGES, Clock, Observation, TurnTimer

log = logging.getLogger(__name__)
P = ParamSpec("P")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST

# Voice latency: what a caller notices starts near 100 ms; 10 s is a stuck turn.
LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0,
)  # fmt: skip
# A loop late by 5 ms already delays every session's audio; 1 s is a stall.
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# How often the loop-lag probe wakes (and samples the executor's queue).
PROBE_INTERVAL_S = 0.1

RESPONSE_STATUSES: tuple[ResponseStatus, ...] = ("completed", "cancelled", "incomplete", "failed")
# Close codes that mean something to an operator; a client may close with any code
# in 1000-4999, so the rest share one label and the series stay few.
CLOSE_CODES = frozenset({1000, 1001, 1005, 1006, 1008, 1009, 1011, 1012, 1013})
# The shared listening models whose calls are shared fairly (models/listening/fair_pool.py).
SHARED_MODELS = ("end_of_turn", "hearing")


def close_code_label(code: int) -> str:
    return str(code) if code in CLOSE_CODES else "other"


class Metrics:
    """Every Parley metric, on `registry` (one per app, so tests can make several)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.multiprocess_dir = os.environ.get(MULTIPROC_ENV) or None
        r = self.registry
        self.sessions_open = Gauge(
            "parley_sessions_open", "Realtime sessions open now.",
            registry=r, multiprocess_mode="livesum",
        )  # fmt: skip
        self.sessions = Counter("parley_sessions", "Realtime sessions opened.", registry=r)
        self.sessions_detached = Gauge(
            "parley_sessions_detached",
            "Resumable sessions whose connection dropped, waiting for their client.",
            registry=r, multiprocess_mode="livesum",
        )  # fmt: skip
        self.detach_ends = Counter(
            "parley_detached_sessions_ended",
            "Detached sessions that were resumed, expired, or closed by the server.",
            ["how"], registry=r,
        )  # fmt: skip
        self.resumes_refused = Counter(
            "parley_resumes_refused",
            "Resume attempts refused: resume_token_invalid, resume_events_lost.",
            ["code"], registry=r,
        )  # fmt: skip
        self.connections_closed = Counter(
            "parley_connections_closed",
            "Realtime connections ended, by WebSocket close code (the server's, or the "
            "client's when it closed first; unusual codes are 'other').",
            ["code"], registry=r,
        )  # fmt: skip
        self.sessions_refused = Counter(
            "parley_sessions_refused",
            "Sessions and calls refused by key before they opened: key_used (an ephemeral "
            "key already used), key_sessions_open, key_new_sessions_rate (per-key limits).",
            ["reason"], registry=r,
        )  # fmt: skip
        self.client_events = Counter(
            "parley_client_events", "Client events parsed, by type.", ["type"], registry=r
        )
        self.errors = Counter(
            "parley_errors", "Error events sent to clients, by code.", ["code"], registry=r
        )
        self.responses = Counter(
            "parley_responses", "Responses ended, by status.", ["status"], registry=r
        )
        self.barge_ins = Counter(
            "parley_barge_ins", "Responses cancelled by the user's speech.", registry=r
        )
        self.turn_latency = Histogram(
            "parley_turn_latency_seconds",
            "Turn latency by stage: commit (end of speech to committed), model (committed "
            "to the first model output), audio (first model output to the first audio "
            "delta sent), total (end of speech to the first audio delta sent).",
            ["stage"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.stage_seconds = Histogram(
            "parley_stage_seconds",
            "Each model stage's time on the way to a response's user, embedded or "
            "remote: asr transcript (the turn's text asked for to ready), llm "
            "first_token (request to the first text or tool call) and total (to the "
            "reply's end), tts first_audio (the first clause handed to it to its audio). "
            "Each includes waiting for the stage's slot.",
            ["stage", "where", "phase"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.speculative_transcripts = Counter(
            "parley_speculative_transcripts",
            "Turns answered from the recognition begun at a pause before they were "
            "committed (their asr transcript time was spent during the user's pause).",
            registry=r,
        )
        self.remote_failures = Counter(
            "parley_remote_failures",
            "Failed attempts and probes to a remote model stage's replicas (each "
            "passes that replica over for a while), by stage (asr, tts, llm; model for "
            "--backend-url) and how: refused, timeout, broken, http_429, http_4xx, "
            "http_5xx, error.",
            ["stage", "kind"], registry=r,
        )  # fmt: skip
        self.executor_queued = Gauge(
            "parley_executor_queued", "Model calls waiting for a free slot.",
            registry=r, multiprocess_mode="livesum",
        )  # fmt: skip
        self.loop_lag = Histogram(
            "parley_event_loop_lag_seconds",
            f"How late the event loop woke a {PROBE_INTERVAL_S} s sleep.",
            buckets=LAG_BUCKETS, registry=r,
        )  # fmt: skip
        self.model_requests_dropped = Counter(
            "parley_model_requests_dropped",
            "Requests to a shared listening model that never ran, by model and reason: "
            "superseded (its session asked again first), abandoned (its session "
            "stopped waiting).",
            ["model", "reason"], registry=r,
        )  # fmt: skip
        self.audio_paced = Counter(
            "parley_input_audio_paced_seconds",
            "Seconds sessions' audio waited for the VAD, sent faster than the ingest "
            "budget (PARLEY_INGEST_SPEED times real time past PARLEY_INGEST_BURST_S).",
            registry=r,
        )
        # Series that exist from the start, so a dashboard sees zeros, not gaps.
        for model in SHARED_MODELS:
            for reason in (SUPERSEDED, ABANDONED, OVERLOADED):
                self.model_requests_dropped.labels(model, reason)
        for stage in STAGES:
            self.turn_latency.labels(stage)
        for model_stage, phases in PHASES.items():
            for where in WHERE:
                for phase in phases:
                    self.stage_seconds.labels(model_stage, where, phase)
        for status in RESPONSE_STATUSES:
            self.responses.labels(status)
        for reason in get_args(RefusalReason):
            self.sessions_refused.labels(reason)

    def remote_failed(self, stage: str, kind: str) -> None:
        """A remote stage's `Replicas.on_failure`."""
        self.remote_failures.labels(stage, kind).inc()

    def dropped_by(self, model: str) -> Callable[[str], None]:
        """A shared model's `on_drop` (models/listening/fair_pool.py): counts its
        requests that never ran, by reason."""
        return lambda reason: self.model_requests_dropped.labels(model, reason).inc()


_reported: set[str] = set()


def _report(hook: str, exc: Exception) -> None:
    if hook not in _reported:  # once per hook: a broken hook must not flood the log
        _reported.add(hook)
        log.error("metrics hook %s failed (reported once)", hook, exc_info=exc)


def guarded(hook: Callable[P, None]) -> Callable[P, None]:
    """An observer hook that logs and swallows what it raised (engine/observer.py)."""

    @functools.wraps(hook)
    def call(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            hook(*args, **kwargs)
        except Exception as exc:
            _report(hook.__name__, exc)

    return call


class MetricsObserver(Observer):
    """Engine hooks to metrics. Each hook guards itself: an observer must not raise."""

    def __init__(self, metrics: Metrics, clock: Clock) -> None:
        self.metrics = metrics
        self.timer = TurnTimer(clock)

    def _record(self, found: Iterable[Observation]) -> None:
        for stage, seconds in found:
            self.metrics.turn_latency.labels(stage).observe(seconds)

    @guarded
    def session_opened(self, session_id: str) -> None:
        self.metrics.sessions.inc()
        self.metrics.sessions_open.inc()
        self.timer.opened(session_id)

    @guarded
    def session_closed(self, session_id: str) -> None:
        self.metrics.sessions_open.dec()
        self.timer.closed(session_id)

    @guarded
    def connection_closed(self, session_id: str | None, code: int) -> None:
        self.metrics.connections_closed.labels(close_code_label(code)).inc()

    @guarded
    def session_detached(self, session_id: str) -> None:
        self.metrics.sessions_detached.inc()

    @guarded
    def detach_ended(self, session_id: str, how: DetachEnd) -> None:
        self.metrics.sessions_detached.dec()
        self.metrics.detach_ends.labels(how).inc()

    @guarded
    def resume_refused(self, code: str) -> None:
        self.metrics.resumes_refused.labels(code).inc()

    @guarded
    def frame_parsed(self, session_id: str, event_type: str) -> None:
        self.metrics.client_events.labels(event_type).inc()

    @guarded
    def error_sent(self, session_id: str, code: str) -> None:
        self.metrics.errors.labels(code).inc()

    @guarded
    def audio_paced(self, session_id: str, seconds: float) -> None:
        self.metrics.audio_paced.inc(seconds)

    @guarded
    def speech_stopped(
        self, session_id: str, item_id: str, audio_end_ms: int, frame_received: float | None
    ) -> None:
        self._record(self.timer.speech_stopped(session_id, item_id, frame_received))

    @guarded
    def committed(self, session_id: str, item_id: str) -> None:
        self.timer.committed(session_id, item_id)

    @guarded
    def response_created(self, session_id: str, response_id: str, item_id: str) -> None:
        self.timer.response_created(session_id, response_id, item_id)

    @guarded
    def first_model_chunk(self, session_id: str, response_id: str) -> None:
        self._record(self.timer.first_model_chunk(session_id, response_id))

    @guarded
    def first_audio_sent(self, session_id: str, item_id: str) -> None:
        self._record(self.timer.first_audio_sent(session_id, item_id))

    @guarded
    def barge_in(self, session_id: str, response_id: str) -> None:
        self.metrics.barge_ins.inc()

    @guarded
    def stage_timed(self, session_id: str, response_id: str, timing: StageTiming) -> None:
        if timing.phase not in PHASES[timing.stage] or timing.where not in WHERE:
            raise ValueError(f"no such stage timing: {timing}")  # keeps the series fixed
        self.metrics.stage_seconds.labels(timing.stage, timing.where, timing.phase).observe(
            timing.seconds
        )
        if timing.speculative:
            self.metrics.speculative_transcripts.inc()

    @guarded
    def response_done(self, session_id: str, response_id: str, status: ResponseStatus) -> None:
        self.metrics.responses.labels(status).inc()
        self.timer.response_done(session_id, response_id)


Sleep = Callable[[float], Awaitable[None]]


async def probe_loop(
    metrics: Metrics,
    queued: Callable[[], int],
    clock: Clock,
    sleep: Sleep = asyncio.sleep,
    interval_s: float = PROBE_INTERVAL_S,
) -> None:
    """Forever: sleep `interval_s`, record how late the wake-up was, sample the
    executor's queue. Runs in the app's lifespan; a failed sample is skipped."""
    while True:
        start = clock()
        await sleep(interval_s)
        try:
            metrics.loop_lag.observe(max(0.0, clock() - start - interval_s))
            metrics.executor_queued.set(queued())
        except Exception as exc:
            _report("probe_loop", exc)


# prometheus_client names a worker's files `<type>_<pid>.db`; live gauges'
# `gauge_live<mode>_<pid>.db`.
_LIVE_GAUGE_FILE = re.compile(r"gauge_live\w*?_(\d+)\.db")


def exited_workers(files: Iterable[str], alive: Callable[[int], bool]) -> set[int]:
    """The pids whose live gauges are still in the directory but whose process is gone."""
    pids = {int(m.group(1)) for name in files if (m := _LIVE_GAUGE_FILE.fullmatch(name))}
    return {pid for pid in pids if not alive(pid)}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mark_dead(directory: str, pid: int) -> None:
    """Drop `pid`'s live gauges (its sessions are no longer open)."""
    multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]


def render(metrics: Metrics) -> bytes:
    """The scrape: this process's metrics, or every worker's summed."""
    if metrics.multiprocess_dir is None:
        return generate_latest(metrics.registry)
    directory = metrics.multiprocess_dir
    for pid in exited_workers(os.listdir(directory), pid_alive):
        mark_dead(directory, pid)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return generate_latest(registry)
