"""The report: per mode and set, as JSON and as a table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.turns import consecutive
from bench.turns.corpus import SETS, Item
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
    by_set = {
        s: [r.outcome for r in result.items if r.item.set == s and r.outcome is not None]
        for s in SETS
    }
    out["sets"] = {s: summarize(outcomes) for s, outcomes in by_set.items() if outcomes}
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
    return "\n".join(lines + consecutive.table_lines(report))


def write(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
