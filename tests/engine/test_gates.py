"""The pure decisions, and the preparation-table race they must survive."""

from __future__ import annotations

import asyncio

import pytest

from engine.gates import (
    BargeIn,
    GateSnapshot,
    PreparationView,
    RequestSnapshot,
    ResponseRequestAction,
    SpeechStartSnapshot,
    decide_barge_in,
    decide_response_request,
    response_gate_open,
)
from engine.prepare_chain import PrepareChain


def naive_gate_open(chain: PrepareChain, active_response: bool) -> bool:
    """The buggy predicate: counts every *tracked* response-bound preparation, i.e. trusts
    bookkeeping that a done-callback cleans up one loop iteration late."""
    return not active_response and not any(r.response_bound for r in chain.tracked())


@pytest.mark.parametrize(
    ("active", "preparations", "open_"),
    [
        (False, (), True),
        (True, (), False),
        (False, (PreparationView(response_bound=True, done=False),), False),
        (False, (PreparationView(response_bound=True, done=True),), True),
        (False, (PreparationView(response_bound=False, done=False),), True),
        (True, (PreparationView(response_bound=True, done=True),), False),
        (
            False,
            (
                PreparationView(True, True),
                PreparationView(False, False),
                PreparationView(True, False),
            ),
            False,
        ),
    ],
)
def test_response_gate(
    active: bool, preparations: tuple[PreparationView, ...], open_: bool
) -> None:
    assert response_gate_open(GateSnapshot(active, preparations)) is open_


@pytest.mark.parametrize(
    ("active", "from_client", "action"),
    [
        (False, True, ResponseRequestAction.START),
        (False, False, ResponseRequestAction.START),
        (True, True, ResponseRequestAction.REJECT),
        (True, False, ResponseRequestAction.DEFER),
    ],
)
def test_response_request(active: bool, from_client: bool, action: ResponseRequestAction) -> None:
    assert decide_response_request(RequestSnapshot(active, from_client)) is action


@pytest.mark.parametrize(
    ("interrupt", "active", "deferred", "action"),
    [
        (True, True, False, BargeIn.CANCEL_ACTIVE),
        (True, True, True, BargeIn.CANCEL_ACTIVE),
        (True, False, True, BargeIn.DROP_DEFERRED),
        (True, False, False, BargeIn.NONE),
        (False, True, True, BargeIn.NONE),
    ],
)
def test_barge_in(interrupt: bool, active: bool, deferred: bool, action: BargeIn) -> None:
    assert decide_barge_in(SpeechStartSnapshot(interrupt, active, deferred)) is action


@pytest.mark.parametrize("response_bound", [True, False])
async def test_completed_append_does_not_hold_response_gate(response_bound: bool) -> None:
    chain = PrepareChain()

    async def work() -> None:
        return None

    task = asyncio.get_running_loop().create_task(work())
    await task
    # Tracked after it finished: asyncio schedules the done-callback that removes it
    # for the next loop iteration, exactly the window the session can decide in.
    chain.track(task, epoch=0, response_bound=response_bound)
    assert task.done()
    assert [r.task for r in chain.tracked()] == [task]
    assert response_gate_open(GateSnapshot(False, chain.snapshot()))
    # The bookkeeping view disagrees exactly when the append is response-bound.
    assert naive_gate_open(chain, active_response=False) is not response_bound

    await asyncio.sleep(0)
    assert chain.tracked() == []
    await chain.cancel_all()
    assert chain.tracked() == []


@pytest.mark.parametrize("response_bound", [True, False])
async def test_finished_append_is_seen_done_by_whoever_it_notifies(response_bound: bool) -> None:
    """The natural shape of the race: an append tells the session it finished as its
    last step; the session wakes before the done-callback has run."""
    told: asyncio.Queue[object] = asyncio.Queue()
    chain = PrepareChain(notify=lambda record, error: told.put_nowait(record))

    async def work() -> None:
        await asyncio.sleep(0)

    record = chain.submit(work, epoch=0, response_bound=response_bound, label="turn")
    assert not response_gate_open(GateSnapshot(False, chain.snapshot())) or not response_bound
    assert await told.get() is record
    assert record.task.done()
    assert chain.tracked() == [record]  # the callback has not run yet
    assert response_gate_open(GateSnapshot(False, chain.snapshot()))
    await asyncio.sleep(0)
    assert chain.tracked() == []


async def test_appends_run_in_wire_order_and_a_failure_breaks_the_chain() -> None:
    chain = PrepareChain()
    order: list[str] = []
    gate = asyncio.Event()

    async def first() -> None:
        await gate.wait()
        order.append("first")

    async def failing() -> None:
        order.append("failing")
        raise RuntimeError("model refused")

    async def after() -> None:
        order.append("after")

    a = chain.submit(first, epoch=0, response_bound=False, label="a")
    b = chain.submit(failing, epoch=0, response_bound=True, label="b")
    c = chain.submit(after, epoch=0, response_bound=True, label="c")
    for _ in range(5):
        await asyncio.sleep(0)
    assert order == []  # nobody overtakes the first append
    gate.set()
    await asyncio.wait([a.task, b.task, c.task])
    assert order == ["first", "failing"]
    assert isinstance(b.task.exception(), RuntimeError)
    assert c.task.exception() is not None  # broken chain: "after" never ran

    # A later append starts a fresh chain.
    d = chain.submit(after, epoch=0, response_bound=True, label="d")
    await d.task
    assert order == ["first", "failing", "after"]


async def test_cancel_all_is_bounded_when_a_task_swallows_its_cancel() -> None:
    chain = PrepareChain()
    release = asyncio.Event()
    swallowed = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed.set()
            await release.wait()  # keeps running after being cancelled

    record = chain.submit(stubborn, epoch=0, response_bound=True, label="x")
    await asyncio.sleep(0)
    await chain.cancel_all(wait_s=0.01)
    assert swallowed.is_set()
    assert not record.task.done()  # we stopped waiting; it still runs
    release.set()
    await record.task
