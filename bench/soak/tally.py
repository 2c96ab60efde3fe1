"""What every soak client records, in one place the report reads."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# Latencies kept per kind: enough for stable percentiles over a 10-minute run
# (50 sessions make a few thousand turns), bounded however long the soak runs.
MAX_SAMPLES = 100_000


@dataclass
class Tally:
    errors: Counter[str] = field(default_factory=Counter)  # error events by code
    error_examples: dict[str, str] = field(default_factory=dict)  # code -> first message
    closes: Counter[str] = field(default_factory=Counter)  # close codes; "abort": ours
    actions: Counter[str] = field(default_factory=Counter)  # actions run, by name
    timeouts: Counter[str] = field(default_factory=Counter)  # actions that saw no answer
    timeout_examples: dict[str, list[str]] = field(default_factory=dict)  # the events before
    statuses: Counter[str] = field(default_factory=Counter)  # response.done statuses
    barge_ins: Counter[str] = field(default_factory=Counter)  # "cancelled" / "finished first"
    # Drops of resumable sessions: "resumed", "abandoned" (never taken back: the
    # session waits out its window), or the refusal's code
    resumes: Counter[str] = field(default_factory=Counter)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    connections: int = 0
    connect_failures: int = 0
    connect_failure_example: str = ""

    def error(self, code: str, message: str) -> None:
        self.errors[code] += 1
        self.error_examples.setdefault(code, message[:200])

    def timeout(self, name: str, recent: list[str]) -> None:
        self.timeouts[name] += 1
        self.timeout_examples.setdefault(name, recent)

    def latency(self, kind: str, ms: float) -> None:
        values = self.latency_ms.setdefault(kind, [])
        if len(values) < MAX_SAMPLES:
            values.append(ms)
