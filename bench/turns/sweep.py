"""semantic_vad's end-of-turn curve, swept offline: cut-offs against latency.

Run from the repository root:  .venv/bin/python -m bench.turns.sweep

Every item of `make eval-turns`' set is replayed (bench/turns/replay.py) through
Silero and the engine's `SemanticTurnDetector` once per `TurnCurve` of a grid, with
Smart Turn's probabilities computed on the audio the session would score and delivered
`--score-delay-ms` of audio later; server_vad (Silero, default parameters) is replayed
as the reference. Outcomes are scored as the live evaluation scores them. Probabilities
are cached by the audio scored (also on disk, in the set's cache dir), so a grid costs
one model call per distinct candidate instant. Prints the Pareto front (hesitation
cut-offs against complete questions' committed p50) per eagerness and the curve that
best meets the targets of docs/turn-taking.md; writes JSON to
bench/results/turn_curve.json (or --out). With recorded-voice sets among --sets (the
default: bench/turns/real_sets.py, fetched once into the temp dir) it also prints, per
curve on the front and the shipped ones, the figures per voice set, eot-bench's among
them (bench/turns/sweep_voices.py), and the recommendation weighs the recorded
voices' targets on their development part.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench.turns import sweep_voices
from bench.turns.corpus import CACHE_DIR, SETS, Corpus, make_corpus
from bench.turns.noise import Pcm16
from bench.turns.real_sets import REAL_SETS, make_real_corpus
from bench.turns.recorded import FetchFailed
from bench.turns.replay import (
    DELIVERY_MS,
    Model,
    Replayable,
    ScoreCache,
    outcome,
    prepare,
    replay,
)
from bench.turns.run import LEAD_MS, SEMANTIC_MARGIN_MS, SEMANTIC_MAX_WAIT_MS, SERVER_VAD_TRAIL_MS
from bench.turns.score import summarize
from bench.turns.stream import CHUNK_MS
from bench.turns.synth import EspeakMissing
from engine.semantic_turns import (
    Eagerness,
    SemanticTurnDetector,
    SemanticVadParams,
    TurnCurve,
    curve_for,
)
from engine.turns import ServerVadParams, TurnDetector
from models.listening.vad import SileroOnnxBackend

ROOT = Path(__file__).resolve().parents[2]
SCORE_CACHE = CACHE_DIR / "smart-turn-v3.2-scores.json"

CANDIDATE_PAUSE_MS = (120, 160, 200)
CONFIDENT_PROBABILITY = (0.3, 0.5, 0.7, 0.9)
CONFIDENT_SILENCE_MS = (150, 200, 250, 300)
RESCORE_MS: tuple[int | None, ...] = (None, 200, 400)
UNSURE_WAIT_MS: tuple[int | None, ...] = (None, 1000)  # None: the eagerness' maximum wait

# The targets at eagerness auto (docs/turn-taking.md).
MAX_CUT_OFFS = 2
MAX_COMPLETE_P50_MS = 400.0
NOISY_SETS = ("snr10", "snr5")


def curve_of(
    candidate_pause_ms: int,
    confident_probability: float,
    silence_ms: int,
    rescore_ms: int | None,
    unsure_wait_ms: int | None = None,
) -> TurnCurve:
    return TurnCurve(
        candidate_pause_ms, confident_probability, silence_ms, rescore_ms, unsure_wait_ms
    )


def grid(
    candidates: Sequence[int] = CANDIDATE_PAUSE_MS,
    probabilities: Sequence[float] = CONFIDENT_PROBABILITY,
    silences: Sequence[int] = CONFIDENT_SILENCE_MS,
    rescores: Sequence[int | None] = RESCORE_MS,
    unsure_waits: Sequence[int | None] = UNSURE_WAIT_MS,
) -> list[TurnCurve]:
    return [
        curve_of(*point)
        for point in itertools.product(candidates, probabilities, silences, rescores, unsure_waits)
    ]


def label(curve: TurnCurve) -> str:
    """ "200/0.5/250/-": candidate pause, confident probability, confident silence,
    rescore (- for once); "/w1200" after it when the unsure wait is capped."""
    silence = curve.confident_silence_ms
    rescore = "-" if curve.rescore_ms is None else str(curve.rescore_ms)
    wait = "" if curve.unsure_wait_ms is None else f"/w{curve.unsure_wait_ms}"
    return f"{curve.candidate_pause_ms}/{curve.confident_probability:g}/{silence}/{rescore}{wait}"


@dataclass(frozen=True)
class Row:
    """One configuration's figures over the set."""

    name: str  # "server_vad/silero" or "semantic_vad/auto 200/0.5/250/-"
    eagerness: str | None
    curve: TurnCurve | None
    sets: dict[str, dict[str, Any]]  # set -> bench/turns/score.py `summarize`
    eot: dict[str, dict[str, Any]] = field(default_factory=dict)  # voice set -> eot_metrics

    def count(self, set_name: str, key: str) -> int:
        figure = self.sets.get(set_name, {}).get(key, 0)
        return int(figure)

    def committed(self, set_name: str, pct: str) -> float | None:
        latency = self.sets.get(set_name, {}).get("latency_ms", {}).get("committed", {})
        value = latency.get(pct)
        return None if value is None else float(value)

    @property
    def cut_offs(self) -> int:
        return self.count("hesitation", "cut_offs")

    @property
    def p50(self) -> float:
        """Complete questions' committed p50 (infinite when none was clean)."""
        value = self.committed("complete", "p50")
        return float("inf") if value is None else value


