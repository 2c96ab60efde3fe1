"""The run's plot: latency percentiles and server CPU per message against N."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.load.points import P99_LIMIT_MS, Point


def plot(points: list[Point], capacity: dict[str, int], path: Path, title: str) -> None:
    """Latency percentiles (p50 dotted, p99 solid) and server CPU per message against
    N, 20 ms chunks, from the run that decided each N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 6.5))
    series = [
        ("parley", "stop_ms", "Parley (a) speech_stopped", "tab:blue"),
        ("parley", "delta_ms", "Parley (b) first audio delta", "tab:cyan"),
        ("parley-webrtc", "stop_ms", "Parley with webrtcvad (a)", "tab:green"),
        ("parley-semantic", "stop_ms", "Parley, semantic_vad (a)", "tab:olive"),
        ("echo", "ack_ms", "floor echo: ack", "tab:gray"),
        ("vad", "ack_ms", "floor echo+resample+webrtcvad: ack", "tab:orange"),
        ("parley-1w", "stop_ms", "parley serve, 1 worker (a)", "tab:purple"),
        ("parley-2w", "stop_ms", "parley serve --workers 2 (a)", "tab:red"),
    ]
    for target, metric, label, color in series:
        pts = sorted(
            (
                p
                for p in points
                if p.target == target and p.chunk_ms == 20 and p.messages and p.decisive
            ),
            key=lambda p: p.n,
        )
        if not pts:
            continue
        ns = [p.n for p in pts]
        for q, style in (("p50", ":"), ("p99", "-")):
            ys = [getattr(p, metric)[q] for p in pts]
            values = [np.nan if y is None else max(y, 0.05) for y in ys]
            ax.plot(ns, values, style, color=color, marker="o", ms=3, label=f"{label} {q}")
        failed = [(p.n, getattr(p, metric)["p99"]) for p in pts if not p.passed]
        ax.plot(
            [n for n, y in failed if y is not None],
            [max(y, 0.05) for n, y in failed if y is not None],
            "x",
            color=color,
            ms=9,
            mew=2,
        )
        if metric != "delta_ms":
            busy = [p for p in pts if p.n >= 10]
            ax2.plot(
                [p.n for p in busy],
                [p.cpu_us_per_msg or np.nan for p in busy],
                "-o",
                color=color,
                ms=3,
                label=f"{target}: capacity {capacity.get(target, '?')}",
            )
    ax.axhline(P99_LIMIT_MS, color="red", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("concurrent sessions (20 ms chunks at real time)")
    ax.set_ylabel("ms (log scale)")
    ax.set_title(
        "latency p50 (dotted) and p99 (solid); x: the N failed; red: the 50 ms limit",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("concurrent sessions")
    ax2.set_ylabel("server CPU µs per append message")
    ax2.set_title("server CPU per message", fontsize=10)
    ax2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
