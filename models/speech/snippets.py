"""Hears held speech for qualified interruption (engine/interruption.py): Whisper
tiny.en, beam 1 (a snippet is a few words), on a worker thread of its own, loaded on
first use so a server whose sessions never hold speech never pays for it."""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from models.base import PCM_RATE
from models.speech.asr import SpeechRecognizer, WhisperRecognizer

log = logging.getLogger(__name__)


class WhisperSnippets:
    """`SnippetRecognizer` (structurally: models do not import engine)."""

    def __init__(self, recognizer: SpeechRecognizer | None = None) -> None:
        self._recognizer = recognizer
        self._lock = threading.Lock()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snippets")
        self._warned = False

    def _hear(self, pcm: npt.NDArray[np.int16]) -> str:
        with self._lock:
            if self._recognizer is None:
                self._recognizer = WhisperRecognizer("tiny.en", beam_size=1, threads=1)
        return self._recognizer.transcribe(pcm, PCM_RATE)

    async def transcribe(self, pcm: npt.NDArray[np.int16]) -> str | None:
        """The snippet's words ("" for none); None when it cannot be heard (the
        session then lets the speech interrupt rather than swallow it)."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._thread, self._hear, pcm)
        except Exception as exc:
            if not self._warned:
                self._warned = True
                log.warning("hearing held speech failed (%s); it interrupts unheard", exc)
            return None

    def close(self) -> None:
        self._thread.shutdown(wait=False)
