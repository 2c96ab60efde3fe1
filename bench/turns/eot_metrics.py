"""eot-bench style figures over what the harness records: pure functions.

LiveKit's eot-bench scores each silence of a user turn: every pause inside the turn is
a "hold" (the agent should listen through it), the silence after the last word is the
"eot". A policy acts in a silence at the first moment the detector has fired and at
least `action_delay` of silence has passed, or at `timeout` whatever the detector says.
Acting in a hold is a false cut-off; the time it acts in the eot silence is the dead
air. Sweeping the policy gives the operating points eot-bench reports: the lowest
false cut-off rate whose mean dead air fits a 300 / 600 ms budget, and the lowest mean
dead air whose false cut-off rate fits a 5 / 10 % budget. Holds shorter than 200 ms or
longer than 5 s are left out, as eot-bench does.

Here the detector is a whole turn-detection mode seen from the client: it "fires" in a
silence when the server commits the turn, `fired_s` after the last word before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.turns.score import Span, Turn

HOLD_S = (0.2, 5.0)
ACTION_DELAYS_S = [i / 20 for i in range(0, 61)]  # 0 to 3 s by 50 ms
TIMEOUTS_S = [math.inf] + [i / 10 for i in range(3, 81)]  # none, or 0.3 to 8 s
LATENCY_BUDGETS_S = (0.3, 0.6)
CUTOFF_BUDGETS = (0.05, 0.10)


@dataclass(frozen=True)
class Silence:
    eot: bool  # the silence after the last word (else a pause inside the turn)
    duration_s: float  # a hold's length; the observed window for the eot
    fired_s: float | None  # when the detector fired, from the silence's start; None: not in it


def silences(
    spans: list[Span], trail_ms: int, turns: list[Turn], sent_t: list[float], chunk_ms: int
) -> list[Silence]:
    """The holds between `spans` and the eot after them, with when the server committed
    a turn in each (a commit's arrival against when the last chunk of speech before the
    silence went out: the clock `Truth.end_sent_t` uses)."""
    commits = sorted(t.committed_t for t in turns if t.committed_t is not None)
    out = []
    for i, (_, end) in enumerate(spans):
        eot = i == len(spans) - 1
        length_ms = trail_ms if eot else spans[i + 1][0] - end
        t0 = sent_t[min(len(sent_t) - 1, max(0, (end - 1) // chunk_ms))]
        fired = next((c - t0 for c in commits if c >= t0), None)
        if fired is not None and not eot and fired * 1000 >= length_ms:
            fired = None  # the commit came after the pause: not in it
        out.append(Silence(eot, length_ms / 1000, fired))
    return out


def acts_at(fired_s: float | None, action_delay_s: float, timeout_s: float) -> float:
    """When the policy acts in a silence (inf: never)."""
    t = math.inf if fired_s is None else max(fired_s, action_delay_s)
    return min(t, timeout_s)


def operating_point(
    all_silences: list[Silence], action_delay_s: float, timeout_s: float
) -> tuple[float, float] | None:
    """(false cut-off rate over holds, mean dead air over eots in s) of one policy;
    None without holds or eots."""
    holds = [s for s in all_silences if not s.eot and HOLD_S[0] <= s.duration_s <= HOLD_S[1]]
    eots = [s for s in all_silences if s.eot]
    if not holds or not eots:
        return None
    cut = sum(acts_at(s.fired_s, action_delay_s, timeout_s) < s.duration_s for s in holds)
    dead = [acts_at(s.fired_s, action_delay_s, timeout_s) for s in eots]
    # An eot the detector never fired in, with no timeout, is dead air for good.
    never = any(math.isinf(d) for d in dead)
    return cut / len(holds), (math.inf if never else sum(dead) / len(dead))


def sweep(all_silences: list[Silence]) -> list[tuple[float, float]]:
    points = (operating_point(all_silences, a, t) for a in ACTION_DELAYS_S for t in TIMEOUTS_S)
    return [p for p in points if p is not None]


def cutoff_at_latency(points: list[tuple[float, float]], budget_s: float) -> float | None:
    """The lowest false cut-off rate whose mean dead air is within `budget_s`."""
    fit = [cut for cut, dead in points if dead <= budget_s]
    return min(fit) if fit else None


def latency_at_cutoff(points: list[tuple[float, float]], budget: float) -> float | None:
    """The lowest mean dead air (s) whose false cut-off rate is within `budget`."""
    fit = [dead for cut, dead in points if cut <= budget and math.isfinite(dead)]
    return min(fit) if fit else None


def summarize(all_silences: list[Silence]) -> dict[str, object]:
    points = sweep(all_silences)
    holds = [s for s in all_silences if not s.eot and HOLD_S[0] <= s.duration_s <= HOLD_S[1]]
    # Also the plain reading of "at a 300 ms action delay": that delay, no timeout.
    at_delay = {
        f"{a * 1000:.0f}ms": operating_point(all_silences, a, math.inf) for a in LATENCY_BUDGETS_S
    }
    return {
        "holds": len(holds),
        "cutoff_at_action_delay": {k: None if p is None else p[0] for k, p in at_delay.items()},
        "eots": sum(s.eot for s in all_silences),
        "cutoff_at_latency": {
            f"{b * 1000:.0f}ms": cutoff_at_latency(points, b) for b in LATENCY_BUDGETS_S
        },
        "latency_ms_at_cutoff": {
            f"{b * 100:.0f}%": (
                None if (v := latency_at_cutoff(points, b)) is None else round(v * 1000)
            )
            for b in CUTOFF_BUDGETS
        },
    }
