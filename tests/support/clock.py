"""A wall clock the test moves by hand (the echo guard's far end reads one)."""

from __future__ import annotations


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t
