"""A model behind any OpenAI-compatible server (`--executor openai_compat`).

`vllm serve`, vLLM-Omni and others answer `/v1/chat/completions`; Parley sends the
conversation with the user's turns as `input_audio` parts (16 kHz WAV, base64) and
reads the answer as it streams (SSE). A user message's images go beside its text
and audio as `image_url` parts (data: URLs) when the deployer says the served model
sees (`vision`; Parley cannot tell); otherwise the engine refuses them. When the
backend returns audio (vLLM-Omni or OpenAI with `modalities: ["text", "audio"]`,
asked for with `audio_output`), that audio is played; otherwise Parley's own TTS
stage speaks the text sentence by sentence.

Failures end the response `failed` with a message saying which backend did what;
the session lives on. Until the first byte of an answer, a failed attempt (refused,
timed out, 5xx, 429, a stream that died empty) is retried, on the next backend when
there are several. Once part of an answer was heard it is not retried.

Several backend URLs: each session sticks to one, and a backend that failed is
passed over for a while (models/chat_backends.py). An abort cancels the reading
task, which closes the HTTP stream: vLLM aborts a request whose stream is closed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import time
import wave
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.audio_prompt import MODEL_RATE, STYLES, AudioPrompt, Turn, build_audio_prompt
from models.base import PCM_RATE, FunctionCall, OutputChunk, Prompt
from models.chat_backends import (
    Attempt,
    Server,
    ServerOptions,
    event_data,
    parse_event,
    session_key,
)

# Where its tests find them.
from models.chat_backends import CallParts as _CallParts
from models.chat_backends import function_calls as function_calls
from models.chat_backends import merge_tool_call_deltas as merge_tool_call_deltas
from models.context import PromptTokens, answer_tokens, count_prompt
from models.remote_http import RemoteError, Retryable, api_base, listed_models
from models.remote_http import rendezvous as rendezvous
from models.speech.asr import SpeechRecognizer
from models.speech.audio import resample_int16
from models.speech.speaker import Speaker
from models.speech.tts import wav_samples
from models.text_then_speech import RequestState, TextThenSpeechExecutor, TextThenSpeechStats
from models.tool_text import tool_schema

# pcm16 audio deltas of the OpenAI API: the engine's rate, so they pass through as is.
OPENAI_AUDIO_RATE = PCM_RATE


@dataclass(frozen=True)
class BackendOptions(ServerOptions):
    max_output_tokens: int = 256
    temperature: float = 0.7
    max_context_tokens: int = 8192  # the backend's context length, for the history
    max_audio_items: int = 1  # audio parts per request (vLLM: --limit-mm-per-prompt)
    audio_output: bool = False  # ask the backend for speech (vLLM-Omni, OpenAI)
    vision: bool = False  # the served model sees images (a vision-language model)
    voice: str = "alloy"


def wav_base64(audio: np.ndarray) -> str:
    """float32 16 kHz mono as a base64 16-bit WAV file."""
    pcm = np.clip(np.rint(audio * 32768.0), -32768, 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(MODEL_RATE)
        wav.writeframes(pcm.tobytes())
    return base64.b64encode(out.getvalue()).decode("ascii")


def chat_messages(prompt: AudioPrompt) -> list[dict[str, Any]]:
    """The audio prompt as OpenAI chat messages (the server applies its template).
    Function calls go as the assistant's `tool_calls` (consecutive calls in one
    message) and their results as `tool` messages; a result whose call is not in the
    prompt (cut from the history) goes as the user's text."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": prompt.system}]
    called: set[str] = set()
    for turn in prompt.turns:
        tool = turn.tool
        if tool is not None and tool.output is None:  # a call
            call = {
                "id": tool.call_id,
                "type": "function",
                "function": {"name": tool.name, "arguments": tool.arguments or "{}"},
            }
            last = messages[-1]
            if last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            called.add(tool.call_id)
        elif tool is not None and tool.call_id in called:  # its result
            messages.append({"role": "tool", "tool_call_id": tool.call_id, "content": tool.output})
        elif turn.audio is not None or turn.images:
            messages.append({"role": turn.role, "content": content_parts(turn)})
        else:
            messages.append({"role": turn.role, "content": turn.text})
    return messages


