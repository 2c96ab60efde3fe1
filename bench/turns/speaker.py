"""The client's loudspeaker, for echo: what it plays on the stream's clock (seconds
since the stream began). Each audio delta plays when it arrives, or as soon as what
arrived before it has played; a cancelled response stops it."""

from __future__ import annotations

import numpy as np

from bench.turns.noise import Pcm16
from models.base import PCM_RATE


class Speaker:
    def __init__(self, rate: int = PCM_RATE) -> None:
        self.rate = rate
        self._played = np.zeros(0, np.int16)  # sample i plays at i / rate
        self._end = 0  # where the next delta may start at the earliest

    def play(self, pcm: Pcm16, arrived_s: float) -> None:
        start = max(round(arrived_s * self.rate), self._end)
        end = start + len(pcm)
        if end > len(self._played):
            grown = np.zeros(max(end, 2 * len(self._played)), np.int16)
            grown[: len(self._played)] = self._played
            self._played = grown
        self._played[start:end] = pcm
        self._end = end

    def stop(self, at_s: float) -> None:
        """Nothing more plays from `at_s` on (what was queued is dropped)."""
        at = max(0, round(at_s * self.rate))
        self._played[at:] = 0
        self._end = min(self._end, at)

    def heard(self, start: int, n: int) -> Pcm16:
        """Samples [start, start + n) of what played (silence before and after)."""
        out = np.zeros(n, np.int16)
        a, b = max(start, 0), min(start + n, len(self._played))
        if b > a:
            out[a - start : b - start] = self._played[a:b]
        return out


def echo_of(played: Pcm16, db: float) -> Pcm16:
    out: Pcm16 = np.clip(np.rint(played * 10 ** (db / 20)), -32768, 32767).astype(np.int16)
    return out
