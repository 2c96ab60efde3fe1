"""The report: per mode and set, as JSON and as a table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.turns import consecutive, eot_metrics
from bench.turns.corpus import Item
from bench.turns.run import LEAD_MS, ModeResult
from bench.turns.score import summarize
from bench.turns.stream import CHUNK_MS

NOT_SUPPORTED = "not supported by this server"


def mode_report(result: ModeResult) -> dict[str, Any]:
    mode = result.mode
    out: dict[str, Any] = {
        "mode": mode.name,
        "vad_backend": mode.backend,
        "turn_detection": mode.turn_detection,
        "trail_ms": mode.trail_ms,
        "supported": result.refused is None,
    }
    if result.refused is not None:
        return out | {"note": f"{NOT_SUPPORTED} ({result.refused})", "sets": {}, "items": []}
    sets = dict.fromkeys(r.item.set for r in result.items)  # in the order streamed
    by_set = {
        s: [r.outcome for r in result.items if r.item.set == s and r.outcome is not None]
        for s in sets
    }
    out["sets"] = {s: summarize(outcomes) for s, outcomes in by_set.items() if outcomes}
    out["eot_bench"] = eot_bench(result)
    asked = {s: [r for r in result.items if r.item.set == s] for s in consecutive.SETS}
    out["questions"] = {
        s: consecutive.summarize(
            [consecutive.score_questions(r.streamed.turns, truth_spans(r.item)) for r in rs]
        )
        for s, rs in asked.items()
        if rs
    }
    out["errors"] = sorted({code for r in result.items for code in r.streamed.error_codes})
    out["items"] = [
        {
            "name": r.item.name,
            "voice": r.item.voice,
            "rate_wpm": r.item.rate_wpm,
            "truth_ms": [list(span) for span in truth_spans(r.item)],
            "detected": [
                [t.start_ms, t.end_ms, t.committed_t is not None] for t in r.streamed.turns
            ],
        }
        | ({} if r.outcome is None else r.outcome.__dict__)
        for r in result.items
    ]
    return out


def eot_group(set_name: str) -> str | None:
    """Which eot-bench row a set's items count in: the clean turns of each voice set
    ("espeak", "real-dev", "real-held"); noisy sets in none."""
    if "snr" in set_name or set_name in consecutive.SETS:
        return None
    return f"real-{set_name.rsplit('-', 1)[1]}" if set_name.startswith("real-") else "espeak"


def eot_bench(result: ModeResult) -> dict[str, Any]:
    groups: dict[str, list[eot_metrics.Silence]] = {}
    for r in result.items:
        group = eot_group(r.item.set)
        if group is None or not r.streamed.sent_t:
            continue
        spans = truth_spans(r.item)
        found = eot_metrics.silences(
            spans, result.mode.trail_ms, r.streamed.turns, r.streamed.sent_t, CHUNK_MS
        )
        groups.setdefault(group, []).extend(found)
    return {g: eot_metrics.summarize(found) for g, found in groups.items()}


def truth_spans(item: Item) -> list[tuple[int, int]]:
    """The item's speech on the stream's clock."""
    return [(a + LEAD_MS, b + LEAD_MS) for a, b in item.segments]


def build(
    results: list[ModeResult], seed: int, speed: float, concurrency: int, run_s: float
) -> dict[str, Any]:
    return {
        "seed": seed,
        "speed": speed,
        "concurrency": concurrency,
        "chunk_ms": CHUNK_MS,
        "lead_ms": LEAD_MS,
        "run_s": round(run_s, 1),
        "modes": [mode_report(r) for r in results],
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def table(report: dict[str, Any]) -> str:
    wall = "" if report["speed"] == 1 else f" (wall clock at {report['speed']}x)"
    lines = [
        "end of turn after the true end of speech, ms p50/p90: audio = audio_end_ms;"
        f" stopped, committed = arrival at the client{wall}",
        "mode | set | items | cut-offs | missed (never ended) | extra | audio p50/p90"
        " | stopped p50/p90 | committed p50/p90",
    ]
    for mode in report["modes"]:
        if not mode["supported"]:
            lines.append(f"{mode['mode']} | {mode['note']}")
            continue
        for name, s in mode["sets"].items():
            lat = s["latency_ms"]
            cells = [f"{_ms(lat[k]['p50'])}/{_ms(lat[k]['p90'])}" for k in lat]
            lines.append(
                f"{mode['mode']} | {name} | {s['items']} | {s['cut_offs']}"
                f" | {s['missed']} ({s['unended_turns']})"
                f" | {s['extra_turns']} | " + " | ".join(cells)
            )
    return "\n".join([*lines, *consecutive.table_lines(report), "", *eot_table(report)])


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def eot_table(report: dict[str, Any]) -> list[str]:
    """eot-bench's operating points per mode and voice set (bench/turns/eot_metrics.py)."""
    lines = [
        "eot-bench style (clean complete + hesitation turns): false cut-offs of mid-turn"
        " pauses at a mean dead-air budget; mean dead air (ms) at a false cut-off budget",
        "mode | voices | pauses | turn ends | cut-offs @300ms | @600ms | dead air @5% | @10%",
    ]
    for mode in report["modes"]:
        for group, e in mode.get("eot_bench", {}).items():
            cut, dead = e["cutoff_at_latency"], e["latency_ms_at_cutoff"]
            lines.append(
                f"{mode['mode']} | {group} | {e['holds']} | {e['eots']}"
                f" | {_pct(cut['300ms'])} | {_pct(cut['600ms'])}"
                f" | {_ms(dead['5%'])} | {_ms(dead['10%'])}"
            )
    return lines


def write(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