def content_parts(turn: Turn) -> list[dict[str, Any]]:
    """A user turn with audio or images as chat content parts: its text, its images
    (data: URLs, as the client sent them), its audio."""
    parts: list[dict[str, Any]] = []
    if turn.text:
        parts.append({"type": "text", "text": turn.text})
    for image in turn.images:
        url = {"url": image.data_url, "detail": image.detail}
        parts.append({"type": "image_url", "image_url": url})
    if turn.audio is not None:
        audio = {"data": wav_base64(turn.audio), "format": "wav"}
        parts.append({"type": "input_audio", "input_audio": audio})
    return parts


def chat_tool_choice(choice: str) -> str | dict[str, Any]:
    """`auto`, `required` (`none` sends no tools at all), or one function by name."""
    if choice in ("auto", "required", "none"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def chat_tools(prompt: Prompt) -> dict[str, Any]:
    """The request's `tools`, `tool_choice` and `parallel_tool_calls` (none for
    `tool_choice` "none"), and the session's `reasoning_effort` where it set one."""
    extra: dict[str, Any] = {}
    if prompt.reasoning_effort is not None:
        extra["reasoning_effort"] = prompt.reasoning_effort
    if not prompt.tools or prompt.tool_choice == "none":
        return extra
    if prompt.parallel_tool_calls is not None:
        extra["parallel_tool_calls"] = prompt.parallel_tool_calls
    return extra | {
        "tools": [tool_schema(t) for t in prompt.tools],
        "tool_choice": chat_tool_choice(prompt.tool_choice),
    }


def decode_audio(data: str) -> np.ndarray:
    """An audio delta: a WAV file, or raw pcm16 at 24 kHz (OpenAI's format)."""
    raw = base64.b64decode(data)
    if raw[:4] == b"RIFF":
        rate, pcm = wav_samples(raw)
        return resample_int16(pcm, rate, OPENAI_AUDIO_RATE)
    usable = len(raw) - len(raw) % 2
    return np.frombuffer(raw[:usable], dtype="<i2").astype(np.int16)


@dataclass
class _Delta:
    text: str = ""
    audio: np.ndarray | None = None
    finish: str | None = None
    calls: list[FunctionCall] = field(default_factory=list)  # the reply's, at its end


@dataclass
class _Request(RequestState):
    reader: asyncio.Task[None] | None = None
    queue: asyncio.Queue[_Delta | BaseException | None] = field(default_factory=asyncio.Queue)
    backend: str | None = None
    calls: dict[int, _CallParts] = field(default_factory=dict)  # streamed tool calls


@dataclass
class BackendStats(TextThenSpeechStats):
    chosen: dict[str, str] = field(default_factory=dict)  # request id → backend URL
    attempts: dict[str, int] = field(default_factory=dict)


class OpenAICompatExecutor(TextThenSpeechExecutor[_Request]):
    name = "openai_compat"
    stats: BackendStats

    def __init__(
        self,
        options: BackendOptions,
        speaker: Speaker,
        *,
        recognizer: SpeechRecognizer | None = None,
        owns_tts: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not options.urls:
            raise ValueError("openai_compat needs at least one backend URL")
        super().__init__(speaker, recognizer=recognizer, owns_tts=owns_tts)
        self.options = options
        self.sees_images = options.vision
        self.stats = BackendStats()
        self.server = Server(options, clock)
        self.replicas = self.server.replicas
        self._models: dict[str, str] = {}
        self._finish: dict[str, str] = {}  # request id → the backend's finish_reason

    # --- backends ---------------------------------------------------------------------

    def open_client(self) -> None:
        self.server.open_client()

    def order(self, prompt: Prompt) -> list[str]:
        """Backends to try for this request: the session's own first, healthy ones
        before those that failed lately."""
        return self.replicas.order(prompt.session_id or session_key(prompt.request_id))

    async def _model(self, attempt: Attempt) -> str:
        """The model to ask for: the configured one, else the first the replica lists
        (asked once per replica, when it is first used)."""
        if self.options.model is not None:
            return self.options.model
        url = attempt.url
        if url not in self._models:
            response = await self.server.http().get(api_base(url) + "/models")
            if response.status_code >= 400:
                raise Retryable(f"{attempt.who} listed no models (HTTP {response.status_code})")
            try:
                listed = listed_models(response.json())
            except ValueError:
                listed = []
            if not listed:
                raise RemoteError(f"{attempt.who} serves no model")
            self._models[url] = listed[0]
        return self._models[url]

    # --- executor ---------------------------------------------------------------------

    def context_limit(self, prompt: Prompt) -> int | None:
        o = self.options
        return o.max_context_tokens - answer_tokens(prompt, o.max_output_tokens)

    def prompt_tokens(self, prompt: Prompt) -> PromptTokens:
        """Estimated: the backend's tokenizer is on its server."""
        rate = STYLES["qwen2_audio"].audio_tokens_per_s  # the style `body` counts in
        return count_prompt(prompt, transcripts=self.transcripts.known, audio_tokens_per_s=rate)

    def body(self, prompt: Prompt, model: str) -> dict[str, Any]:
        o = self.options
        limit = answer_tokens(prompt, self.options.max_output_tokens)
        audio_prompt = build_audio_prompt(
            prompt,
            style="qwen2_audio",  # for counting only: the server renders the template
            budget=o.max_context_tokens - limit,
            transcripts=self.transcripts.known,
            max_audio=o.max_audio_items,
        )
        body: dict[str, Any] = {
            "model": model,
            "messages": chat_messages(audio_prompt),
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": limit,
            "temperature": o.temperature,
        }
        body |= chat_tools(prompt)
        if o.audio_output and "audio" in prompt.output_modalities:
            body["modalities"] = ["text", "audio"]
            body["audio"] = {"voice": o.voice, "format": "pcm16"}
        return body

    async def _generate(self, prompt: Prompt) -> AsyncGenerator[OutputChunk, None]:
        request_id = prompt.request_id
        if self._aborted_before_start(request_id):
            return
        state = self._begin(request_id, _Request())
        state.reader = asyncio.get_running_loop().create_task(self._read(prompt, state))
        try:
            deltas = self._deltas(state)
            async with contextlib.aclosing(deltas):
                first = await anext(deltas, None)
                if first is None:
                    return
                if first.audio is not None or "audio" not in prompt.output_modalities:
                    # The backend speaks (or no speech is wanted): pass it through.
                    async for chunk in self._passthrough(first, deltas, prompt, state):
                        yield chunk
                    return

                calls: list[FunctionCall] = []

                async def texts() -> AsyncGenerator[str, None]:
                    calls.extend(first.calls)
                    yield first.text
                    async for delta in deltas:
                        calls.extend(delta.calls)
                        yield delta.text

                async with contextlib.aclosing(self._speak(texts(), prompt, state)) as spoken:
                    async for chunk in spoken:
                        yield chunk
                for call in calls:  # after what was said before them
                    if not state.aborted:
                        yield OutputChunk(function_call=call)
                if self._finish.get(request_id) == "length" and not state.aborted:
                    yield OutputChunk(finish="length")
        finally:
            await self._stop_reader(state)
            self._requests.pop(request_id, None)
            self._finish.pop(request_id, None)

    async def _passthrough(
        self, first: _Delta, deltas: AsyncIterator[_Delta], prompt: Prompt, state: _Request
    ) -> AsyncGenerator[OutputChunk, None]:
        speak = "audio" in prompt.output_modalities
        delta: _Delta | None = first
        while delta is not None:
            if state.aborted:
                return
            audio = delta.audio if speak else None
            if audio is not None and len(audio):
                self.stats.mark(prompt.request_id, "first_audio")
            if delta.text or audio is not None:
                yield OutputChunk(audio=audio, text=delta.text)
            for call in delta.calls:
                yield OutputChunk(function_call=call)
            delta = await anext(deltas, None)
        if self._finish.get(prompt.request_id) == "length" and not state.aborted:
            yield OutputChunk(finish="length")

    async def _deltas(self, state: _Request) -> AsyncGenerator[_Delta, None]:
        while True:
            item = await state.queue.get()
            if item is None or state.aborted:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def _stop_reader(self, state: _Request) -> None:
        reader = state.reader
        if reader is not None and not reader.done():
            reader.cancel()  # leaving `client.stream` closes the connection
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(reader)

    async def _read(self, prompt: Prompt, state: _Request) -> None:
        """Every attempt of one request, deltas into `state.queue`; the outcome
        (None, or the error) last."""
        request_id = prompt.request_id
        self._time_llm(state, request_id, "remote")
        try:
            tries = self.replicas.attempts(prompt.session_id or session_key(request_id))
            for number, url in enumerate(tries, 1):
                state.backend = url
                self.stats.chosen[request_id] = url
                self.stats.attempts[request_id] = number
                with tries.retrying(url):
                    await self._attempt(Attempt(self.options, url), prompt, state)
                    if state.llm is not None:
                        state.llm.reached("total")
                    state.queue.put_nowait(None)
                    return
            raise tries.gave_up()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            state.queue.put_nowait(exc)

    async def _attempt(self, attempt: Attempt, prompt: Prompt, state: _Request) -> None:
        """One request to one backend. Raises Retryable while nothing was heard."""
        state.calls.clear()  # a retry starts the reply over
        with attempt.failures():
            body = self.body(prompt, await self._model(attempt))
            endpoint = api_base(attempt.url) + "/chat/completions"
            async with self.server.http().stream("POST", endpoint, json=body) as response:
                await attempt.check_status(response)
                done = False
                async for data in event_data(response):
                    if data is None:
                        done = True
                        break
                    delta = self._parse(attempt.who, data, prompt.request_id, state)
                    if delta is None:
                        continue
                    # A call begun: no retry elsewhere.
                    attempt.heard = attempt.heard or bool(state.calls)
                    if delta.text or delta.audio is not None:
                        attempt.heard = True
                        self.stats.mark(prompt.request_id, "first_token")
                        state.queue.put_nowait(delta)
                    if attempt.heard and state.llm is not None:
                        state.llm.reached("first_token")
                if not done:
                    raise attempt.broken("closed the stream before the answer ended")
                if calls := function_calls(state.calls, prompt.request_id):
                    state.queue.put_nowait(_Delta(calls=calls))

    def _parse(self, who: str, data: str, request_id: str, state: _Request) -> _Delta | None:
        event = parse_event(who, data)
        choices = event.get("choices") or []
        if not choices:
            return None  # the usage event
        choice = choices[0]
        if reason := choice.get("finish_reason"):
            self._finish[request_id] = reason
        delta = choice.get("delta") or {}
        if tool_calls := delta.get("tool_calls"):
            merge_tool_call_deltas(state.calls, tool_calls)
        audio_part = delta.get("audio") or {}
        text = delta.get("content") or audio_part.get("transcript") or ""
        audio = decode_audio(audio_part["data"]) if audio_part.get("data") else None
        return _Delta(text=text, audio=audio)

    async def _abort_started(self, request_id: str, state: _Request) -> None:
        state.aborted = True
        self.stats.aborted.append(request_id)
        await self._stop_reader(state)
        state.queue.put_nowait(None)

    async def aclose(self) -> None:
        for state in list(self._requests.values()):
            state.aborted = True
            await self._stop_reader(state)
        await self.server.aclose()
        await super().aclose()
