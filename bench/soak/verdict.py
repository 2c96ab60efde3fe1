"""Whether the server's memory stays flat: pure functions over RSS samples."""

from __future__ import annotations

from dataclasses import dataclass

# Allocator noise over minutes is a few MB either way; a leak of one turn's audio per
# session turn (~0.1 MB) at 50 sessions is tens of MB a minute.
TOLERANCE_MB_PER_MIN = 1.0
MIN_SAMPLES = 3  # a slope needs at least this many samples after the warm-up


@dataclass(frozen=True)
class RssSample:
    t_s: float  # since the soak began
    rss_mb: float  # the server's processes together
    sessions: int | None = None  # open sessions the server reported, when it could


@dataclass(frozen=True)
class Verdict:
    flat: bool | None  # None: too few samples after the warm-up to tell
    slope_mb_per_min: float | None  # least-squares fit over the samples after warm-up
    growth_mb: float | None  # the fit's rise across those samples
    tolerance_mb_per_min: float
    warmup_s: float
    samples_used: int

    def line(self) -> str:
        if self.flat is None or self.slope_mb_per_min is None or self.growth_mb is None:
            return (
                f"VERDICT: unknown: {self.samples_used} RSS samples after the "
                f"{self.warmup_s:.0f} s warm-up (need {MIN_SAMPLES})"
            )
        word = "FLAT" if self.flat else "GROWING"
        return (
            f"VERDICT: RSS {word}: {self.slope_mb_per_min:+.2f} MB/min after the "
            f"{self.warmup_s:.0f} s warm-up ({self.growth_mb:+.1f} MB over "
            f"{self.samples_used} samples; tolerance {self.tolerance_mb_per_min:.2f} MB/min)"
        )


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute."""
    n = len(points)
    if n < 2:
        raise ValueError("a slope needs two points")
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        raise ValueError("the points share one time")
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return 60.0 * cov / var


def verdict(
    samples: list[RssSample],
    duration_s: float,
    tolerance_mb_per_min: float = TOLERANCE_MB_PER_MIN,
) -> Verdict:
    """The first half of the run is warm-up (sessions ramp up, caches and pools fill);
    the RSS slope over the second half is the growth. Flat when the slope is at most
    the tolerance (shrinking is flat too)."""
    warmup_s = duration_s / 2
    after = [(s.t_s, s.rss_mb) for s in samples if s.t_s >= warmup_s]
    if len(after) < MIN_SAMPLES or after[-1][0] == after[0][0]:
        return Verdict(None, None, None, tolerance_mb_per_min, warmup_s, len(after))
    slope = slope_per_min(after)
    growth = slope * (after[-1][0] - after[0][0]) / 60.0
    return Verdict(
        slope <= tolerance_mb_per_min, slope, growth, tolerance_mb_per_min, warmup_s, len(after)
    )
