"""VAD frames of every session scored together, on one worker thread.

Why: one Silero call per 32 ms frame per session spends most of its time in per-call
overhead, and it spends it on the event loop that every session shares. Batched, a
frame costs about half as much, and the work leaves the loop: onnxruntime releases
the GIL while it runs, so scoring uses another core.

How: a session hands over its new frames with its own VAD state and awaits them. The
worker runs rounds. A round takes the next frame of every waiting request (a
session's frames depend on each other through its state, so one per session per
round), scores them in one call, and wakes the loop once for all the requests it
completed. Requests that arrive meanwhile join the next round. A session has at most
one request in flight (it awaits it), so the work queued is bounded by the sessions.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from models.listening.vad import Pcm16

log = logging.getLogger(__name__)


class BatchScoringBackend(Protocol):
    """What a `VadBatcher` needs of its backend: the engine's `VadBackend`
    (engine/vad.py), and many streams scored in one call."""

    @property
    def frame_ms(self) -> int: ...

    def new_state(self) -> object: ...

    def score(self, state: object, frame: Pcm16) -> float: ...

    def score_batch(self, states: Sequence[object], frames: Pcm16) -> list[float]:
        """Scores row i of `frames` ([n, samples]) with `states[i]`, updating it."""
        ...


@dataclass(eq=False)
class _Request:
    state: object
    frames: list[Pcm16]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[float]]
    scores: list[float] = field(default_factory=list)


def _settle(done: list[tuple[_Request, BaseException | None]]) -> None:
    """On the requests' loop: hand each its scores (or the error of its round)."""
    for request, error in done:
        if request.future.done():  # its session was cancelled meanwhile
            continue
        if error is None:
            request.future.set_result(request.scores)
        else:
            request.future.set_exception(error)


class VadBatcher:
    """A `VadBackend` whose `score_frames` batches across sessions (see module doc):
    the engine's `OffLoopScorer` (engine/vad.py).

    `score` still scores one frame inline, for callers that want no thread.
    """

    def __init__(self, backend: BatchScoringBackend, max_batch: int = 64) -> None:
        self.backend = backend
        self.max_batch = max_batch
        self._inbox: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.rounds = 0  # model calls made (for tests and benchmarks)
        self.batched = 0  # frames scored in them

    @property
    def frame_ms(self) -> int:
        return self.backend.frame_ms

    def new_state(self) -> object:
        return self.backend.new_state()

    def score(self, state: object, frame: Pcm16) -> float:
        return self.backend.score(state, frame)

    async def score_frames(self, state: object, frames: list[Pcm16]) -> list[float]:
        """The scores of `frames`, in order, scored with (and updating) `state`. The
        caller must not touch `state` until this returns."""
        if not frames:
            return []
        loop = asyncio.get_running_loop()
        request = _Request(state, frames, loop, loop.create_future())
        self._start()
        self._inbox.put(request)
        return await request.future

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                # Daemon: a process that exits without close() must not hang on it.
                self._thread = threading.Thread(target=self._work, name="vad-batch", daemon=True)
                self._thread.start()

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the worker once the requests already queued are scored."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._inbox.put(None)
            thread.join(timeout_s)

    def _work(self) -> None:
        active: list[_Request] = []
        while True:
            # Block only when nothing is in progress; otherwise take what has arrived.
            incoming = [self._inbox.get()] if not active else []
            while True:
                try:
                    incoming.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            if None in incoming:
                active += [r for r in incoming if r is not None]
                while active:  # finish what was asked before close()
                    active = self._round(active)
                return
            active += [r for r in incoming if r is not None]
            active = self._round(active)

    def _round(self, active: list[_Request]) -> list[_Request]:
        """Score the next frame of up to `max_batch` requests; the ones left over."""
        batch = active[: self.max_batch]
        error: BaseException | None = None
        try:
            frames = np.stack([r.frames[len(r.scores)] for r in batch])
            scores = self.backend.score_batch([r.state for r in batch], frames)
            for request, score in zip(batch, scores, strict=True):
                request.scores.append(score)
        except Exception as exc:  # the round fails its requests, not the worker
            log.exception("VAD batch of %d frames failed", len(batch))
            error = exc
        self.rounds += 1
        self.batched += len(batch)
        finished = [r for r in batch if error is not None or len(r.scores) == len(r.frames)]
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Request, BaseException | None]]] = {}
        for request in finished:
            by_loop.setdefault(request.loop, []).append((request, error))
        for loop, done in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, done)
            except RuntimeError:  # that loop has closed: nobody is waiting any more
                pass
        # Requests this round left out go first in the next, so none waits for long.
        left = [r for r in batch if error is None and len(r.scores) < len(r.frames)]
        return active[self.max_batch :] + left
