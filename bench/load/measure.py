"""One measurement point: N load clients against one server over a window after a
warm-up, with the server's CPU, the machine's and this process's read at both ends."""

from __future__ import annotations

import asyncio
import functools
import resource
from dataclasses import dataclass
from pathlib import Path

from bench.load.client import (
    LoadClient,
    Samples,
    StopPlan,
    chunk_holding,
    configure,
    open_connections,
)
from bench.load.clips import ROTATIONS, rotation
from bench.load.points import Point, judge
from bench.load.profile import start_py_spy
from bench.load.servers import Server
from bench.load.stats import dist
from bench.machine import machine_ticks, tree_cpu_seconds, tree_rss_bytes

WARMUP_S = 1.0
POINT_TIMEOUT_S = 90.0


@dataclass
class Reading:
    """The counters at one end of the window."""

    t: float  # the loop's clock
    server_cpu_s: float  # the server's process tree
    ticks: tuple[float, float, float]  # the machine's busy, steal and total
    own_cpu_s: float  # this process (the load generator)
    stats: dict[str, list[float]]  # the server's probes since the last reset


async def run_point(
    server: Server,
    n: int,
    chunk_ms: int,
    texts: list[str],
    window_s: float,
    plans: list[dict[int, int]] | None,
    onset_chunks: set[int] | None = None,
    profile_to: Path | None = None,
) -> Point:
    loop = asyncio.get_running_loop()
    target = server.target
    conns = await open_connections(f"ws://127.0.0.1:{server.port}/v1/realtime", n)
    if target.turn_detection is not None:
        try:
            await configure(conns, target.turn_detection)
        except BaseException:
            await asyncio.gather(*(ws.close() for ws in conns), return_exceptions=True)
            raise
    chunk_s = chunk_ms / 1000
    t0 = loop.time() + 0.5
    window = (t0 + WARMUP_S, t0 + WARMUP_S + window_s)
    n_send = int((WARMUP_S + window_s) / chunk_s) + 2
    out = Samples()
    clients = [
        LoadClient(
            ws,
            texts,
            rotation(i, len(texts)),
            t0 + chunk_s * i / n,
            n_send,
            chunk_s,
            window,
            out,
            stop_plan(target.semantic, chunk_ms, plans, i),
            target.floor,
            onset_chunks,
        )
        for i, ws in enumerate(conns)
    ]
    receivers = [loop.create_task(c.receive()) for c in clients]
    senders = [loop.create_task(c.send()) for c in clients]
    pid = server.proc.pid

    async def read_at(t: float, reset: bool) -> Reading:
        await asyncio.sleep(max(0.0, t - loop.time()))
        stats = await server.stats(reset)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return Reading(
            loop.time(),
            tree_cpu_seconds(pid),
            machine_ticks(),
            usage.ru_utime + usage.ru_stime,
            stats,
        )

    try:
        async with asyncio.timeout(POINT_TIMEOUT_S + window_s):
            first = await read_at(window[0], reset=True)
            spy = None if profile_to is None else start_py_spy(pid, window_s, profile_to)
            last = await read_at(window[1], reset=False)
            if spy is not None:
                await asyncio.to_thread(spy.wait, 30)
            rss = tree_rss_bytes(pid)
            done, _ = await asyncio.wait(senders, timeout=5)
            for task in done:
                if not task.cancelled() and (exc := task.exception()) is not None:
                    out.errors.append(f"send: {exc!r}")
            await asyncio.sleep(1.0)  # late acks and events of the window's chunks
    finally:
        for task in senders:
            task.cancel()
        await asyncio.gather(*(ws.close() for ws in conns), return_exceptions=True)
        for task in receivers:
            task.cancel()
        await asyncio.gather(*senders, *receivers, return_exceptions=True)
    for c in clients:
        c.barge_results(chunk_ms)
    point = figures(server, n, chunk_ms, window_s, out, first, last, rss)
    point.passed, point.why = judge(point, target)
    point.barge = out.barge
    return point


def stop_plan(
    semantic: bool, chunk_ms: int, plans: list[dict[int, int]] | None, client: int
) -> StopPlan | None:
    """How client `client` finds the chunk that let a turn stop: server_vad's planned
    chunks; semantic_vad's from the audio clock."""
    if semantic:
        return functools.partial(chunk_holding, chunk_ms=chunk_ms)
    return None if plans is None else plans[client % ROTATIONS].get


def figures(
    server: Server,
    n: int,
    chunk_ms: int,
    window_s: float,
    out: Samples,
    first: Reading,
    last: Reading,
    rss: int,
) -> Point:
    """The point the clients' samples and the two readings make (not judged yet)."""
    wall = last.t - first.t
    server_cpu = last.server_cpu_s - first.server_cpu_s
    busy, steal, total = (b - a for a, b in zip(first.ticks, last.ticks, strict=True))
    gen_cpu = last.own_cpu_s - first.own_cpu_s
    stats = last.stats
    return Point(
        target=server.target.name,
        n=n,
        chunk_ms=chunk_ms,
        stop_ms=dist(out.stop),
        stop_server_ms=dist(stats.get("stop_ms", [])),
        delta_ms=dist(stats.get("delta_ms", [])),
        ack_ms=dist(out.ack),
        loop_lag_ms=dist(stats.get("loop_lag_ms", [])),
        gc_ms=dist(stats.get("gc_ms", [])),
        score_ms=dist(stats.get("score_ms", [])),
        slip_ms=dist(out.slip),
        server_cpu_pct=100 * server_cpu / wall,
        cpu_us_per_msg=1e6 * server_cpu / out.sent if out.sent else None,
        server_rss_mb=rss / 2**20,
        generator_cpu_pct=100 * gen_cpu / wall,
        other_cpu_pct=100 * max(0.0, busy - server_cpu - gen_cpu) / wall,
        steal_pct=100 * steal / total if total else 0.0,
        messages=out.sent,
        unmatched_stops=out.unmatched_stops,
        responses_done=out.responses_done,
        errors=out.errors[:5],
        window_s=window_s,
    )
