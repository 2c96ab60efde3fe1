"""Speech synthesis on a remote server: any OpenAI-compatible `POST /v1/audio/speech`
(vLLM-Omni, Kokoro and other speech servers) asked for `response_format: "pcm"`,
whose answer is raw 24 kHz 16-bit mono PCM, streamed.

The session's voice (OpenAI's names: alloy, ash, ...) becomes one of the server's by
a table the operator writes (`voice_for`). The pipeline reads `synthesize_stream`
in its event loop and plays each piece as it arrives, so a sentence's first words
are heard while the server speaks the rest, and a barge-in that closes the response
leaves `client.stream` and closes the request in flight: the server stops speaking a
sentence nobody will hear. The blocking `synthesize` (the `Synthesizer` protocol) is
for callers outside a response (warm-up). Retries and failover: models/remote_http.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Mapping

import httpx
import numpy as np

from models.remote_http import (
    RemoteError,
    RemoteOptions,
    RemoteStage,
    StageFixes,
    status_error,
    transport_error,
)
from models.speech.tts import EMPTY, speakable_line

TTS_FIXES = StageFixes(
    unreachable="check --tts-url (PARLEY_TTS_URL) and that the server is up, or unset it",
    key="set PARLEY_TTS_API_KEY",
    model="name the model: PARLEY_TTS_SERVER_MODEL",
)
# What `response_format: "pcm"` means in OpenAI's API: 24 kHz, 16-bit, mono.
OPENAI_PCM_RATE = 24_000


def voice_table(entries: list[str]) -> dict[str, str]:
    """`["alloy=af_bella", "*=af_heart"]` as a mapping; `*` is any other voice."""
    table: dict[str, str] = {}
    for entry in entries:
        session, sep, server = (part.strip() for part in entry.partition("="))
        if not sep or not session or not server:
            raise ValueError(f"a voice table entry is SESSION_VOICE=SERVER_VOICE, not {entry!r}")
        table[session] = server
    return table


def voice_for(table: Mapping[str, str], session_voice: str) -> str:
    """The server's voice for a session's: its entry, else `*`'s, else the same name
    (OpenAI-compatible servers that know OpenAI's voices)."""
    return table.get(session_voice) or table.get("*") or session_voice or "alloy"


def joined(pieces: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(pieces) if pieces else EMPTY


class RemoteSynthesizer(RemoteStage):
    """A `Synthesizer` over HTTP, with the async variant the pipeline uses."""

    sample_rate = OPENAI_PCM_RATE
    endpoint = "/audio/speech"

    def __init__(
        self,
        options: RemoteOptions,
        *,
        voices: Mapping[str, str] | None = None,
        speed: float = 1.0,
        check: bool = True,
    ) -> None:
        super().__init__(options, TTS_FIXES, check=check)
        self.voices = dict(voices or {})
        self.speed = speed
        self._client: httpx.AsyncClient | None = None  # made in the loop that uses it

    def _new_client(self) -> httpx.AsyncClient:
        o = self.options
        return httpx.AsyncClient(timeout=o.timeout(), headers=o.headers(), limits=o.limits())

    def open_client(self) -> None:
        """The pooled client, made in the loop that will use it (`open_clients`)."""
        if self._client is None:
            self._client = self._new_client()

    def synthesize_stream(self, text: str, voice: str = "") -> AsyncGenerator[np.ndarray, None]:
        """The sentence's audio at 24 kHz, piece by piece as the server sends it;
        closing this (a barge-in) closes the request."""
        self.open_client()
        assert self._client is not None
        return self._stream(self._client, text, voice)

    async def synthesize_async(self, text: str, voice: str = "") -> np.ndarray:
        """The sentence's audio at 24 kHz, whole; cancelling the caller closes the
        request."""
        return joined([piece async for piece in self.synthesize_stream(text, voice)])

    def synthesize(self, text: str) -> np.ndarray:
        async def once() -> np.ndarray:
            async with self._new_client() as client:
                return joined([piece async for piece in self._stream(client, text, "")])

        return asyncio.run(once())

    async def _stream(
        self, client: httpx.AsyncClient, text: str, voice: str
    ) -> AsyncGenerator[np.ndarray, None]:
        line = speakable_line(text)
        if not line:
            return
        body = {
            "model": self.model,
            "input": line,
            "voice": voice_for(self.voices, voice),
            "response_format": "pcm",
            "speed": self.speed,
        }
        tries = self.replicas.attempts()
        for url in tries:
            with tries.retrying(url):
                attempt = self._attempt(client, url, body)
                async with contextlib.aclosing(attempt):
                    async for piece in attempt:
                        yield piece
                return
        raise tries.gave_up()

    async def _attempt(
        self, client: httpx.AsyncClient, url: str, body: dict[str, object]
    ) -> AsyncGenerator[np.ndarray, None]:
        """One request to one replica, its pcm as it arrives: retryable until the
        first bytes of audio."""
        who = self.options.server(url)
        heard = False
        odd = b""  # a sample split between two chunks
        try:
            async with client.stream("POST", self.endpoint_of(url), json=body) as answer:
                if answer.status_code >= 400:
                    raise status_error(self.options, url, answer.status_code, await answer.aread())
                kind = answer.headers.get("content-type", "")
                if kind.startswith(("text/", "application/json")):
                    shown = (await answer.aread())[:200].decode(errors="replace")
                    raise RemoteError(f"{who} sent {kind}, not pcm audio: {shown!r}")
                async for chunk in answer.aiter_bytes():
                    data = odd + chunk
                    whole = len(data) - len(data) % 2
                    odd = data[whole:]
                    if whole:
                        heard = True
                        yield np.frombuffer(data[:whole], dtype="<i2").astype(np.int16)
        except httpx.HTTPError as exc:
            # Part of the sentence heard: not tried again elsewhere.
            raise transport_error(self.options, url, exc, heard=heard) from None
        if odd:
            raise RemoteError(f"{who} sent an odd number of bytes, not 16-bit pcm")

    def close(self) -> None:
        # The pool's connections close with the process; a client made in a loop
        # cannot be closed from another thread.
        self._client = None
