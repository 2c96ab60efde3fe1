"""Assemble the embedded pipeline from settings."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.cascade.llm import Ct2LanguageModel, LanguageModel
from models.cascade.pipeline import CascadeExecutor
from models.cascade.remote_llm import RemoteLanguageModel, RemoteLLMOptions
from models.cascade.text import ChatMessage
from models.speech.asr import SpeechRecognizer
from models.speech.remote_asr import RemoteRecognizer
from models.speech.remote_tts import RemoteSynthesizer
from models.speech.tts import PiperSynthesizer, Synthesizer
from models.speech.voice import VoiceOptions, make_recognizer, make_synthesizer
from models.speech.whisper_files import WHISPER_RATE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CascadeOptions(VoiceOptions):
    """The voice, and the language model between hearing and speaking."""

    # A Llama, Qwen2 or Gemma GGUF (default: SmolLM2-135M); with `llm_url`, the name
    # of the model the server serves (default: the first it lists).
    llm_model: Path | None = None
    # The language model on OpenAI-compatible servers (replicas) instead of embedded.
    llm_url: tuple[str, ...] = ()
    llm_api_key: str | None = None
    llm_timeout_s: float = 60.0
    llm_context_tokens: int = 4096  # the server's context length, for the history
    max_output_tokens: int = 120
    max_sentences: int = 3  # a spoken answer's length (0: no limit)


def build_cascade(options: CascadeOptions) -> CascadeExecutor:
    """Load every stage (seconds; the first start also converts the LLM once); a
    remote stage is checked instead (models/speech/remote_asr.py, remote_tts.py,
    models/cascade/remote_llm.py)."""
    asr = make_recognizer(options)
    tts = make_synthesizer(options)  # before the language model: a bad URL fails fast
    llm = make_language_model(options)
    warm_up(asr, llm, tts)
    log.info("cascade ready: %s, %s, %s", asr.name, llm.name, tts.name)
    return CascadeExecutor(
        asr,
        llm,
        tts,
        concurrency=options.concurrency,
        max_output_tokens=options.max_output_tokens,
        max_sentences=options.max_sentences,
    )


def make_language_model(options: CascadeOptions) -> LanguageModel | RemoteLanguageModel:
    """The embedded model, or the remote one once its servers answered (raises
    ModelMissing naming the stage when they do not, or lack the model)."""
    if not options.llm_url:
        return Ct2LanguageModel(options.llm_model)
    remote = RemoteLanguageModel(
        RemoteLLMOptions(
            urls=options.llm_url,
            model=None if options.llm_model is None else str(options.llm_model),
            api_key=options.llm_api_key,
            read_timeout_s=options.llm_timeout_s,
            max_context_tokens=options.llm_context_tokens,
        )
    )
    remote.check()
    return remote


def warm_up(
    asr: SpeechRecognizer, llm: LanguageModel | RemoteLanguageModel, tts: Synthesizer
) -> float:
    """Run each embedded stage once before the first user does: the first call of
    each pays for lazy loading (Piper's worker process alone took 2.2 s), which would
    otherwise land on the first answer. (A remote stage was checked when made.)
    Returns the seconds it took."""
    began = time.monotonic()
    if not isinstance(asr, RemoteRecognizer):
        asr.transcribe(np.zeros(WHISPER_RATE, np.int16), WHISPER_RATE)
    if not isinstance(llm, RemoteLanguageModel):  # a server warms itself up
        for _ in llm.stream([ChatMessage("user", "Hi")], max_tokens=1, stop=threading.Event()):
            pass
    if isinstance(tts, PiperSynthesizer):
        tts.start()
    elif not isinstance(tts, RemoteSynthesizer):
        tts.synthesize("Ready.")
    took = time.monotonic() - began
    log.info("models warmed up in %.1f s", took)
    return took
