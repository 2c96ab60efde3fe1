"""The speculation hooks of the executors with Parley's own recognizer (the cascade,
and through models/text_then_speech.py vllm and openai_compat): a turn not committed
yet is transcribed early (`Transcripts`), and its answer begun early
(`SpeculativeResponses`) for the committed turn's response to adopt in `generate`.
Each executor adds how it answers (`_generate`) and what an early answer is."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable

from models.base import Executor, Heard, OutputChunk, Prompt, PromptItem, TokenLogprob
from models.speculative_responses import Generate, SpeculativeResponses
from models.speech.transcripts import SpeculationStats, Transcripts


class SpeculatingExecutor(Executor):
    def __init__(
        self, transcripts: Transcripts, early: Generate, abort: Callable[[str], Awaitable[None]]
    ) -> None:
        """`early` answers a prompt whose turn is not committed; `abort` stops one of
        its requests at the model."""
        self.transcripts = transcripts
        self.responses = SpeculativeResponses(early, abort, transcripts.speculation)

    def prepare_early(self, item: PromptItem) -> None:
        if item.role == "user" and item.text is None:
            self.transcripts.speculate(item)

    def answer_early(self, prompt: Prompt) -> None:
        if prompt.items and self._may_answer_early():
            self.responses.begin(prompt, prompt.items[-1].id)

    async def speculative_text(self, item_id: str) -> str | None:
        return await self.transcripts.speculative_text(item_id)

    async def transcribe_partial(self, item: PromptItem) -> Heard | None:
        return await self.transcripts.partial(item)

    def transcript_logprobs(self, item_id: str) -> tuple[TokenLogprob, ...] | None:
        return self.transcripts.logprobs(item_id)

    def model_request_id(self, request_id: str) -> str:
        return self.responses.resolve(request_id)

    def discard_speculation(self, item_id: str) -> None:
        self.responses.discard(item_id)
        self.transcripts.discard(item_id)

    def generate(self, prompt: Prompt) -> AsyncGenerator[OutputChunk, None]:
        return self.responses.respond(prompt, self._generate, self.stats)

    @abstractmethod
    def _generate(self, prompt: Prompt) -> AsyncGenerator[OutputChunk, None]:
        """The response at the model (the executor's own)."""

    def _may_answer_early(self) -> bool:
        """Whether an early answer may take the model now."""
        return True

    @property
    def speculation(self) -> SpeculationStats:
        return self.transcripts.speculation
