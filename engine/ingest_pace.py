"""How fast a session's audio may reach the shared VAD: at most `speed` times real
time once a burst of `burst_s` seconds of audio is spent.

Why: a client may append minutes of audio at once (an append holds up to 15 MiB,
about 5 min of pcm16), and the VAD scores it as fast as its thread runs: 240 s took
0.9 s of a core. Each session's frames take their turn in the VAD's rounds
(models/listening/vad_batch.py), so no one's frames wait behind such a flood, but its
cost is a core the other sessions' models need. Past the burst the session waits
before its audio is scored; it keeps every byte, in wire order, and its mailbox,
then its connection, push back on the client while it waits. A client streaming in
real time (or catching up a few seconds) never waits.

The budget is a leaky bucket kept as one time (the generic cell rate algorithm):
`due` is when the audio booked so far would be scored at `speed`; audio may start
up to `burst_s / speed` before that.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class IngestPace:
    speed: float  # times real time, past the burst
    burst_s: float  # seconds of audio a session may send at once, or after a rest
    _due: float = 0.0

    def delay_s(self, now: float, audio_s: float) -> float:
        """Book `audio_s` of audio arriving at `now` (seconds on any steady clock):
        how long it waits before it is scored (0: at once)."""
        self._due = max(self._due, now) + audio_s / self.speed
        return max(0.0, self._due - now - self.burst_s / self.speed)
