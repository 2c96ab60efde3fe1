"""Turn detection inside a session: the VAD stream, the detector (server_vad or
semantic_vad, engine/turns.py and engine/semantic_turns.py), semantic_vad's
end-of-turn scoring at a pause (engine/pause_scoring.py), speculation during a
pause (engine/speculation.py) and the pace at which audio reaches the shared VAD
(engine/ingest_pace.py).

The session feeds it audio and acts on what it returns: turn events, and what an
end-of-turn score decides. The turn itself (its item id and audio) is the session's:
it is handed in where speculation needs it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.end_of_turn import EndOfTurnModel
from engine.ingest_pace import IngestPace
from engine.pause_scoring import EndOfTurnScored, PauseScoring
from engine.semantic_turns import (
    SemanticTurnDetector,
    SemanticVadParams,
    looks_final,
    silence_needed_ms,
)
from engine.speculation import (
    SPECULATE_AFTER_MS,
    Speculation,
    Step,
    answer_early_due,
    speculation_step,
)
from engine.turns import ServerVadParams, SpeechStopped, TurnDetector, TurnEvent
from engine.vad import VadBackend, VadStream
from models.base import PCM_RATE, Executor, PromptItem

log = logging.getLogger(__name__)

# semantic_vad without an end-of-turn model is told once per process.
_warned_no_end_of_turn = False


@dataclass(frozen=True)
class AnswerEarly:
    """The pause looks final (semantic_vad), or is most of server_vad's window, but
    must grow before the turn ends: the answer may begin now (engine/speculation.py)."""


class TurnDetection:
    def __init__(
        self,
        vad_backend: VadBackend,
        end_of_turn: EndOfTurnModel | None,
        executor: Executor,
        post: Callable[[EndOfTurnScored], None],
        name: str,
        pace: IngestPace | None = None,
        paced: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        self.vad = VadStream(vad_backend, input_rate=PCM_RATE)
        self.pace = pace  # None: audio is scored as fast as it comes
        self._paced = paced  # told how long audio waited for its turn
        self.scoring = PauseScoring(end_of_turn, post, name)
        self.speculation = Speculation(executor)
        self.detector: TurnDetector | None = None  # None: no turn detection
        self._answered_early = False  # server_vad: the answer was begun in this pause

    def new_detector(self, params: ServerVadParams | None, now_ms: int) -> TurnDetector | None:
        """A detector for `params`, its clock at `now_ms`; used once `use`d."""
        if params is None:
            return None
        detector: TurnDetector
        if isinstance(params, SemanticVadParams):
            if self.scoring.model is None:
                _warn_no_end_of_turn()
            detector = SemanticTurnDetector(params, scoring=self.scoring.model is not None)
        else:
            detector = TurnDetector(params)
        detector.reset(now_ms)
        return detector

    def use(self, detector: TurnDetector | None) -> None:
        """Turn detection changed: what the old detector had in flight goes."""
        self.stop_work()
        self.vad.reset()
        self.detector = detector

    async def feed(self, pcm: npt.NDArray[np.int16], *, offload: bool) -> list[TurnEvent]:
        """The VAD's frames of `pcm` through the detector: the turn events found.
        Audio past the session's budget waits first (engine/ingest_pace.py)."""
        detector = self.detector
        if detector is None:
            self.vad.skip(len(pcm))  # the VAD clock stays on the input clock
            return []
        if self.pace is not None:
            now = asyncio.get_running_loop().time()
            delay = self.pace.delay_s(now, len(pcm) / PCM_RATE)
            if delay > 0:
                self._paced(delay)
                await asyncio.sleep(delay)
        return detector.feed(await self.vad.score(pcm, offload=offload))

    def after_frames(
        self, turn: Callable[[], PromptItem | None], turn_ms: int
    ) -> AnswerEarly | None:
        """After a batch of frames and its events: a score of a pause the detector no
        longer waits on goes (speech resumed, or the turn ended); speculation begins
        on the turn so far (`turn`, `turn_ms` long) in a long enough pause, and goes
        when speech resumes. With server_vad the answer may begin ANSWER_LEAD_MS
        before its window ends the turn (`answer_early_due`): no score will ever say
        the pause looks final, and unless the user goes on the language model and
        the voice begin in the window instead of after it."""
        detector = self.detector
        semantic = detector if isinstance(detector, SemanticTurnDetector) else None
        self.scoring.keep_only(semantic.pending_pause if semantic else None)
        pause_ms = detector.pause_ms if detector is not None else None
        after_ms = semantic.curve.candidate_pause_ms if semantic else SPECULATE_AFTER_MS
        speculating = self.speculation.item_id is not None
        step = speculation_step(pause_ms, speculating, after_ms, turn_ms)
        if step is Step.DISCARD:
            self.speculation.discard()
        elif step is Step.BEGIN and (item := turn()) is not None:
            self.speculation.begin(item)
        if step is Step.DISCARD or pause_ms is None:
            self._answered_early = False
        speculating = self.speculation.item_id is not None
        if semantic is None and detector is not None and speculating:
            window = detector.params.silence_duration_ms
            if answer_early_due(pause_ms, window, self._answered_early):
                self._answered_early = True
                return AnswerEarly()
        return None

    def scored(self, message: EndOfTurnScored) -> SpeechStopped | AnswerEarly | None:
        """What a pause's score decides: the turn ends (`SpeechStopped`), or its
        answer may begin early, or nothing (stale, or not final enough)."""
        detector = self.detector
        if not self.scoring.answered(message) or not isinstance(detector, SemanticTurnDetector):
            return None  # stale, or turn detection changed since
        stop = detector.decide(message.pause_id, message.probability)  # stale: None
        if stop is not None:
            return stop
        if looks_final(message.probability, detector.curve) and detector.in_speech:
            return AnswerEarly()
        return None

    def stop_work(self) -> None:
        """Stop what is in flight: the end-of-turn scoring and speculation."""
        self.scoring.reset()
        self.speculation.discard()
        self._answered_early = False

    def reset(self, now_ms: int) -> None:
        """The turn so far is gone (committed or cleared): start over at `now_ms`."""
        self.stop_work()
        if self.detector is not None:
            self.vad.reset()
            self.detector.reset(now_ms)


def _warn_no_end_of_turn() -> None:
    global _warned_no_end_of_turn
    if not _warned_no_end_of_turn:
        _warned_no_end_of_turn = True
        log.warning(
            "semantic_vad without an end-of-turn model: turns end after %d ms of silence",
            silence_needed_ms("auto", None),
        )
