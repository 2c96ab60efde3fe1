"""The curve sweep's figures per voice set: espeak-ng and the recorded voices' parts.

bench/turns/sweep.py replays every curve over the espeak sets and, when asked, the
recorded ones (bench/turns/real_sets.py); this module groups what a curve did by voice
set ("espeak", "real-dev", "real-held"), adds eot-bench's figures per group
(bench/turns/eot_metrics.py, on the same silences `make eval-turns` scores) and says
which of the recorded-voice targets of issue 27 a curve meets on a part: false
cut-offs at a 300 ms action delay in at most 15% of the hesitation pauses, complete
turns committed at p50 <= 350 ms and p90 <= 1.2 s.
"""

from __future__ import annotations

from typing import Any

from bench.turns import eot_metrics
from bench.turns.replay import Replayable
from bench.turns.report import eot_group
from bench.turns.score import Turn
from bench.turns.stream import CHUNK_MS

GROUPS = ("espeak", "real-dev", "real-held")
TUNED_ON = "real-dev"  # the part curves are chosen on; "real-held" checks them

MAX_HOLD_CUT_OFFS = 0.15  # of the hesitation pauses, at a 300 ms action delay
MAX_P50_MS = 350.0
MAX_P90_MS = 1200.0


def set_name(group: str, kind: str) -> str:
    """The set holding `kind` ("complete", "hesitation", "snr10") turns of `group`."""
    return kind if group == "espeak" else f"real-{kind}-{group.removeprefix('real-')}"


def silences(r: Replayable, turns: list[Turn], trail_ms: int) -> list[eot_metrics.Silence]:
    """The holds and the eot of a replayed item, each with when the turn was committed
    in it (the clock `outcome` scores on: an append is sent as its last sample is in)."""
    sent_t = [(k + 1) * CHUNK_MS / 1000 for k in range(r.chunks_for(trail_ms))]
    return eot_metrics.silences(r.spans, trail_ms, turns, sent_t, CHUNK_MS)


def eot_by_group(found: dict[str, list[eot_metrics.Silence]]) -> dict[str, dict[str, Any]]:
    return {g: eot_metrics.summarize(s) for g, s in found.items()}


def group_of(r: Replayable) -> str | None:
    return eot_group(r.item.set)


def hold_cut_offs(eot: dict[str, dict[str, Any]], group: str) -> float | None:
    """The share of `group`'s hesitation pauses cut off at a 300 ms action delay."""
    rate = eot.get(group, {}).get("cutoff_at_action_delay", {}).get("300ms")
    return None if rate is None else float(rate)


def committed(sets: dict[str, dict[str, Any]], group: str, pct: str) -> float | None:
    latency = sets.get(set_name(group, "complete"), {}).get("latency_ms", {})
    value = latency.get("committed", {}).get(pct)
    return None if value is None else float(value)


def voice_targets(
    sets: dict[str, dict[str, Any]], eot: dict[str, dict[str, Any]], group: str
) -> dict[str, bool]:
    """Which recorded-voice targets a curve meets on `group` (a figure it lacks fails)."""
    cut = hold_cut_offs(eot, group)
    p50, p90 = committed(sets, group, "p50"), committed(sets, group, "p90")
    return {
        "hold_cut_offs": cut is not None and cut <= MAX_HOLD_CUT_OFFS,
        "p50": p50 is not None and p50 <= MAX_P50_MS,
        "p90": p90 is not None and p90 <= MAX_P90_MS,
    }


def shortfall(sets: dict[str, dict[str, Any]], eot: dict[str, dict[str, Any]]) -> float:
    """How far a curve is from the targets on the tuning part (0: met), each figure
    as a fraction of its limit beyond it; 0 when the sweep has no recorded voices."""
    if TUNED_ON not in eot:
        return 0.0
    cut = hold_cut_offs(eot, TUNED_ON)
    p50, p90 = committed(sets, TUNED_ON, "p50"), committed(sets, TUNED_ON, "p90")
    over = [
        1.0 if v is None else max(v / limit - 1, 0.0)
        for v, limit in ((cut, MAX_HOLD_CUT_OFFS), (p50, MAX_P50_MS), (p90, MAX_P90_MS))
    ]
    return round(sum(over), 3)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def cells(sets: dict[str, dict[str, Any]], eot: dict[str, dict[str, Any]], group: str) -> str:
    """hesitation items cut / pauses cut @300 ms delay / @300 ms budget / complete
    p50/p90 / noisy missed/extra, for one group."""
    hes = sets.get(set_name(group, "hesitation"), {})
    noisy = sets.get(set_name(group, "snr10"), {})
    budget = eot.get(group, {}).get("cutoff_at_latency", {}).get("300ms")
    return (
        f"{hes.get('cut_offs', '-')}/{hes.get('items', '-')}"
        f" {_pct(hold_cut_offs(eot, group))} {_pct(budget)}"
        f" {_ms(committed(sets, group, 'p50'))}/{_ms(committed(sets, group, 'p90'))}"
        f" {noisy.get('missed', '-')}/{noisy.get('extra_turns', '-')}"
    )


def header(groups: list[str]) -> list[str]:
    return [
        "per voice set: hesitations cut, pauses cut @300 ms action delay,"
        " @300 ms dead-air budget, complete committed p50/p90 ms, 10 dB missed/extra",
        "curve | " + " | ".join(groups),
    ]


def line(
    name: str, sets: dict[str, dict[str, Any]], eot: dict[str, dict[str, Any]], groups: list[str]
) -> str:
    met = [g for g in groups if g != "espeak" and all(voice_targets(sets, eot, g).values())]
    tail = f" | targets met on {', '.join(met)}" if met else ""
    return f"{name} | " + " | ".join(cells(sets, eot, g) for g in groups) + tail
