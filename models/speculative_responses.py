"""A response begun before its turn is committed (`Executor.answer_early`): the model
runs into a buffer and nothing is emitted. The response the session asks for once
the turn commits adopts it (`take`) when its prompt has the same `prompt_key` (the
same conversation and settings), and replays the buffer, then the rest as it comes;
any other prompt, speech going on (`discard`) or nobody asking within `UNCLAIMED_S`
throws it away, stopping the model.

One at a time per executor: a new speculation, or a real response that is not the
speculated one, stops the running one first, so speculation never holds a model
that committed work waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field

from models.base import ExecutorStats, OutputChunk, Prompt, PromptKey, prompt_key
from models.speech.transcripts import SpeculationStats

log = logging.getLogger(__name__)

# A speculation not adopted this long after it began is stopped and dropped (its
# turn never committed, or committed into no response).
UNCLAIMED_S = 15.0

Generate = Callable[[Prompt], AsyncGenerator[OutputChunk, None]]


class Declined(Exception):
    """Raised by an early answer, before its first chunk, that cannot answer (the
    cascade's, when its turn has no speculative transcript: the recognizer was busy
    in the pause). The response that would adopt it answers afresh instead of
    adopting an empty answer."""


@dataclass
class _Speculation:
    item_id: str
    prompt: Prompt
    key: PromptKey
    chunks: asyncio.Queue[OutputChunk | BaseException | None] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None
    expiry: asyncio.TimerHandle | None = None


class SpeculativeResponses:
    """The executor's one speculative response. `generate` is the executor's own
    (a prompt whose turn it can read without side effects: see each executor);
    `abort` stops a request at the model by its id."""

    def __init__(
        self,
        generate: Generate,
        abort: Callable[[str], Awaitable[None]],
        stats: SpeculationStats | None = None,
    ) -> None:
        self._generate = generate
        self._abort = abort
        self._running: _Speculation | None = None
        self._aliases: dict[str, str] = {}  # adopting response id -> speculated request id
        self._stopping: set[asyncio.Task[None]] = set()  # held: the loop keeps weak refs
        self.stats = stats if stats is not None else SpeculationStats()

    def begin(self, prompt: Prompt, item_id: str) -> None:
        self.discard()
        spec = _Speculation(item_id, prompt, prompt_key(prompt))
        spec.task = asyncio.get_running_loop().create_task(
            self._run(spec), name=f"speculation:{prompt.request_id}"
        )
        spec.expiry = asyncio.get_running_loop().call_later(UNCLAIMED_S, self._expire, spec)
        self._running = spec
        self.stats.responses_started += 1

    def discard(self, item_id: str | None = None) -> None:
        """Stop and drop the speculation (only if it is `item_id`'s, when given)."""
        spec = self._running
        if spec is None or (item_id is not None and spec.item_id != item_id):
            return
        self._running = None
        self.stats.responses_discarded += 1
        self._stop(spec)

    def take(self, prompt: Prompt) -> AsyncGenerator[OutputChunk, None] | None:
        """The speculated response's chunks if `prompt` has the key of the one it
        began, adopted by `prompt.request_id`; else None (and a running speculation
        is stopped: the model is needed for this request)."""
        spec = self._running
        if spec is None:
            return None
        if prompt_key(prompt) != spec.key:
            self.discard()
            return None
        self._running = None
        if spec.expiry is not None:
            spec.expiry.cancel()
        self.stats.responses_used += 1
        self._aliases[prompt.request_id] = spec.prompt.request_id
        return self._replay(spec, prompt.request_id)

    async def respond(
        self, prompt: Prompt, fresh: Generate, stats: ExecutorStats
    ) -> AsyncGenerator[OutputChunk, None]:
        """An executor's `generate`: the adopted speculation's chunks (its marks are
        the response's too, and its counters once it ends), or `fresh(prompt)`."""
        adopted = self.take(prompt)
        model_id = self.resolve(prompt.request_id)
        first: OutputChunk | None = None
        if adopted is not None:
            try:
                first = await anext(adopted)
            except StopAsyncIteration:
                pass  # an empty answer, adopted as it is
            except Declined:
                self.stats.responses_used -= 1
                self.stats.responses_declined += 1
                adopted, model_id = None, prompt.request_id
        if adopted is not None:
            stats.share_marks(prompt.request_id, model_id)
        chunks = fresh(prompt) if adopted is None else adopted
        try:
            if first is not None:
                yield first
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    yield chunk
        finally:
            if adopted is not None:
                stats.adopted(prompt.request_id, model_id)

    def resolve(self, request_id: str) -> str:
        """The id the model knows a request by (an adopted speculation's own)."""
        return self._aliases.get(request_id, request_id)

    async def aclose(self) -> None:
        self.discard()
        await asyncio.gather(*self._stopping, return_exceptions=True)

    async def _run(self, spec: _Speculation) -> None:
        try:
            async with contextlib.aclosing(self._generate(spec.prompt)) as chunks:
                async for chunk in chunks:
                    spec.chunks.put_nowait(chunk)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the adopting response reports it
            spec.chunks.put_nowait(exc)
        finally:
            spec.chunks.put_nowait(None)

    async def _replay(
        self, spec: _Speculation, request_id: str
    ) -> AsyncGenerator[OutputChunk, None]:
        try:
            while (chunk := await spec.chunks.get()) is not None:
                if isinstance(chunk, BaseException):
                    raise chunk
                yield chunk
        finally:
            self._aliases.pop(request_id, None)
            task = spec.task
            if task is not None and not task.done():
                await self._abort(spec.prompt.request_id)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _expire(self, spec: _Speculation) -> None:
        if self._running is spec:
            log.info("speculative response %s was never claimed", spec.prompt.request_id)
            self.discard()

    def _stop(self, spec: _Speculation) -> None:
        if spec.expiry is not None:
            spec.expiry.cancel()
        task = spec.task
        if task is None or task.done():
            return

        async def stop() -> None:
            await self._abort(spec.prompt.request_id)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        stopping = asyncio.get_running_loop().create_task(
            stop(), name=f"stop:{spec.prompt.request_id}"
        )
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopping.discard)