def targets(row: Row, reference: Row) -> dict[str, bool]:
    """Which targets `row` meets; the noisy ones against server_vad's row."""
    noisy = all(
        row.count(s, k) <= reference.count(s, k)
        for s in NOISY_SETS
        if s in row.sets
        for k in ("missed", "extra_turns")
    )
    met = {
        "cut_offs": row.cut_offs <= MAX_CUT_OFFS,
        "latency": row.p50 <= MAX_COMPLETE_P50_MS,
        "noisy": noisy,
    }
    if sweep_voices.TUNED_ON in row.eot:  # recorded voices swept: their targets too
        met["real"] = sweep_voices.shortfall(row.sets, row.eot) == 0
    return met


def preference(row: Row, reference: Row) -> tuple[Any, ...]:
    """Sort key, best first: every target met; else the fewest cut-offs beyond
    `MAX_CUT_OFFS`, then the nearest to the recorded voices' targets on their
    development part, then the noisy sets no worse than server_vad, then the lowest
    complete p50. Ties go to the lower p90, then to fewer model calls (no rescoring,
    a longer candidate pause)."""
    met = targets(row, reference)
    p90 = row.committed("complete", "p90")
    curve = row.curve or curve_for("auto")
    return (
        not all(met.values()),
        max(row.cut_offs - MAX_CUT_OFFS, 0),
        sweep_voices.shortfall(row.sets, row.eot),
        not met["noisy"],
        row.p50,
        row.cut_offs,
        float("inf") if p90 is None else p90,
        curve.rescore_ms is not None,
        -curve.candidate_pause_ms,
    )


def pareto(rows: list[Row], reference: Row) -> list[Row]:
    """The rows no other row beats on both hesitation cut-offs and complete p50, one
    per point (the preferred of equals), by cut-offs."""
    best: dict[tuple[int, float], Row] = {}
    for row in sorted(rows, key=lambda r: preference(r, reference)):
        best.setdefault((row.cut_offs, row.p50), row)
    front = [
        row
        for (cuts, p50), row in best.items()
        if not any(c <= cuts and p <= p50 and (c, p) != (cuts, p50) for c, p in best)
    ]
    return sorted(front, key=lambda r: (r.cut_offs, r.p50))


def measure(
    name: str,
    eagerness: str | None,
    curve: TurnCurve | None,
    items: list[Replayable],
    new_detector: Callable[[], TurnDetector],
    trail_ms: int,
    scores: ScoreCache | None,
    score_delay_ms: int,
    delivery_ms: int,
) -> Row:
    by_set: dict[str, list[Any]] = {}
    by_group: dict[str, list[Any]] = {}
    for r in items:
        turns = replay(r, new_detector(), trail_ms, scores, score_delay_ms, delivery_ms)
        by_set.setdefault(r.item.set, []).append(outcome(r, turns, trail_ms))
        if (group := sweep_voices.group_of(r)) is not None:
            by_group.setdefault(group, []).extend(sweep_voices.silences(r, turns, trail_ms))
    sets = {s: summarize(o) for s, o in by_set.items()}
    return Row(name, eagerness, curve, sets, sweep_voices.eot_by_group(by_group))


