"""The distribution of a point's samples: count, percentiles and maximum."""

from __future__ import annotations

import numpy as np

Dist = dict[str, float | None]  # n, p50, p95, p99, max


def pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def dist(values: list[float]) -> Dist:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "p99": pct(values, 99),
        "max": max(values) if values else None,
    }
