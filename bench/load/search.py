"""Where each target's capacity lies: a sweep of N back to back over the targets with
a bisection at each knee, or a search from a starting N; every point retried once
before it counts as failed, all within the run's budget."""

from __future__ import annotations

import argparse
import asyncio
import time

from bench.load.clips import Clip, plan_stops
from bench.load.measure import WARMUP_S, run_point
from bench.load.points import Point
from bench.load.servers import Server
from bench.load.table import HEADER, row
from bench.vad_backends import BACKENDS


def settled(passed: int, failed: int) -> bool:
    """Whether the knee between a passing and a failing N is known closely enough:
    within 2 sessions or a tenth of the passing N."""
    return failed - passed <= max(2, passed // 10)


def next_n(n: int, passed: bool, best: int, worst: int | None) -> int:
    """The N a search tries after `n` (`best`: the largest pass, `worst`: the smallest
    failure so far, `n` included): up by a quarter while nothing failed, else
    halfway to the failure; after a failure halfway down to the best pass, or
    three quarters of `n` without one."""
    if passed:
        return n + max(1, n // 4) if worst is None else (n + worst) // 2
    return (best + n) // 2 if best else n * 3 // 4


class Bench:
    """The run's state: the clip and what it derives, the points so far, the budget."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.clip = Clip.build(lead_ms=300, trail_ms=1200)
        self.points: list[Point] = []
        self.plans: dict[tuple[int, str], list[dict[int, int]]] = {}
        self.texts: dict[int, list[str]] = {}
        self.deadline = time.monotonic() + args.budget
        self.unbounded: list[str] = []  # targets whose capacity is a lower bound

    def time_left(self) -> float:
        return float(self.deadline - time.monotonic())

    def out_of_time(self, keep_s: float = 0.0) -> bool:
        """No time for another point while `keep_s` stays for the stages after it."""
        return self.time_left() < max(30.0, keep_s)

    def texts_for(self, chunk_ms: int) -> list[str]:
        if chunk_ms not in self.texts:
            self.texts[chunk_ms] = self.clip.texts(chunk_ms)
        return self.texts[chunk_ms]

    def plans_for(self, chunk_ms: int, backend: str) -> list[dict[int, int]]:
        key = (chunk_ms, backend)
        if key not in self.plans:
            n_send = int((WARMUP_S + self.args.window) * 1000 / chunk_ms) + 2
            self.plans[key] = plan_stops(self.clip, chunk_ms, BACKENDS[backend](), n_send)
        return self.plans[key]

    async def point(self, server: Server, n: int, chunk_ms: int) -> Point:
        """One point; a failing one is run again (--retries; twice more if other
        processes took over half a core meanwhile) and passes if any run does: a
        neighbour's burst on this shared machine is not the server's doing. The run
        that decided is marked `decisive`."""
        target = server.target
        plans = None
        if target.vad_backend is not None:
            plans = self.plans_for(chunk_ms, target.vad_backend)
        attempt = 0
        while True:
            attempt += 1
            try:
                p = await run_point(
                    server, n, chunk_ms, self.texts_for(chunk_ms), self.args.window, plans
                )
            except Exception as exc:
                print(f"  {target.name} N={n}: failed to run: {exc!r}", flush=True)
                why = repr(exc)
                p = Point(
                    target=target.name,
                    n=n,
                    chunk_ms=chunk_ms,
                    why=why,
                    errors=[why],
                    window_s=self.args.window,
                )
            p.attempt = attempt
            if not await server.drained():
                print(f"  {target.name}: sessions still open after the point", flush=True)
            self.points.append(p)
            print(row(p), flush=True)
            retries = self.args.retries + (p.other_cpu_pct > 50 and self.args.retries > 0)
            if p.passed or attempt > retries or self.out_of_time():
                break
        p.decisive = True
        return p

    async def warm(self, servers: list[Server]) -> None:
        """A few seconds of light load on each server, not measured, so that no point
        pays for first-use work (imports, pydantic schemas, allocator growth)."""
        texts = self.texts_for(20)
        await asyncio.gather(*(run_point(s, 8, 20, texts, 3.0, None) for s in servers))
        await asyncio.gather(*(s.drained() for s in servers))

    async def sweep(self, servers: list[Server], chunk_ms: int, keep_s: float) -> dict[str, int]:
        """Back to back at each N; a target leaves at its first failing N, then its
        knee is bisected (--refine); `keep_s` of the budget is left for later stages.
        The capacity per target; a target that never failed (the sweep or the budget
        ran out) is listed in `self.unbounded`."""
        alive = {s.target.name for s in servers}
        passed: dict[str, int] = {s.target.name: 0 for s in servers}
        failed: dict[str, int] = {}
        print(HEADER, flush=True)
        for n in [n for n in self.args.sweep if n <= self.args.max_n]:
            for server in servers:
                name = server.target.name
                if name not in alive or self.out_of_time(keep_s):
                    continue
                p = await self.point(server, n, chunk_ms)
                if p.passed:
                    passed[name] = n
                else:
                    failed[name] = n
                    alive.discard(name)
            if not alive:
                break
        for server in servers:
            name = server.target.name
            if name not in failed:
                continue
            for _ in range(self.args.refine):
                lo, hi = passed[name], failed[name]
                if self.out_of_time(keep_s) or settled(lo, hi):
                    break
                mid = (lo + hi) // 2
                p = await self.point(server, mid, chunk_ms)
                if p.passed:
                    passed[name] = mid
                else:
                    failed[name] = mid
        self.unbounded += sorted(set(passed) - set(failed))
        return passed

    async def search(
        self, server: Server, chunk_ms: int, start: int, points: int, keep_s: float = 0.0
    ) -> int:
        """Capacity from `start` (see next_n), `points` runs at most, stopping while
        `keep_s` of the budget is left."""
        n, best, worst = start, 0, None
        for _ in range(points):
            if self.out_of_time(keep_s) or n < 1 or n > self.args.max_n:
                break
            p = await self.point(server, n, chunk_ms)
            if p.passed:
                best = max(best, n)
            else:
                worst = n if worst is None else min(worst, n)
            n = next_n(n, p.passed, best, worst)
            if worst is not None and settled(best, worst):
                break
        if worst is None:  # never failed: a lower bound
            name = server.target.name
            self.unbounded.append(name if chunk_ms == 20 else f"{name} at {chunk_ms} ms")
        return best