def sweep(
    items: list[Replayable],
    curves: list[TurnCurve],
    eagernesses: list[Eagerness],
    scores: ScoreCache,
    score_delay_ms: int = 100,
    delivery_ms: int = DELIVERY_MS,
) -> tuple[Row, list[Row]]:
    """server_vad's row, and one row per eagerness and curve."""
    reference = measure(
        "server_vad/silero",
        None,
        None,
        items,
        lambda: TurnDetector(ServerVadParams()),
        SERVER_VAD_TRAIL_MS,
        None,
        score_delay_ms,
        delivery_ms,
    )
    rows = []
    for eagerness in eagernesses:
        params = SemanticVadParams(eagerness=eagerness)
        trail_ms = SEMANTIC_MAX_WAIT_MS[eagerness] + SEMANTIC_MARGIN_MS
        for curve in curves:
            new_detector = partial(SemanticTurnDetector, params, scoring=True, curve=curve)
            name = f"semantic_vad/{eagerness} {label(curve)}"
            rows.append(
                measure(
                    name,
                    eagerness,
                    curve,
                    items,
                    new_detector,
                    trail_ms,
                    scores,
                    score_delay_ms,
                    delivery_ms,
                )
            )
    return reference, rows


def smart_turn() -> Model | None:
    """Smart Turn v3.2 as a plain function (it is async for the server's loop)."""
    from models.listening.smart_turn import load_smart_turn

    model = load_smart_turn()
    if model is None:
        return None
    loop = asyncio.new_event_loop()
    return lambda pcm: loop.run_until_complete(model.probability(pcm))


# --- the report ---------------------------------------------------------------------------


def row_json(row: Row, reference: Row) -> dict[str, Any]:
    out: dict[str, Any] = {"name": row.name, "eagerness": row.eagerness}
    if row.curve is not None:
        out["curve"] = asdict(row.curve)
        out["targets"] = targets(row, reference)
    return out | {"sets": row.sets, "eot_bench": row.eot}


def _ms(value: float | None) -> str:
    return "-" if value is None or value == float("inf") else f"{value:.0f}"


def table_line(row: Row, reference: Row) -> str:
    noisy = " | ".join(
        f"{row.count(s, 'missed')}/{row.count(s, 'extra_turns')}" for s in NOISY_SETS
    )
    complete = f"{_ms(row.committed('complete', 'p50'))}/{_ms(row.committed('complete', 'p90'))}"
    met = "" if row.curve is None else ", ".join(k for k, v in targets(row, reference).items() if v)
    return (
        f"{row.name} | {row.cut_offs} | {row.count('complete', 'cut_offs')} | {complete}"
        f" | {noisy} | {met or '-'}"
    )


def table(reference: Row, fronts: dict[str, list[Row]], chosen: Row, defaults: list[Row]) -> str:
    lines = [
        "committed at client after the true end of speech, ms; missed/extra on the noisy sets",
        "mode curve (candidate/p_confident/silence/rescore) | hesitation cut-offs"
        " | complete cut-offs | complete p50/p90 | snr10 missed/extra | snr5 missed/extra"
        " | targets met",
        table_line(reference, reference),
        *(table_line(d, reference) + "  (the shipped curve)" for d in defaults),
    ]
    for eagerness, front in fronts.items():
        lines.append(f"Pareto front, {eagerness}:")
        lines += [table_line(row, reference) for row in front]
    lines.append("recommended: " + table_line(chosen, reference))
    groups = [g for g in sweep_voices.GROUPS if g in reference.eot]
    if any(g != "espeak" for g in groups):
        shown = [reference, *defaults, *(r for f in fronts.values() for r in f), chosen]
        named = {r.name: r for r in shown}  # each once
        lines += sweep_voices.header(groups)
        lines += [sweep_voices.line(r.name, r.sets, r.eot, groups) for r in named.values()]
    return "\n".join(lines)


def ms_or_none(value: str) -> int | None:
    return None if value.lower() == "none" else int(value)


