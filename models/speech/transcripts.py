"""The text of user audio turns: Parley's own recognizer, run once per item however
many callers ask (the turn's preparation, the client's transcription events, a
response), kept in a bounded cache for later prompts.

A turn can be recognized speculatively before it is committed (`speculate`, at a
pause that may end it): when the turn then commits with no more speech, its
recognition adopts that work instead of starting from the beginning; when the user
goes on, the session discards it (`discard`). Speculation only ever uses an idle
recognizer, so it never delays a committed turn's recognition.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from models.base import Heard, PromptItem, TokenLogprob
from models.speech.asr import ScoringRecognizer, SpeechRecognizer
from models.speech.remote_asr import RemoteRecognizer
from models.speech.slots import StageSlots
from models.stage_timing import Clock, Where


@dataclass
class SpeculationStats:
    started: int = 0  # speculative recognitions begun
    used: int = 0  # adopted by the committed turn
    discarded: int = 0  # thrown away: the user went on, or the turn was dropped
    skipped_busy: int = 0  # not begun: the recognizer was busy
    wasted_audio_s: float = 0.0  # audio of the discarded ones
    # Responses begun at a pause that looked final (models/speculative_responses.py).
    responses_started: int = 0
    responses_used: int = 0  # adopted by the response to the committed turn
    responses_discarded: int = 0
    responses_declined: int = 0  # adopted, but could not begin: answered afresh
    # Partial recognitions of a turn still being spoken (engine/partials.py).
    partials: int = 0
    partials_skipped_busy: int = 0


@dataclass(frozen=True)
class Wait:
    """How long an item's text took from when it was first asked for to ready;
    `speculative`: it came from the recognition begun before the turn was committed."""

    seconds: float
    speculative: bool


@dataclass
class _Speculative:
    task: asyncio.Task[Heard]
    audio_s: float


class Transcripts:
    """Recognizes user audio items in the background (`start`) or on demand (`get`).
    Executors whose model hears audio directly use the text for the client and, in
    later responses, for audio that no longer fits the prompt; the cascade's language
    model reads it."""

    def __init__(
        self,
        recognizer: SpeechRecognizer | None,
        slot: StageSlots | None = None,
        *,
        cache: int = 4096,
        on_recognized: Callable[[str], None] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.recognizer = recognizer
        self.slot = slot if slot is not None else StageSlots("asr", 1)
        self._done: OrderedDict[str, str] = OrderedDict()
        self._running: dict[str, asyncio.Task[str]] = {}
        self._cache = cache
        self._on_recognized = on_recognized  # item id, after audio was recognized
        self._speculative: dict[str, _Speculative] = {}
        self._abandoned: set[asyncio.Task[Heard]] = set()  # discarded, still running
        self._logprobs: OrderedDict[str, tuple[TokenLogprob, ...]] = OrderedDict()
        self._partial_of: str | None = None  # the item a partial recognition runs for
        self.speculation = SpeculationStats()
        self.clock = clock
        self.waits: OrderedDict[str, Wait] = OrderedDict()  # by item id, as many as texts

    @property
    def where(self) -> Where:
        return "remote" if isinstance(self.recognizer, RemoteRecognizer) else "embedded"

    @property
    def known(self) -> Mapping[str, str]:
        return self._done

    def start(self, item: PromptItem) -> asyncio.Task[str] | None:
        """Begin recognizing a user audio item (once), without waiting for it."""
        if self.recognizer is None or item.audio is None or item.id in self._done:
            return None
        task = self._running.get(item.id)
        if task is None:
            spec = self._speculative.pop(item.id, None)
            if spec is not None:
                self.speculation.used += 1
            asked = self.clock()
            work = (
                self._recognize(item, asked)
                if spec is None
                else self._adopt(item, spec.task, asked)
            )
            task = asyncio.get_running_loop().create_task(work)
            self._running[item.id] = task
            task.add_done_callback(lambda _: self._running.pop(item.id, None))
        return task

    async def get(self, item: PromptItem) -> str | None:
        """The item's text, or None when there is no audio or no recognizer."""
        if (done := self._done.get(item.id)) is not None:
            return done
        task = self.start(item)
        return None if task is None else await asyncio.shield(task)

    def speculate(self, item: PromptItem) -> bool:
        """Begin recognizing a turn that is not committed yet, if the recognizer is
        idle; replaces an earlier speculation on the same item. Whether it began."""
        if self.recognizer is None or item.audio is None or not len(item.audio):
            return False
        if item.id in self._done or item.id in self._running:
            return False
        # The turn's own partial recognition holds the slot: this waits behind it
        # (the pause would otherwise find the recognizer busy almost every time).
        if not self.slot.idle and not (self._partial_of == item.id and self.slot.queued == 0):
            self.speculation.skipped_busy += 1
            return False
        self.discard(item.id)
        task = asyncio.get_running_loop().create_task(self._hear(item))
        self._speculative[item.id] = _Speculative(task, len(item.audio) / item.rate)
        self.speculation.started += 1
        return True

    async def speculative_text(self, item_id: str) -> str | None:
        """The text of `item_id`'s speculative recognition once done, without adopting
        it (the turn is not committed); None when there is none or it failed."""
        spec = self._speculative.get(item_id)
        if spec is None:
            return None
        try:
            return (await asyncio.shield(spec.task)).text
        except Exception:
            return None

    async def partial(self, item: PromptItem) -> Heard | None:
        """The text of a turn still being spoken (partial transcripts), recognized
        only on an idle recognizer, so never ahead of a committed turn or another
        session's work; None when busy."""
        if self.recognizer is None or item.audio is None or not len(item.audio):
            return None
        if not self.slot.idle:
            self.speculation.partials_skipped_busy += 1
            return None
        self.speculation.partials += 1
        self._partial_of = item.id
        try:
            return await self._hear(item)
        finally:
            if self._partial_of == item.id:
                self._partial_of = None

    def logprobs(self, item_id: str) -> tuple[TokenLogprob, ...] | None:
        """The token log-probabilities of `item_id`'s text, when its hint asked."""
        return self._logprobs.get(item_id)

    def discard(self, item_id: str) -> None:
        """Drop the speculative recognition of `item_id`, if any. A recognition
        already in the recognizer runs to its end (it cannot be interrupted) and
        holds its slot; its text is ignored."""
        spec = self._speculative.pop(item_id, None)
        if spec is None:
            return
        self.speculation.discarded += 1
        self.speculation.wasted_audio_s += spec.audio_s
        if not spec.task.done():
            self._abandoned.add(spec.task)
            spec.task.add_done_callback(self._abandoned.discard)
        spec.task.add_done_callback(_consume)

    async def _hear(self, item: PromptItem) -> Heard:
        recognizer = self.recognizer
        assert recognizer is not None and item.audio is not None
        hint = item.hint
        async with self.slot.slot():
            if hint is not None and hint.logprobs and hasattr(recognizer, "transcribe_scored"):
                scoring: ScoringRecognizer = recognizer  # type: ignore[assignment]
                return await asyncio.to_thread(
                    scoring.transcribe_scored, item.audio, item.rate, hint
                )
            text = await asyncio.to_thread(recognizer.transcribe, item.audio, item.rate, hint)
            return Heard(text)

    async def _recognize(self, item: PromptItem, asked: float) -> str:
        assert self.recognizer is not None and item.audio is not None
        heard = Heard("", ())
        if len(item.audio):
            heard = await self._hear(item)
            self._waited(item.id, asked, speculative=False)
            if self._on_recognized is not None:
                self._on_recognized(item.id)
        return self._keep(item.id, heard)

    async def _adopt(self, item: PromptItem, speculative: asyncio.Task[Heard], asked: float) -> str:
        """The committed turn's text from its speculative recognition: the same speech,
        with at most some silence after it; recognized afresh if that failed."""
        try:
            heard = await speculative
        except Exception:
            return await self._recognize(item, asked)
        self._waited(item.id, asked, speculative=True)
        if self._on_recognized is not None:
            self._on_recognized(item.id)
        return self._keep(item.id, heard)

    def _waited(self, item_id: str, asked: float, *, speculative: bool) -> None:
        self.waits[item_id] = Wait(max(0.0, self.clock() - asked), speculative)
        while len(self.waits) > self._cache:
            self.waits.popitem(last=False)

    def _keep(self, item_id: str, heard: Heard) -> str:
        self._done[item_id] = heard.text
        while len(self._done) > self._cache:
            self._done.popitem(last=False)
        if heard.logprobs is not None:
            self._logprobs[item_id] = heard.logprobs
            while len(self._logprobs) > self._cache:
                self._logprobs.popitem(last=False)
        return heard.text

    async def aclose(self) -> None:
        for item_id in list(self._speculative):
            self.discard(item_id)
        tasks = [*self._running.values(), *self._abandoned]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _consume(task: asyncio.Task[Heard]) -> None:
    """Retrieve a discarded speculation's outcome, so a failure is not reported as
    never retrieved."""
    if not task.cancelled():
        task.exception()
