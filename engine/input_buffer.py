"""The uncommitted input audio, addressed by absolute sample position.

Positions count samples since the session began (the clock `audio_start_ms` and
`audio_end_ms` are measured on), so a turn can be cut out of the middle of a large
append and the audio after it kept for the next turn.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from models.base import PCM_RATE


class InputBuffer:
    """Kept as the appended chunks themselves: an append and the idle trim that
    follows it (every 20 ms of a live microphone) touch no samples; only `take`
    copies, and only the span it returns."""

    def __init__(self, rate: int = PCM_RATE) -> None:
        self.rate = rate
        self._chunks: deque[np.ndarray] = deque()
        self._skip = 0  # samples of the first chunk that lie before `start`
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

    def take(self, begin: int, end: int) -> np.ndarray:
        """Samples in [begin, end) (clamped to what is kept); drops all before `end`."""
        begin, end = max(begin, self.start), min(max(end, self.start), self.end)
        if not self._chunks:
            return np.zeros(0, np.int16)
        # One concatenation of what is kept; what follows `end` stays as one chunk, a
        # copy, so the turn taken out is not pinned in memory by the audio after it.
        flat = np.concatenate(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
        base = self.start - self._skip  # absolute position of flat[0]
        out = flat[begin - base : end - base].copy()
        rest = flat[end - base :]
        self._chunks = deque([rest.copy()]) if len(rest) else deque()
        self._skip = 0
        self.start = end
        return out

    def copy(self, begin: int, end: int) -> np.ndarray:
        """A copy of the samples in [begin, end) (clamped to what is kept); the
        buffer is unchanged."""
        begin, end = max(begin, self.start), min(max(end, self.start), self.end)
        if not self._chunks or end <= begin:
            return np.zeros(0, np.int16)
        flat = np.concatenate(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
        base = self.start - self._skip
        return np.array(flat[begin - base : end - base], dtype=np.int16)

    def discard_before(self, pos: int) -> None:
        pos = min(max(pos, self.start), self.end)
        drop = pos - self.start
        self.start = pos
        while drop:
            rest = len(self._chunks[0]) - self._skip
            if drop < rest:
                self._skip += drop
                return
            self._chunks.popleft()
            self._skip = 0
            drop -= rest

    def clear(self) -> None:
        self._chunks.clear()
        self._skip = 0
        self.start = self.end
