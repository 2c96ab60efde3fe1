"""Speech recognition on a remote server: any OpenAI-compatible
`POST /v1/audio/transcriptions` (vLLM serving Whisper, faster-whisper servers).

A turn goes as a 16-bit mono WAV in a multipart form with the model, the language
and an optional prompt; the answer is JSON `{"text": ...}`. It implements the same
blocking `SpeechRecognizer` as the embedded Whisper, so the pipeline and speculative
recognition (models/speech/transcripts.py) use it unchanged, from worker threads
sharing one connection pool. Retries and failover: models/remote_http.py.
"""

from __future__ import annotations

import io
import json
import wave

import httpx
import numpy as np

from models.base import SpeechHint
from models.remote_http import (
    RemoteError,
    RemoteOptions,
    RemoteStage,
    StageFixes,
    status_error,
    transport_error,
)

ASR_FIXES = StageFixes(
    unreachable="check --asr-url (PARLEY_ASR_URL) and that the server is up, or unset it",
    key="set PARLEY_ASR_API_KEY",
    model="name the model: PARLEY_ASR_SERVER_MODEL",
)


def wav_bytes(pcm: np.ndarray, rate: int) -> bytes:
    """int16 mono `pcm` at `rate` as a WAV file (servers resample it themselves)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(np.asarray(pcm, dtype="<i2").tobytes())
    return out.getvalue()


def transcript_text(who: str, body: bytes) -> str:
    """The `text` of a transcription answer; a RemoteError for anything else."""
    try:
        text = json.loads(body)["text"]
    except (ValueError, KeyError, TypeError):
        shown = body[:200].decode(errors="replace")
        raise RemoteError(f"{who} sent no transcription: {shown!r}") from None
    if not isinstance(text, str):
        raise RemoteError(f"{who} sent a transcription that is not text")
    return text.strip()


class RemoteRecognizer(RemoteStage):
    """A `SpeechRecognizer` over HTTP. `model` is checked at start (`served_model`)."""

    endpoint = "/audio/transcriptions"

    def __init__(
        self, options: RemoteOptions, *, language: str = "en", prompt: str = "", check: bool = True
    ) -> None:
        super().__init__(options, ASR_FIXES, check=check)
        self.language = language
        self.prompt = prompt
        self._client = httpx.Client(
            timeout=options.timeout(), headers=options.headers(), limits=options.limits()
        )

    def transcribe(self, pcm: np.ndarray, rate: int, hint: SpeechHint | None = None) -> str:
        if len(pcm) < rate // 10:
            return ""  # as the embedded Whisper: nothing to hear in under 0.1 s
        form = self.form(hint)
        wav = wav_bytes(pcm, rate)
        tries = self.replicas.attempts()
        for url in tries:
            with tries.retrying(url):
                return self._attempt(url, wav, form)
        raise tries.gave_up()

    def form(self, hint: SpeechHint | None) -> dict[str, str]:
        """The request's fields: the session's language and prompt (its
        `audio.input.transcription`) over the stage's own."""
        language = (hint.language if hint is not None else None) or self.language
        prompt = (hint.prompt if hint is not None else None) or self.prompt
        form = {"model": self.model, "language": language, "response_format": "json"}
        if prompt:
            form["prompt"] = prompt
        return form

    def _attempt(self, url: str, wav: bytes, form: dict[str, str]) -> str:
        files = {"file": ("turn.wav", wav, "audio/wav")}
        try:
            response = self._client.post(self.endpoint_of(url), data=form, files=files)
        except httpx.HTTPError as exc:
            raise transport_error(self.options, url, exc) from None
        if response.status_code >= 400:
            raise status_error(self.options, url, response.status_code, response.content)
        return transcript_text(self.options.server(url), response.content)

    def close(self) -> None:
        self._client.close()
