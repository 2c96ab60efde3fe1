"""Speech over an answer that cannot be interrupted: postponed, not lost.

A `response.create` with Parley's `interruptible: false` asks for an answer the user
cannot talk over by accident (a disclaimer, "your card will be charged…"). Speech
that would interrupt it (at once, or once it qualifies as held speech,
engine/interruption.py) is *postponed*: nothing of it goes on the wire while the
answer streams or its audio still plays at the client (by the clock of what was
sent, engine/playback.py), not even `speech_started`, since clients flush their
playback on it. Everything the user says meanwhile is one turn, from the first
onset to the last end; once the answer is no longer audible it is released as any
turn is: `speech_started` with its true `audio_start_ms`, and if it already ended
`speech_stopped`, the commit and (with `create_response`) its answer.
`response.cancel` and `output_audio_buffer.clear` end the protection at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.turns import SpeechStopped


@dataclass
class Postponed:
    """A turn said over an uninterruptible answer: nothing of it is on the wire."""

    item_id: str
    start: int  # buffer position of audio_start_ms
    audio_start_ms: int
    stop: SpeechStopped | None = None  # it ended; its events wait with it
    frame_received: float | None = None


def protects(active_interruptible: bool | None, protecting_answer_audible: bool) -> bool:
    """Whether speech now must wait: the active response (`active_interruptible`
    None: there is none) cannot be interrupted, or the last uninterruptible answer
    still plays at the client, whatever runs now: a `speech_started` would stop the
    client's playback, its rest with it (a response created after it plays after it)."""
    return active_interruptible is False or protecting_answer_audible


class PostponedSpeech:
    """The session's one postponed turn (or none), and the answer that protects."""

    def __init__(self) -> None:
        self.turn: Postponed | None = None
        # The uninterruptible answer that ended by itself and may still play.
        self.answer: str | None = None

    @property
    def ended(self) -> bool:
        """A postponed turn has ended: its audio waits in the buffer."""
        return self.turn is not None and self.turn.stop is not None

    def answer_ended(self, response_id: str | None, protects: bool) -> None:
        self.answer = response_id if protects else None

    def postpone(
        self,
        item_id: str,
        start: int,
        audio_start_ms: int,
        stop: SpeechStopped | None = None,
        frame_received: float | None = None,
    ) -> None:
        self.turn = Postponed(item_id, start, audio_start_ms, stop, frame_received)

    def stopped(self, event: SpeechStopped, frame_received: float | None) -> bool:
        """The VAD ended the speech; False: no postponed turn is going on."""
        turn = self.turn
        if turn is None or turn.stop is not None:
            return False
        turn.stop, turn.frame_received = event, frame_received
        return True

    def resumed(self) -> bool:
        """Speech started again while a turn waits: it is more of that turn (its audio
        stayed in the buffer), not a turn of its own. False: nothing waits."""
        turn = self.turn
        if turn is None:
            return False
        turn.stop = turn.frame_received = None
        return True

    def take(self) -> Postponed | None:
        """The turn to release now (None: none waits)."""
        turn, self.turn = self.turn, None
        return turn

    def reset(self) -> None:
        """The turn is gone (a commit, a clear, turn detection replaced)."""
        self.turn = None
