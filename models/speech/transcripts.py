"""The text of user audio turns: Parley's own recognizer, run once per item however
many callers ask (the turn's preparation, the client's transcription events, a
response), kept in a bounded cache for later prompts."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping

from models.base import PromptItem
from models.speech.asr import SpeechRecognizer
from models.speech.slots import StageSlots


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
    ) -> None:
        self.recognizer = recognizer
        self.slot = slot if slot is not None else StageSlots("asr", 1)
        self._done: OrderedDict[str, str] = OrderedDict()
        self._running: dict[str, asyncio.Task[str]] = {}
        self._cache = cache
        self._on_recognized = on_recognized  # item id, after audio was recognized

    @property
    def known(self) -> Mapping[str, str]:
        return self._done

    def start(self, item: PromptItem) -> asyncio.Task[str] | None:
        """Begin recognizing a user audio item (once), without waiting for it."""
        if self.recognizer is None or item.audio is None or item.id in self._done:
            return None
        task = self._running.get(item.id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._recognize(item))
            self._running[item.id] = task
            task.add_done_callback(lambda _: self._running.pop(item.id, None))
        return task

    async def get(self, item: PromptItem) -> str | None:
        """The item's text, or None when there is no audio or no recognizer."""
        if (done := self._done.get(item.id)) is not None:
            return done
        task = self.start(item)
        return None if task is None else await asyncio.shield(task)

    async def _recognize(self, item: PromptItem) -> str:
        assert self.recognizer is not None and item.audio is not None
        text = ""
        if len(item.audio):
            async with self.slot.slot():
                text = await asyncio.to_thread(self.recognizer.transcribe, item.audio, item.rate)
            if self._on_recognized is not None:
                self._on_recognized(item.id)
        self._done[item.id] = text
        while len(self._done) > self._cache:
            self._done.popitem(last=False)
        return text

    async def aclose(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
