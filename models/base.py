"""The executor interface: what the engine asks of a model.

Shaped by what vLLM can do: prepare a committed input turn ahead of the response
(transcribe it, extract features, submit it), start a response for an immutable
snapshot of the conversation and stream its chunks, abort a request by id.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from models.stage_timing import StageTiming, StageTimings

if TYPE_CHECKING:
    from models.context import PromptTokens
    from models.remote_http import Replicas

# The rate the engine and the executors exchange audio at: int16 mono, 24 kHz.
PCM_RATE = 24_000

ItemKind = Literal["message", "function_call", "function_call_output"]


@dataclass(frozen=True)
class SpeechHint:
    """What the session's `audio.input.transcription` tells the recognizer about
    the user's speech: its language (ISO-639-1) and a prompt of likely words."""

    language: str | None = None
    prompt: str | None = None
    logprobs: bool = False  # the client's `include` asks for the tokens' log-probabilities


@dataclass(frozen=True)
class TokenLogprob:
    """One token of a transcript and the log-probability the recognizer gave it."""

    token: str  # its text; "" for a token holding only part of a character
    logprob: float
    raw: bytes | None = None  # the token's own bytes, when they are not its text's


@dataclass(frozen=True)
class Heard:
    """A recognition: its text and, when asked for and the recognizer gives them, its
    tokens' log-probabilities (their texts concatenated are the text, spaces and all)."""

    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None


ImageDetail = Literal["auto", "low", "high"]


@dataclass(frozen=True)
class PromptImage:
    """An image a user message shows: a `data:` URL of a PNG, JPEG, WEBP or GIF
    whose bytes the engine checked (never a URL to fetch), and the client's `detail`."""

    data_url: str
    detail: ImageDetail = "auto"


@dataclass(frozen=True)
class PromptItem:
    id: str
    role: Literal["user", "assistant", "system"]
    audio: np.ndarray | None = None  # int16 mono at `rate`
    rate: int = PCM_RATE
    text: str | None = None  # typed text, or the transcript of audio
    kind: ItemKind = "message"
    call_id: str | None = None  # function_call and function_call_output
    name: str | None = None  # function_call
    arguments: str | None = None  # function_call, JSON text
    output: str | None = None  # function_call_output
    hint: SpeechHint | None = None  # user audio: the session's transcription settings
    images: tuple[PromptImage, ...] = ()  # user messages, for executors that `sees_images`


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: str = "{}"  # JSON schema, as JSON text (keeps the dataclass frozen)


@dataclass(frozen=True)
class Prompt:
    request_id: str
    instructions: str
    items: tuple[PromptItem, ...]
    output_modalities: tuple[Literal["text", "audio"], ...] = ("audio",)
    max_output_tokens: int | None = None
    tools: tuple[Tool, ...] = ()
    # "auto", "none", "required", or the name of the one function to call
    tool_choice: str = "auto"
    # The session asking; executors that spread sessions over backends stick to it.
    session_id: str = ""
    # The session's voice (OpenAI's names); a remote synthesizer maps it to its own.
    voice: str = ""
    # The session's `parallel_tool_calls` and `reasoning.effort` (None: not set), for
    # chat backends (models/openai_compat.py chat_tools); embedded models ignore them.
    parallel_tool_calls: bool | None = None
    reasoning_effort: str | None = None


@dataclass(frozen=True)
class PromptKey:
    """What the answer to a prompt depends on. Two prompts share it iff an answer
    begun for one (`Executor.answer_early`, before its turn was committed) may be
    adopted for the other: the same settings, the same items before the last as
    the model reads them, and the last (the turn, committed since with some silence
    more) by id and role."""

    settings: Prompt  # the prompt without its request id and items
    earlier: tuple[tuple[PromptItem, int | None], ...]  # each item, its audio's length
    turn: tuple[str, str] | None  # id and role of the last item


def prompt_key(prompt: Prompt) -> PromptKey:
    items = prompt.items
    return PromptKey(
        settings=replace(prompt, request_id="", items=()),
        earlier=tuple(_item_key(item) for item in items[:-1]),
        turn=(items[-1].id, items[-1].role) if items else None,
    )


def _item_key(item: PromptItem) -> tuple[PromptItem, int | None]:
    """An item with audio counts it by length, and not its text: the transcript of
    the audio may have arrived since."""
    if item.audio is None:
        return item, None
    return replace(item, audio=None, text=None), len(item.audio)


@dataclass(frozen=True)
class FunctionCall:
    name: str
    arguments: str  # JSON text
    call_id: str


@dataclass(frozen=True)
class OutputChunk:
    """A piece of a response. Text that comes with audio is its transcript. A
    function call comes whole. `finish="length"` on the last chunk says the reply
    was cut at `max_output_tokens`."""

    audio: np.ndarray | None = None  # int16 mono at the executor's output_rate
    text: str = ""
    function_call: FunctionCall | None = None
    finish: Literal["length"] | None = None


