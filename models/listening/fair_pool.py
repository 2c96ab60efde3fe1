"""Fair shares of a model's threads: the listening models every session shares (Smart
Turn, the hearing recognizer) run their calls through a `FairPool` instead of a plain
thread pool's first-come queue.

Why: a client may send audio much faster than real time, and each pause or held
utterance it produces asks a shared model for a call, so one session could keep the
threads busy and stand its backlog ahead of everyone's end of turn.

The rules (`FairQueue`, pure):
- each caller (a session) has at most one call running and one waiting per model;
- a caller's newer request replaces its waiting one, which gets `Superseded` at once
  (the model's caller then answers "no result", which the engine already handles);
  the newer one keeps the older one's place in line;
- a free thread takes the first caller in line that has no call running, and a
  caller that asks again after being served goes to the back: round robin.

So a call waits behind at most the calls already running when it was asked and one
call of each other caller. And a server-wide budget (`limit`): at most that many
requests wait at once across all callers; a request beyond it is refused at once
(`Overloaded`, counted as `overloaded`) and its caller decides without the model, by
the duration rules the engine already falls back to, instead of every session's
decision waiting behind a line that grows with the number of sessions.

A call already on a thread cannot be stopped: when its caller gives up, it still
counts as that caller's running call until it ends, so abandoned calls cannot pile up
on the threads either.

Whose call it is: `CALLER`, which the session sets in its task (engine/session.py);
the tasks it starts inherit it. A call with no caller is a caller of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

CALLER: ContextVar[str | None] = ContextVar("parley_model_caller", default=None)

# Why a request never ran (the `reason` of parley_model_requests_dropped_total).
SUPERSEDED = "superseded"  # its caller asked again before it started
ABANDONED = "abandoned"  # its caller stopped waiting before it started
OVERLOADED = "overloaded"  # the line was full (the server-wide budget): refused at once


class Superseded(Exception):
    """The caller's newer request took this one's place before it started."""


class Overloaded(Exception):
    """The model's line was full: the request was refused without running."""


@dataclass
class FairQueue(Generic[T]):
    """Which waiting request runs next on `slots` threads (see module doc)."""

    slots: int
    # Requests that may wait at once across all callers (None: no bound).
    limit: int | None = None
    running: set[Hashable] = field(default_factory=set)
    # In line, one request per caller; a dict keeps the order callers joined in.
    waiting: dict[Hashable, T] = field(default_factory=dict)

    def admits(self, caller: Hashable) -> bool:
        """Whether a request of `caller` may join the line now: it can start at once,
        it replaces the caller's waiting one, or the line is within `limit`."""
        if self.limit is None or caller in self.waiting:
            return True
        if not self.waiting and caller not in self.running and len(self.running) < self.slots:
            return True  # a free thread takes it at once
        return len(self.waiting) < self.limit

    def offer(self, caller: Hashable, request: T) -> T | None:
        """Put `request` in line; the caller's waiting request it replaces, if any."""
        replaced = self.waiting.get(caller)
        self.waiting[caller] = request  # an existing key keeps its place
        return replaced

    def withdraw(self, caller: Hashable, request: T) -> bool:
        """Take `request` out of line; False when it is not waiting (it started)."""
        if self.waiting.get(caller) is not request:
            return False
        del self.waiting[caller]
        return True

    def next(self) -> tuple[Hashable, T] | None:
        """The request to start now (marked running), or None: no thread is free,
        or every caller in line has a call running."""
        if len(self.running) >= self.slots:
            return None
        for caller, request in self.waiting.items():
            if caller not in self.running:
                del self.waiting[caller]
                self.running.add(caller)
                return caller, request
        return None

    def finished(self, caller: Hashable) -> None:
        """The caller's running call ended."""
        self.running.discard(caller)


@dataclass(eq=False)
class _Job(Generic[R]):
    call: Callable[[], R]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[R]


