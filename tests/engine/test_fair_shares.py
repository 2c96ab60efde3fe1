"""One greedy session cannot delay another's end of turn beyond a stated bound
(models/listening/fair_pool.py, docs/deploy.md "Fair shares"): the greedy session
floods Smart Turn, the hearing recognizer and the VAD with work, as a client sending
audio far faster than real time does, and the other session's pause score, hearing
and VAD frames are served within the bound.

The bound: a request waits behind at most the calls already running when it was made
and one call of each other session. The shared models' calls are held on their
threads by the test (a gate), so which call runs next is staged, never timed.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.held_speech import HearingDone, OffLoopHearing
from engine.pause_scoring import EndOfTurnScored, PauseScoring
from engine.vad import Pcm16
from models.listening.fair_pool import ABANDONED, FairPool
from models.listening.hearing import Hearing, WhisperHearing
from models.listening.smart_turn import SmartTurnModel
from models.listening.vad_batch import VadBatcher
from tests.support.callers import session_context, until

GREEDY = np.full(24_000, 1000, np.int16)  # whose audio a call holds: its sign
OTHER = np.full(24_000, -1000, np.int16)


class Gate:
    """Stands in for a model's work on its thread: records whose audio each call is
    (by its sign) and holds the thread until the test releases that session's call."""

    def __init__(self) -> None:
        self.started: queue.Queue[str] = queue.Queue()
        self._held: dict[str, list[threading.Event]] = {"greedy": [], "other": []}
        self._lock = threading.Lock()

    def work(self, pcm: npt.NDArray[np.int16]) -> str:
        whose = "greedy" if pcm.mean() > 0 else "other"
        done = threading.Event()
        with self._lock:
            self._held[whose].append(done)
        self.started.put(whose)
        assert done.wait(timeout=10)  # fails the test rather than hangs
        return "done"

    async def next_started(self) -> str:
        return await asyncio.to_thread(self.started.get, timeout=10)

    def release(self, whose: str) -> None:
        """Let the session's oldest call on a thread finish."""
        with self._lock:
            self._held[whose].pop(0).set()

    def release_all(self) -> None:
        with self._lock:
            for events in self._held.values():
                for event in events:
                    event.set()


def in_line(pool: FairPool, waiting: int, abandoned: int) -> Callable[[], bool]:
    """Whether `pool` has `waiting` requests in line and dropped `abandoned`."""
    return lambda: pool.queued == waiting and pool.dropped[ABANDONED] == abandoned


class _NoRunner:
    def run(self, output_names: None, feeds: dict[str, npt.NDArray[np.float32]]) -> list[object]:
        raise AssertionError("the gate scores instead")


@dataclass
class _State:
    frames: int = 0


