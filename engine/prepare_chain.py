"""The prepare chain: committed input handed to the model (`executor.prepare`) in
wire order, one chain per session, owned by the session.

Each preparation awaits the one before it, so the model receives audio in the order
the client sent it; when a predecessor fails, the rest of the chain fails too rather
than hand the model a turn with a hole in it.

Tasks leave the table through a done-callback, which asyncio runs one loop
iteration after the task finishes. Whoever decides on the table in between must
read liveness from the task itself: `snapshot()` does exactly that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from engine.gates import PreparationView

log = logging.getLogger(__name__)


class PrepareChainBroken(Exception):
    """Raised in a preparation whose predecessor failed."""


@dataclass
class Preparation:
    task: asyncio.Task[None]
    epoch: int
    # True when the preparation closes a committed turn or has announced a response:
    # a response must not start before it has finished.
    response_bound: bool
    label: str = ""
    seq: int = 0  # submission order, from 1


async def _await_predecessor(previous: asyncio.Task[None], label: str) -> None:
    try:
        await asyncio.shield(previous)
    except asyncio.CancelledError:
        if not previous.cancelled():
            raise  # this preparation itself was cancelled
        raise PrepareChainBroken(f"{label}: an earlier preparation was cancelled") from None
    except Exception as exc:
        raise PrepareChainBroken(f"{label}: an earlier preparation failed") from exc


class PrepareChain:
    def __init__(
        self, notify: Callable[[Preparation, BaseException | None], None] = lambda r, e: None
    ) -> None:
        self._notify = notify
        self._records: dict[asyncio.Task[None], Preparation] = {}
        self._tail: asyncio.Task[None] | None = None
        self.last_seq = 0

    def submit(
        self,
        work: Callable[[], Awaitable[None]],
        *,
        epoch: int,
        response_bound: bool,
        label: str = "",
    ) -> Preparation:
        """Run `work` after every preparation submitted before it."""
        previous = self._tail
        record: Preparation | None = None

        async def run() -> None:
            error: BaseException | None = None
            try:
                if previous is not None:
                    await _await_predecessor(previous, label)
                await work()
            except BaseException as exc:
                error = exc
                raise
            finally:
                # The task's last step: whoever is told may decide before the
                # done-callback has removed this task from the table.
                assert record is not None
                self._notify(record, error)

        task = asyncio.get_running_loop().create_task(run(), name=f"prepare:{label}")
        self._tail = task
        record = self.track(task, epoch=epoch, response_bound=response_bound, label=label)
        return record

    def track(
        self, task: asyncio.Task[None], *, epoch: int, response_bound: bool, label: str = ""
    ) -> Preparation:
        self.last_seq += 1
        record = Preparation(task, epoch, response_bound, label, self.last_seq)
        self._records[task] = record
        task.add_done_callback(self._on_done)
        return record

    def _on_done(self, task: asyncio.Task[None]) -> None:
        self._records.pop(task, None)
        if self._tail is task:
            self._tail = None
        if not task.cancelled() and task.exception() is not None:
            log.warning("%s failed: %r", task.get_name(), task.exception())

    def snapshot(self, up_to_seq: int | None = None) -> tuple[PreparationView, ...]:
        """Tracked preparations (those submitted up to `up_to_seq`, if given), with
        liveness read from the task right now."""
        return tuple(
            PreparationView(r.response_bound, r.task.done())
            for r in self._records.values()
            if up_to_seq is None or r.seq <= up_to_seq
        )

    def tracked(self) -> list[Preparation]:
        return list(self._records.values())

    async def cancel_all(self, wait_s: float = 0.25) -> None:
        """Cancel every preparation and wait (bounded) for them to unwind.

        A task that swallows its cancellation and keeps running must not stall the
        session: after `timeout` we stop waiting and leave it to finish on its own.
        """
        tasks = [t for t in self._records if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=wait_s)
