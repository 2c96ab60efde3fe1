"""The user's own voice, learned from their turns, so that held speech that sounds
like them counts as one voice whatever the kurtosis bands say.

The bands of engine/interruption.py (`voices_of`) were chosen on espeak-ng voices,
whose kurtosis is 9-13; a recorded single voice measures 3-6 (a telephone prompt 2-4,
an MP3 reader 4-6), inside the "background talk" band, so its sure words waited for
`max_backchannel_ms` (the pitch clarity of engine/interruption.py now catches most of
them from 400 ms of held speech; the learned voice still decides sooner). A session
knows better: the user's committed turns, said while
the assistant was silent, give their level and kurtosis. Held speech is the user when
its level is close to theirs (background talk is usually quieter, or farther) and it
keeps more than half of their excess kurtosis (SHARE): the user's voice with anyone
as loud over it keeps at most half (the excess kurtosis of a sum of independent sounds is a
weighted mean of its parts', by the square of their power), and babble far less.
Chosen by replaying the recorded and espeak interruption sets offline
(docs/turn-taking.md, "Recorded voices interrupting").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.base import PCM_RATE
from models.listening.crowd import kurtosis

FRAME = PCM_RATE // 50  # 20 ms
# A turn's level: the 90th percentile of its 20 ms frame levels (its loud syllables,
# not its pauses). Frames this far below it at either end are silence around the
# speech (the prefix padding, the pause that ended it), left out of both measures.
EDGE_DB = 30.0
LEAST_MS = 300  # a turn with less speech than this teaches nothing
QUIET_DB = -70.0  # a turn no louder than this is silence (or a muted microphone)
# Held speech this far below (or above) the user's level is not taken for them
# (replayed: 4 dB below lets the recorded voices' first words through at the median
# with no more background talk; background talk is usually quieter). SHARE is above
# the one half an equal mix keeps, with a margin: at 0.5 and 0.6 an espeak babble
# burst as loud as a user whose own kurtosis was low (6.3) passed; at 0.7 none did.
BELOW_DB = 4.0
ABOVE_DB = 6.0
SILENT_DB = -120.0  # the level of less than a frame
GAUSSIAN = 3.0  # a Gaussian's kurtosis: the excess is measured from here
SHARE = 0.7  # of the user's excess kurtosis held speech keeps to be them alone
LEARN = 0.5  # a new turn's weight in the running profile


@dataclass(frozen=True)
class VoiceProfile:
    """A voice as measured over a turn: its level (dBFS) and waveform kurtosis."""

    level_db: float
    kurtosis: float


def frame_levels(pcm: npt.NDArray[np.int16]) -> npt.NDArray[np.float64]:
    """Each whole 20 ms frame's level in dBFS."""
    n = len(pcm) // FRAME
    frames = pcm[: n * FRAME].astype(np.float64).reshape(n, FRAME)
    rms = np.sqrt(np.mean(frames**2, axis=1)) + 1e-9  # silence: about -210 dBFS
    return np.asarray(20.0 * np.log10(rms / 32768.0), dtype=np.float64)


def level_of(pcm: npt.NDArray[np.int16]) -> float:
    """The level of speech: the 90th percentile of its frame levels (dBFS)."""
    levels = frame_levels(pcm)
    return float(np.percentile(levels, 90)) if len(levels) else SILENT_DB


def profile_of(pcm: npt.NDArray[np.int16]) -> VoiceProfile | None:
    """A turn's voice, over its speech without the silence around it; None when it
    has less than LEAST_MS of speech."""
    levels = frame_levels(pcm)
    if not len(levels) or np.percentile(levels, 90) < QUIET_DB:
        return None
    loud = np.flatnonzero(levels >= np.percentile(levels, 90) - EDGE_DB)
    first, last = int(loud[0]), int(loud[-1]) + 1
    if (last - first) * 20 < LEAST_MS:
        return None
    speech = pcm[first * FRAME : last * FRAME]
    return VoiceProfile(float(np.percentile(levels[first:last], 90)), kurtosis(speech))


def learned(old: VoiceProfile | None, new: VoiceProfile) -> VoiceProfile:
    """The running profile after one more turn."""
    if old is None:
        return new
    return VoiceProfile(
        old.level_db + LEARN * (new.level_db - old.level_db),
        old.kurtosis + LEARN * (new.kurtosis - old.kurtosis),
    )


def sounds_like(user: VoiceProfile, level_db: float, kurt: float) -> bool:
    """Whether held speech of this level and kurtosis is the user alone."""
    near = user.level_db - BELOW_DB <= level_db <= user.level_db + ABOVE_DB
    # Never below a Gaussian's, whatever the user measured: that is no voice at all.
    return near and kurt - GAUSSIAN >= max(0.0, SHARE * (user.kurtosis - GAUSSIAN))
