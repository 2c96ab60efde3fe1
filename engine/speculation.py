"""Speculative work during a pause: the model begins on the turn so far before the
turn is committed, so its answer starts sooner when the pause does end the turn.

The decision is `speculation_step`, pure; `Speculation` holds the one turn (item id)
a session speculates on and tells the executor (`Executor.prepare_early`,
`discard_speculation`). Nothing is emitted and no gate changes: speculative work is
not a response, and the committed turn, which has the speculated item's id, picks it
up through the executor's `prepare` as any committed turn does.
"""

from __future__ import annotations

from enum import Enum

from models.base import Executor, PromptItem

# server_vad: silence in a turn after which the model begins on it, as semantic_vad
# does where it first scores a pause (its curve's candidate_pause_ms, also 120 ms).
SPECULATE_AFTER_MS = 120
# server_vad: the answer begins this long before the silence window ends the turn
# (and not before speculation does): with the default 500 ms window, at the
# speculation. On the development host (2 cores, the embedded cascade) recognition
# (~170 ms), the first token (~70) and the first clause's voice (~330) take ~570 ms, so
# the first audio is ready about when the window ends: voice to voice p50 789 ms at
# 120 ms, 879 at 200 (bench/voice_to_voice.py, docs/performance.md). A longer window
# waits longer before answering, so a user who pauses on purpose costs no answer
# thrown away.
ANSWER_LEAD_MS = 380
# A turn longer than this is not speculated on. Speculative recognition runs on the
# recognizer every session shares and, once begun, to its end even when the user goes
# on; so one session's speculation costs the others at most one call over this much
# audio (Whisper's own window), however long a turn a client makes.
MAX_SPECULATED_MS = 30_000


class Step(Enum):
    BEGIN = "begin"
    DISCARD = "discard"


def speculation_step(
    pause_ms: int | None, speculating: bool, after_ms: int = SPECULATE_AFTER_MS, turn_ms: int = 0
) -> Step | None:
    """What to do after the detector took a batch of frames: `pause_ms` is the
    silence so far in the turn in progress (None: in speech, or no turn), `turn_ms`
    the turn's audio so far."""
    if speculating:
        return Step.DISCARD if pause_ms is None else None  # the user went on
    if pause_ms is not None and pause_ms >= after_ms and turn_ms <= MAX_SPECULATED_MS:
        return Step.BEGIN
    return None


def answer_early_due(pause_ms: int | None, silence_duration_ms: int, answered: bool) -> bool:
    """server_vad: whether the answer to the turn in progress may begin now, its pause
    `pause_ms` long (None: in speech) and its window `silence_duration_ms`;
    `answered`: it was begun in this pause already."""
    start = max(SPECULATE_AFTER_MS, silence_duration_ms - ANSWER_LEAD_MS)
    return not answered and pause_ms is not None and pause_ms >= start


class Speculation:
    """The turn a session speculates on (at most one)."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.item_id: str | None = None

    def begin(self, item: PromptItem) -> None:
        self.discard()
        self.item_id = item.id
        self.executor.prepare_early(item)

    def discard(self) -> None:
        if self.item_id is not None:
            self.executor.discard_speculation(self.item_id)
            self.item_id = None

    def committed(self, item_id: str) -> None:
        """`item_id` was committed: work on it is the committed turn's now; work on
        any other turn is stale."""
        if self.item_id == item_id:
            self.item_id = None
        else:
            self.discard()