class RoundsBackend:
    """A VAD whose rounds are recorded (each frame's first sample); the first round
    is held until released, so the other session's frame arrives mid-flood."""

    frame_ms = 32

    def __init__(self) -> None:
        self.rounds: list[list[int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def new_state(self) -> object:
        return _State()

    def score(self, state: object, frame: Pcm16) -> float:
        return self.score_batch([state], frame[None, :])[0]

    def score_batch(self, states: Sequence[object], frames: Pcm16) -> list[float]:
        self.entered.set()
        assert self.release.wait(10)
        self.rounds.append([int(f[0]) for f in frames])
        return [0.0] * len(states)


async def test_a_greedy_session_cannot_hold_back_anothers_end_of_turn() -> None:
    gate = Gate()
    model = SmartTurnModel(_NoRunner())
    model._score = lambda pcm: 0.9 if gate.work(pcm) else 0.0  # type: ignore[method-assign]
    greedy_scored: list[EndOfTurnScored] = []
    other_scored: list[EndOfTurnScored] = []
    greedy_ctx, other_ctx = session_context("greedy"), session_context("other")
    greedy = PauseScoring(model, greedy_scored.append, "greedy")
    other = PauseScoring(model, other_scored.append, "other")
    backend = RoundsBackend()
    vad = VadBatcher(backend)
    try:
        # The greedy session's audio: 240 s in one append, 7500 VAD frames.
        flood = [np.full(512, 1, np.int16)] * 7500
        greedy_frames = asyncio.create_task(vad.score_frames(backend.new_state(), flood))
        await asyncio.to_thread(backend.entered.wait)
        # Its pauses come faster than the model scores them: each new one is asked
        # while the last is on the thread, and speech resuming cancels the last.
        greedy_ctx.run(greedy.score, 1, GREEDY)
        assert await gate.next_started() == "greedy"
        for pause in (2, 3, 4):
            greedy.keep_only(None)  # speech resumed: the pause's score is moot
            greedy_ctx.run(greedy.score, pause, GREEDY)
            # Pause 1 runs on (a call on the thread cannot stop); 2 and 3 never run.
            await until(in_line(model.pool, waiting=1, abandoned=pause - 2))
        # The other session pauses once, and one of its VAD frames arrives.
        other_ctx.run(other.score, 1, OTHER)
        await until(in_line(model.pool, waiting=2, abandoned=2))
        other_frames = asyncio.create_task(
            vad.score_frames(backend.new_state(), [np.full(512, 2, np.int16)])
        )
        await asyncio.sleep(0)
        # Bound: behind the call running when it asked (greedy's pause 1) and one
        # call of each other session (greedy's pause 4, in line first); greedy's
        # next pauses, however many, go after it.
        gate.release("greedy")
        assert await gate.next_started() == "greedy"  # pause 4
        greedy.keep_only(None)
        greedy_ctx.run(greedy.score, 5, GREEDY)
        await until(in_line(model.pool, waiting=2, abandoned=2))
        gate.release("greedy")
        assert await gate.next_started() == "other"
        gate.release("other")
        await until(lambda: bool(other_scored))
        assert other_scored == [EndOfTurnScored(1, 1, 0.9)]
        assert other.answered(other_scored[0])
        assert await gate.next_started() == "greedy"  # pause 5, after the other's
        # VAD: the other session's frame is scored in the round after the held one,
        # not after the greedy session's 7500 frames.
        backend.release.set()
        await other_frames
        assert [2 in r for r in backend.rounds[:2]] == [False, True]
        await greedy_frames
        assert len(backend.rounds) == 7500
    finally:
        gate.release_all()
        backend.release.set()
        vad.close()
        model.close()


async def test_a_greedy_session_cannot_take_both_hearing_threads() -> None:
    gate = Gate()
    recognizer = WhisperHearing(parallel=2)
    recognizer.hear = lambda pcm: Hearing(gate.work(pcm))  # type: ignore[method-assign]
    greedy_heard: list[HearingDone] = []
    other_heard: list[HearingDone] = []
    greedy_ctx, other_ctx = session_context("greedy"), session_context("other")
    greedy = OffLoopHearing(recognizer, greedy_heard.append, "greedy")
    other = OffLoopHearing(recognizer, other_heard.append, "other")
    try:
        # Held speech begun and dropped again and again (clear, then more speech):
        # each hearing is cancelled while on a thread, and a new one asked.
        greedy_ctx.run(greedy.ask, 1, GREEDY)
        assert await gate.next_started() == "greedy"
        for request in (2, 3):
            greedy.cancel()
            greedy_ctx.run(greedy.ask, request, GREEDY)
            await until(in_line(recognizer.pool, waiting=1, abandoned=request - 2))
        # The other session's held speech is heard at once on the second thread:
        # the greedy session has a call running and may not start another.
        other_ctx.run(other.ask, 1, OTHER)
        assert await gate.next_started() == "other"
        gate.release("other")
        await until(lambda: bool(other_heard))
        assert other_heard == [HearingDone(1, Hearing("done"))]
        assert greedy_heard == []
    finally:
        gate.release_all()
        recognizer.close()