def parser() -> argparse.ArgumentParser:
    assert __doc__
    p = argparse.ArgumentParser(
        prog="python -m bench.turns.sweep", description=__doc__.split("\n")[0]
    )
    p.add_argument("--seed", type=int, default=15)
    p.add_argument(
        "--sets",
        nargs="+",
        choices=SETS + REAL_SETS,
        default=SETS + REAL_SETS,
        help="the recorded voices' sets are fetched the first time (bench/turns/recorded.py)",
    )
    p.add_argument("--limit", type=int, help="at most this many items per set")
    p.add_argument(
        "--eagerness",
        nargs="+",
        choices=["auto", "low", "medium", "high"],
        default=["auto"],
        help="eagerness values to sweep (the targets are for auto)",
    )
    p.add_argument("--score-delay-ms", type=int, default=100, help="Smart Turn's latency")
    p.add_argument(
        "--delivery-ms",
        type=int,
        default=DELIVERY_MS,
        help="from the append that ends a turn to the event at the client",
    )
    p.add_argument("--candidate-pause-ms", type=int, nargs="+", default=CANDIDATE_PAUSE_MS)
    p.add_argument("--confident-probability", type=float, nargs="+", default=CONFIDENT_PROBABILITY)
    p.add_argument("--confident-silence-ms", type=int, nargs="+", default=CONFIDENT_SILENCE_MS)
    p.add_argument(
        "--rescore-ms", type=ms_or_none, nargs="+", default=RESCORE_MS, help="'none': once"
    )
    p.add_argument(
        "--unsure-wait-ms",
        type=ms_or_none,
        nargs="+",
        default=UNSURE_WAIT_MS,
        help="the longest wait an unsure score sets; 'none' for the eagerness' maximum",
    )
    p.add_argument("--no-cache", action="store_true", help="do not keep scores on disk")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "turn_curve.json")
    return p


def main(
    argv: list[str] | None = None,
    model: Model | None = None,
    real_corpus: Callable[[int, list[Pcm16]], Corpus] = make_real_corpus,
) -> int:
    """The sweep; `model` replaces Smart Turn and `real_corpus` the recorded voices'
    sets (tests)."""
    args = parser().parse_args(argv)
    try:
        corpus = make_corpus(args.seed)
        if set(args.sets) & set(REAL_SETS):
            real = real_corpus(args.seed, corpus.babble)
            corpus = Corpus(corpus.seed, corpus.items + real.items, corpus.babble)
    except (EspeakMissing, FetchFailed) as missing:
        print(missing, file=sys.stderr)
        return 2
    model = model or smart_turn()
    if model is None:
        print("Smart Turn is not available (see the warning above)", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    chosen_items = [
        it for s in args.sets for it in [i for i in corpus.items if i.set == s][: args.limit]
    ]
    trail_ms = max(
        SERVER_VAD_TRAIL_MS, *(SEMANTIC_MAX_WAIT_MS[e] + SEMANTIC_MARGIN_MS for e in args.eagerness)
    )
    backend = SileroOnnxBackend()
    items = [prepare(corpus, it, trail_ms, backend) for it in chosen_items]
    scores = ScoreCache(model, None if args.no_cache else SCORE_CACHE)
    curves = grid(
        args.candidate_pause_ms,
        args.confident_probability,
        args.confident_silence_ms,
        args.rescore_ms,
        args.unsure_wait_ms,
    )
    try:
        reference, rows = sweep(
            items, curves, args.eagerness, scores, args.score_delay_ms, args.delivery_ms
        )
        # The shipped curve of each eagerness swept, whether or not in the grid.
        defaults = [
            sweep(items, [curve_for(e)], [e], scores, args.score_delay_ms, args.delivery_ms)[1][0]
            for e in args.eagerness
        ]
    finally:
        scores.save()
    fronts = {e: pareto([r for r in rows if r.eagerness == e], reference) for e in args.eagerness}
    first = [r for r in rows if r.eagerness == args.eagerness[0]]
    chosen = min(first, key=lambda r: preference(r, reference))
    print(table(reference, fronts, chosen, defaults))
    report = {
        "seed": args.seed,
        "chunk_ms": CHUNK_MS,
        "lead_ms": LEAD_MS,
        "score_delay_ms": args.score_delay_ms,
        "delivery_ms": args.delivery_ms,
        "items": len(items),
        "model_calls": scores.calls,
        "run_s": round(time.monotonic() - t0, 1),
        "targets": {
            "hesitation_cut_offs_max": MAX_CUT_OFFS,
            "complete_committed_p50_max_ms": MAX_COMPLETE_P50_MS,
            "noisy": "missed and extra no more than server_vad/silero",
        },
        "reference": row_json(reference, reference),
        "defaults": [row_json(d, reference) for d in defaults],
        "recommended": row_json(chosen, reference),
        "front": {e: [r.name for r in front] for e, front in fronts.items()},
        "curves": [row_json(r, reference) for r in rows],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{report['run_s']:.0f} s, {scores.calls} model calls; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
