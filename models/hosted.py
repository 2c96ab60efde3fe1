"""Assemble the executors whose language model runs elsewhere than the cascade's
(`vllm` in this process's vLLM engine, `openai_compat` on a server), around the
same speech stages as the embedded pipeline: Parley's synthesizer speaks the
replies, and its Whisper transcribes the user's turns for the client and for
history."""

from __future__ import annotations

import importlib.util
import logging

from models.audio_prompt import PROMPT_STYLES
from models.errors import ModelMissing
from models.openai_compat import BackendOptions, OpenAICompatExecutor
from models.speech.voice import VoiceOptions, make_recognizer, make_speaker
from models.vllm_engine import VLLM_FIX, VllmExecutor, VllmOptions

log = logging.getLogger(__name__)


def build_vllm(options: VllmOptions, voice: VoiceOptions) -> VllmExecutor:
    """Checks what can be checked without starting the engine (that happens in the
    app's lifespan, ~1 minute): vLLM is importable and the model is named."""
    if options.model in ("", "parley"):
        raise ModelMissing(
            "--executor vllm needs a model.",
            "pass --model PATH (a model directory or a Hugging Face id) or PARLEY_MODEL",
        )
    if options.prompt_style is not None and options.prompt_style not in PROMPT_STYLES:
        raise ModelMissing(f"Unknown prompt style {options.prompt_style}.", "use auto")
    if importlib.util.find_spec("vllm") is None:
        raise ModelMissing("vLLM is not installed.", VLLM_FIX)
    speaker = make_speaker(voice)
    return VllmExecutor(options, speaker, recognizer=make_recognizer(voice), owns_tts=True)


def build_openai_compat(options: BackendOptions, voice: VoiceOptions) -> OpenAICompatExecutor:
    if not options.urls:
        raise ModelMissing(
            "--executor openai_compat needs a backend.",
            "pass --backend-url http://HOST:PORT (repeatable) or PARLEY_BACKEND_URL=url1,url2",
        )
    bad = [u for u in options.urls if not u.startswith(("http://", "https://"))]
    if bad:
        raise ModelMissing(f"Backend URL {bad[0]} is not http(s).", "pass http://HOST:PORT")
    speaker = make_speaker(voice)
    log.info("openai_compat backends: %s", ", ".join(options.urls))
    return OpenAICompatExecutor(options, speaker, recognizer=make_recognizer(voice), owns_tts=True)
