"""The table printed as the points run: one row per point."""

from __future__ import annotations

from bench.load.points import Point


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


HEADER = (
    "target | N | chunk ms | (a) stop p50/p95/p99 | (a) in server p99 | (b) delta p50/p99"
    " | ack p50/p99 | score p50/p99 | loop lag p99 | full GCs: n, max ms | slip p99/max"
    " | CPU % | CPU µs/msg | RSS MB"
    " | others % | steal % | pass"
)


def row(p: Point) -> str:
    return " | ".join(
        [
            p.target,
            str(p.n),
            str(p.chunk_ms),
            "/".join(fmt(p.stop_ms[q]) for q in ("p50", "p95", "p99")),
            fmt(p.stop_server_ms["p99"], 1),
            "/".join(fmt(p.delta_ms[q], 1) for q in ("p50", "p99")),
            "/".join(fmt(p.ack_ms[q], 1) for q in ("p50", "p99")),
            "/".join(fmt(p.score_ms[q]) for q in ("p50", "p99")),
            fmt(p.loop_lag_ms["p99"], 1),
            f"{p.gc_ms['n']}, {fmt(p.gc_ms['max'], 1)}",
            f"{fmt(p.slip_ms['p99'], 1)}/{fmt(p.slip_ms['max'], 1)}",
            fmt(p.server_cpu_pct),
            fmt(p.cpu_us_per_msg),
            fmt(p.server_rss_mb),
            fmt(p.other_cpu_pct),
            fmt(p.steal_pct),
            "yes" if p.passed else f"NO ({p.why})",
        ]
    )