def _settle(job: _Job[Any], result: object, error: BaseException | None) -> None:
    """On the job's loop: its result, unless its caller gave up meanwhile."""
    if job.future.done():
        return
    if error is None:
        job.future.set_result(result)
    else:
        job.future.set_exception(error)


class FairPool:
    """`threads` threads that run calls in fair shares across callers."""

    def __init__(self, threads: int, name: str, limit: int | None = None) -> None:
        self._queue: FairQueue[_Job[Any]] = FairQueue(threads, limit)
        self._lock = threading.Lock()  # the queue is read by the loop and the threads
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self._closed = False
        self._warned = False  # a failing call is logged once
        self.dropped: dict[str, int] = {SUPERSEDED: 0, ABANDONED: 0, OVERLOADED: 0}
        # Told each request that never ran, with its reason (the server's metrics).
        self.on_drop: Callable[[str], None] | None = None

    @property
    def queued(self) -> int:
        """Requests in line, not started."""
        return len(self._queue.waiting)

    async def run(self, call: Callable[[], R]) -> R:
        """`call()` on one of the threads, in its caller's turn. Raises `Superseded`
        when the same caller asks again before it started, `Overloaded` when the line
        is full, RuntimeError once closed."""
        caller: Hashable = CALLER.get() or object()
        loop = asyncio.get_running_loop()
        job: _Job[R] = _Job(call, loop, loop.create_future())
        with self._lock:
            if self._closed:
                raise RuntimeError("the model is closed")
            admitted = self._queue.admits(caller)
            replaced = self._queue.offer(caller, job) if admitted else None
            self._start_next()
        if not admitted:
            self._drop(OVERLOADED)
            raise Overloaded()
        if replaced is not None:
            replaced.loop.call_soon_threadsafe(_settle, replaced, None, Superseded())
            self._drop(SUPERSEDED)
        try:
            return await job.future
        except asyncio.CancelledError:
            with self._lock:
                withdrawn = self._queue.withdraw(caller, job)
            if withdrawn:
                self._drop(ABANDONED)
            raise

    async def answer(self, call: Callable[[], R], failing: str) -> R | None:
        """`run(call)`, or None when it never ran (superseded, overloaded) or failed:
        every model here falls back to its rules on None. The first failure is logged,
        as `failing` with the error in place of its `%s`."""
        try:
            return await self.run(call)
        except (Superseded, Overloaded):
            return None
        except Exception as exc:  # the runtimes' errors (onnxruntime, CTranslate2) are plain
            if not self._warned:
                self._warned = True
                log.warning(failing, exc)
            return None

    def _drop(self, reason: str) -> None:
        self.dropped[reason] += 1
        if self.on_drop is not None:
            self.on_drop(reason)

    def _start_next(self) -> None:
        """Hand the threads what the queue says may start (the lock is held)."""
        while not self._closed and (chosen := self._queue.next()) is not None:
            caller, job = chosen
            self._threads.submit(self._work, caller, job)

    def _work(self, caller: Hashable, job: _Job[Any]) -> None:
        result: object = None
        error: BaseException | None = None
        try:
            result = job.call()
        except BaseException as exc:  # handed to the caller, not lost in the thread
            error = exc
        with contextlib.suppress(RuntimeError):  # a closed loop waits for nothing
            job.loop.call_soon_threadsafe(_settle, job, result, error)
        with self._lock:
            self._queue.finished(caller)
            self._start_next()

    def close(self) -> None:
        """Let running calls end; calls still in line fail (their callers fall back)."""
        with self._lock:
            self._closed = True
            waiting = list(self._queue.waiting.values())
            self._queue.waiting.clear()
        for job in waiting:
            with contextlib.suppress(RuntimeError):  # a closed loop waits for nothing
                job.loop.call_soon_threadsafe(_settle, job, None, RuntimeError("closed"))
        self._threads.shutdown(wait=False)
