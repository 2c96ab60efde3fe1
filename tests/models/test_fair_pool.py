"""Fair shares of a shared model's threads (models/listening/fair_pool.py): the pure
rules of `FairQueue`, and `FairPool` running them on real threads."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable

import pytest

from models.listening.fair_pool import (
    ABANDONED,
    OVERLOADED,
    SUPERSEDED,
    FairPool,
    FairQueue,
    Overloaded,
    Superseded,
)
from tests.support.callers import session_context, until


def test_a_caller_has_one_call_running_and_one_waiting() -> None:
    line: FairQueue[str] = FairQueue(slots=2)
    assert line.offer("greedy", "g1") is None
    assert line.next() == ("greedy", "g1")
    assert line.offer("greedy", "g2") is None
    # A second thread is free, but the greedy caller already has a call running.
    assert line.next() is None
    assert line.offer("greedy", "g3") == "g2"  # the newer replaces the waiting one
    assert line.waiting == {"greedy": "g3"}
    line.finished("greedy")
    assert line.next() == ("greedy", "g3")


def test_callers_take_turns_so_a_backlog_cannot_stand_ahead() -> None:
    line: FairQueue[str] = FairQueue(slots=1)
    line.offer("greedy", "g1")
    assert line.next() == ("greedy", "g1")
    line.offer("greedy", "g2")  # in line before the other caller asks
    line.offer("other", "o1")
    line.offer("greedy", "g3")  # replaces g2 and keeps its place
    line.finished("greedy")
    assert line.next() == ("greedy", "g3")  # it was first in line
    line.offer("greedy", "g4")  # asks again: to the back, behind the other caller
    line.finished("greedy")
    assert line.next() == ("other", "o1")
    line.finished("other")
    assert line.next() == ("greedy", "g4")


def test_a_running_call_of_one_caller_lets_the_next_caller_in_line_go_first() -> None:
    line: FairQueue[str] = FairQueue(slots=2)
    line.offer("a", "a1")
    line.offer("b", "b1")
    assert line.next() == ("a", "a1")
    line.offer("a", "a2")
    assert line.next() == ("b", "b1")
    assert line.next() is None  # both threads busy
    line.finished("a")
    assert line.next() == ("a", "a2")


def test_a_withdrawn_request_leaves_the_line_but_a_started_one_cannot() -> None:
    line: FairQueue[str] = FairQueue(slots=1)
    line.offer("a", "a1")
    assert line.withdraw("a", "a1") and line.waiting == {}
    line.offer("a", "a2")
    assert line.next() == ("a", "a2")
    assert not line.withdraw("a", "a2")  # on a thread: it runs to its end
    assert line.running == {"a"}


def test_the_line_is_bounded_across_callers_but_a_caller_may_replace_its_own() -> None:
    line: FairQueue[str] = FairQueue(slots=1, limit=1)
    assert line.admits("a")  # a free thread takes it at once
    line.offer("a", "a1")
    assert line.next() == ("a", "a1")
    assert line.admits("b")  # the line is empty
    line.offer("b", "b1")
    assert not line.admits("c")  # full: one more waits behind a line of every session
    assert line.admits("b")  # its newer request takes the older one's place
    assert not line.admits("a")  # running, and the line is full
    line.finished("a")
    assert line.next() == ("b", "b1")
    assert line.admits("c")


def test_a_limit_of_zero_admits_only_what_a_free_thread_takes() -> None:
    line: FairQueue[str] = FairQueue(slots=2, limit=0)
    assert line.admits("a")
    line.offer("a", "a1")
    line.next()
    assert not line.admits("a")  # its own call runs: it could only wait
    assert line.admits("b")  # the second thread is free
    assert FairQueue[str](slots=1).admits("x")  # no limit: never refused


class Gate:
    """A model call that blocks its thread until the test lets it finish."""

    def __init__(self) -> None:
        self.started: queue.Queue[str] = queue.Queue()
        self.release = threading.Semaphore(0)

    def call(self, name: str) -> Callable[[], str]:
        def run() -> str:
            self.started.put(name)
            assert self.release.acquire(timeout=10)  # fails rather than hangs
            return name

        return run

    async def next_started(self) -> str:
        return await asyncio.to_thread(self.started.get, timeout=10)


def as_caller(caller: str, pool: FairPool, run: Callable[[], str]) -> asyncio.Task[str]:
    """`pool.run(run)` in a task of `caller` (as a session's task would be)."""
    return asyncio.get_running_loop().create_task(pool.run(run), context=session_context(caller))


async def test_the_pool_serves_callers_in_turn_and_counts_what_it_drops() -> None:
    gate, pool = Gate(), FairPool(1, "test")
    dropped: list[str] = []
    pool.on_drop = dropped.append
    try:
        g1 = as_caller("greedy", pool, gate.call("g1"))
        assert await gate.next_started() == "g1"
        g2 = as_caller("greedy", pool, gate.call("g2"))
        await until(lambda: pool.queued == 1)
        g3 = as_caller("greedy", pool, gate.call("g3"))
        with pytest.raises(Superseded):
            await g2
        other = as_caller("other", pool, gate.call("o1"))
        g4 = as_caller("greedy", pool, gate.call("g4"))  # replaces g3 in its place
        with pytest.raises(Superseded):
            await g3
        await until(lambda: pool.queued == 2)
        gate.release.release()
        assert await g1 == "g1"
        assert await gate.next_started() == "g4"  # greedy was first in line
        gate.release.release()
        assert await g4 == "g4"
        assert await gate.next_started() == "o1"
        other.cancel()  # on the thread already: it runs to its end, not dropped
        with pytest.raises(asyncio.CancelledError):
            await other
        # Still its caller's running call: the caller's next one waits for it.
        waiting = as_caller("other", pool, gate.call("o2"))
        blocked = as_caller("late", pool, gate.call("l1"))
        await until(lambda: pool.queued == 2)
        blocked.cancel()  # never started: abandoned
        with pytest.raises(asyncio.CancelledError):
            await blocked
        gate.release.release()  # o1 ends
        assert await gate.next_started() == "o2"
        gate.release.release()
        assert await waiting == "o2"
        assert dropped == [SUPERSEDED, SUPERSEDED, ABANDONED]
        assert pool.dropped == {SUPERSEDED: 2, ABANDONED: 1, OVERLOADED: 0}
    finally:
        for _ in range(4):
            gate.release.release()
        pool.close()


async def test_calls_with_no_caller_never_replace_each_other() -> None:
    gate, pool = Gate(), FairPool(1, "test")
    try:
        first = asyncio.create_task(pool.run(gate.call("a")))
        assert await gate.next_started() == "a"
        second = asyncio.create_task(pool.run(gate.call("b")))
        third = asyncio.create_task(pool.run(gate.call("c")))
        await until(lambda: pool.queued == 2)
        for _ in range(3):
            gate.release.release()
        assert [await first, await second, await third] == ["a", "b", "c"]
        assert pool.dropped == {SUPERSEDED: 0, ABANDONED: 0, OVERLOADED: 0}
    finally:
        pool.close()


async def test_a_closed_pool_refuses_and_fails_what_waits() -> None:
    gate, pool = Gate(), FairPool(1, "test")
    running = asyncio.create_task(pool.run(gate.call("a")))
    assert await gate.next_started() == "a"
    waiting = asyncio.create_task(pool.run(gate.call("b")))
    await until(lambda: pool.queued == 1)
    pool.close()
    with pytest.raises(RuntimeError):
        await waiting
    gate.release.release()
    assert await running == "a"  # a running call ends normally
    with pytest.raises(RuntimeError):
        await pool.run(gate.call("c"))


async def test_an_overloaded_pool_refuses_at_once_and_counts_it() -> None:
    gate, pool = Gate(), FairPool(1, "test", limit=1)
    try:
        running = as_caller("a", pool, gate.call("a1"))
        waiting = as_caller("b", pool, gate.call("b1"))
        assert await gate.next_started() == "a1"
        await until(lambda: pool.queued == 1)
        with pytest.raises(Overloaded):  # refused without waiting for the thread
            await as_caller("c", pool, gate.call("c1"))
        assert pool.dropped == {SUPERSEDED: 0, ABANDONED: 0, OVERLOADED: 1}
        gate.release.release()
        assert await running == "a1"
        assert await gate.next_started() == "b1"
        gate.release.release()
        assert await waiting == "b1"
        assert gate.started.empty()  # c1 never ran
    finally:
        for _ in range(3):
            gate.release.release()
        pool.close()
