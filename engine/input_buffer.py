"""The uncommitted input audio, addressed by absolute sample position.

Positions count samples since the session began (the clock `audio_start_ms` and
`audio_end_ms` are measured on), so a turn can be cut out of the middle of a large
append and the audio after it kept for the next turn.
"""

from __future__ import annotations

import numpy as np


class InputBuffer:
    def __init__(self, rate: int = 24_000) -> None:
        self.rate = rate
        self._chunks: list[np.ndarray] = []
        self.start = 0  # absolute position of the first kept sample
        self.end = 0  # absolute position after the last received sample

    def __len__(self) -> int:
        return self.end - self.start

    def ms_to_pos(self, ms: int) -> int:
        return ms * self.rate // 1000

    def pos_to_ms(self, pos: int) -> int:
        return pos * 1000 // self.rate

    def append(self, pcm: np.ndarray) -> None:
        if len(pcm):
            self._chunks.append(pcm)
            self.end += len(pcm)

    def _flat(self) -> np.ndarray:
        if len(self._chunks) != 1:
            self._chunks = [np.concatenate(self._chunks)] if self._chunks else []
        return self._chunks[0] if self._chunks else np.zeros(0, np.int16)

    def take(self, begin: int, end: int) -> np.ndarray:
        """Samples in [begin, end) (clamped to what is kept); drops all before `end`."""
        begin, end = max(begin, self.start), min(max(end, self.start), self.end)
        flat = self._flat()
        out = flat[max(0, begin - self.start) : end - self.start].copy()
        self.discard_before(end)
        return out

    def discard_before(self, pos: int) -> None:
        pos = min(max(pos, self.start), self.end)
        if pos == self.start:
            return
        flat = self._flat()
        rest = flat[pos - self.start :]
        self._chunks = [rest] if len(rest) else []
        self.start = pos

    def clear(self) -> None:
        self._chunks = []
        self.start = self.end