@dataclass
class ExecutorStats:
    """time.monotonic() of milestones by request or item id ("started",
    "first_token", "first_audio" of a response), the first time each is reached.
    For benchmarks and tests; executors add their own counters."""

    marks: dict[str, dict[str, float]] = field(default_factory=dict)
    # Tokens the model generated per response, where the executor counts them.
    tokens_by_request: dict[str, int] = field(default_factory=dict)
    # Each stage's time on the way to the user, by request, until the engine takes them.
    timings: StageTimings = field(default_factory=StageTimings)

    def mark(self, key: str, milestone: str) -> None:
        self.marks.setdefault(key, {}).setdefault(milestone, time.monotonic())

    def share_marks(self, key: str, with_key: str) -> None:
        """`key`'s marks are `with_key`'s, past and future (a response that adopted a
        speculative one)."""
        self.marks[key] = self.marks.setdefault(with_key, {})
        self.timings.share(key, with_key)

    def adopted(self, key: str, model_key: str) -> None:
        """A response (`key`) that adopted the speculative one the model ran as
        `model_key` has ended: its counters are that one's."""
        if model_key in self.tokens_by_request:
            self.tokens_by_request[key] = self.tokens_by_request[model_key]


class Executor(ABC):
    name: str = "executor"
    output_rate: int = PCM_RATE
    stats: ExecutorStats  # set by each executor
    # The model reads `PromptItem.images`; otherwise the engine refuses a user
    # message's images, so no prompt ever holds one the model would not see.
    sees_images: bool = False

    @property
    def queued(self) -> int:
        """Model calls waiting for a free slot (shown by /healthz)."""
        return 0

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Load the model or reach it before serving; the app's lifespan calls it
        (an engine that spawns processes must start inside the running loop)."""

    async def prepare(self, item: PromptItem) -> None:  # noqa: B027 - optional hook
        """Work on a committed user turn before a response needs it."""

    def prepare_early(self, item: PromptItem) -> None:  # noqa: B027 - optional hook
        """`prepare` begun on a user turn that is not committed yet (e.g. its
        transcription): the session calls it at a pause that may end the turn. Never
        emits anything; if the turn then commits with no more speech, `prepare` (and
        `transcribe`) of the committed item, which has the same id, may use the work;
        if the user goes on, the session calls `discard_speculation`."""

    def answer_early(self, prompt: Prompt) -> None:  # noqa: B027 - optional hook
        """Begin the response to a turn that is not committed yet (the last item of
        `prompt`, after `prepare_early` of it) when the pause looks final; never
        emits anything. The response asked for once the turn commits may adopt it in
        `generate` if its prompt has the same `prompt_key`."""

    async def speculative_text(self, item_id: str) -> str | None:
        """The transcript of `prepare_early`'s recognition of `item_id` once done
        (None: none, e.g. no recognizer here, or recognition was busy)."""
        return None

    def model_request_id(self, request_id: str) -> str:
        """The id the model knows response `request_id` by while it runs: the early
        answer's own when the response adopted one (`answer_early`)."""
        return request_id

    def discard_speculation(self, item_id: str) -> None:  # noqa: B027 - optional hook
        """Throw away `prepare_early`'s (and `answer_early`'s) work on `item_id`:
        the turn went on, or was dropped."""

    @abstractmethod
    def generate(self, prompt: Prompt) -> AsyncGenerator[OutputChunk, None]:
        """Stream the response to `prompt`; stops early once aborted. The engine
        closes the generator (`aclose`) however the response ends."""

    @abstractmethod
    async def abort(self, request_id: str) -> None:
        """Stop the request at the model (cancelling the consumer alone may not)."""

    def stage_timings(self, request_id: str) -> list[StageTiming]:
        """Response `request_id`'s stage timings so far (models/stage_timing.py), once:
        the engine takes them as the response ends."""
        return self.stats.timings.take(request_id)

    async def transcribe(self, item: PromptItem) -> str | None:
        """The text of a user audio item for the client's input transcription
        events, or None when this executor cannot transcribe."""
        return None

    def context_limit(self, prompt: Prompt) -> int | None:
        """The tokens `prompt` may take: the model's context length less what its
        answer may take. None: not known here, so the session's `truncation` cuts
        nothing for the context (its `token_limits.post_instructions` still does)."""
        return None

    def prompt_tokens(self, prompt: Prompt) -> PromptTokens:
        """The tokens each part of `prompt` takes (models/context.py): exact where
        this executor has the model's tokenizer; this default estimates."""
        from models.context import count_prompt  # models.context imports this module

        return count_prompt(prompt)

    async def transcribe_partial(self, item: PromptItem) -> Heard | None:
        """The text of a turn still being spoken, for partial transcripts: recognized
        only when the recognizer is idle (None: busy, or this executor cannot)."""
        return None

    def transcript_logprobs(self, item_id: str) -> tuple[TokenLogprob, ...] | None:
        """The token log-probabilities of `transcribe`'s text of `item_id`, when its
        hint asked for them and the recognizer gives them."""
        return None

    def remote_stages(self) -> list[Replicas]:
        """The stages that run on remote servers, for /healthz and its probe."""
        return []

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release model resources."""
