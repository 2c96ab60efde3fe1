"""The openai_compat executor against vLLM's own OpenAI server
(`python -m vllm.entrypoints.openai.api_server`, a subprocess on a free loopback
port serving the tiny model): the executor contract, with the server's running
requests (its Prometheus gauge) back to 0 after each abort."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from models.base import Prompt, PromptItem, Tool
from models.openai_compat import BackendOptions, OpenAICompatExecutor
from models.speech.slots import StageSlots
from models.speech.speaker import Speaker
from models.speech.tts import FliteSynthesizer
from tests.support import executor_contract as contract
from tests.support.harness import Harness
from tests.vllm.conftest import (
    FIGURES,
    LONG,
    MAX_MODEL_LEN,
    NEWLINE_BIAS,
    SHORT,
    Gate,
    Plan,
    Steering,
    newline_id,
    speakable_ids,
)
from tests.vllm.served import NAMED_TOOL_CHOICE, Counters, vllm_server

STOP_WITHIN_S = 90.0


@pytest.fixture(scope="module")
def api_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    options = (
        "--limit-mm-per-prompt", '{"audio": 2}',
        # vLLM 0.32: the same clip sent again after an aborted request can miss the
        # engine's multimodal cache ("P0/P1 cache drift"); the server then fails
        # that request with an SSE "Internal server error" and expects a retry.
        "--mm-processor-cache-gb", "0",
        *NAMED_TOOL_CHOICE,
    )  # fmt: skip
    log = tmp_path_factory.mktemp("api-server") / "server.log"
    with vllm_server(tiny_model, log, *options, label="tiny Qwen2-Audio") as url:
        yield url


class SteeredCompat(OpenAICompatExecutor):
    """openai_compat with the test's plan in each request body (vLLM's extra
    sampling parameters) and a gate on what reaches the session."""

    def __init__(self, url: str, newline: int, allowed: list[int]) -> None:
        # vLLM's CPU workers busy-wait on every core of a small runner: beside them one
        # sentence once took flite past its 30 s production timeout.
        speaker = Speaker(FliteSynthesizer(timeout_s=180.0), StageSlots("tts", 1))
        options = BackendOptions(
            urls=(url,),
            retries=0,
            down_for_s=0,
            max_output_tokens=LONG,
            max_context_tokens=MAX_MODEL_LEN,
            max_audio_items=2,
        )
        super().__init__(options, speaker)
        self.plan = Plan()
        self.gate = Gate()
        self.newline = newline
        self.allowed = allowed
        self.calls = 0

    def body(self, prompt: Prompt, model: str) -> dict[str, Any]:
        body = super().body(prompt, model)
        self.calls += 1
        n = self.plan.next_length()
        long = n > SHORT
        body.update(
            max_tokens=n if long else body["max_tokens"],
            min_tokens=SHORT,
            ignore_eos=True,
            logit_bias={str(self.newline): NEWLINE_BIAS},
            allowed_token_ids=self.allowed,
        )
        if not long:
            body["stop_token_ids"] = [self.newline]
        if self.plan.failing:
            self.plan.failing = False
            body["model"] = "no-such-model"  # the server answers 404
        return body

    async def _deltas(self, state: Any) -> AsyncGenerator[Any, None]:
        async for delta in super()._deltas(state):
            while not self.gate.open and not state.aborted:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            if state.aborted:
                return
            yield delta


@pytest_asyncio.fixture(loop_scope="module")
async def kit(api_server: str, tiny_model: Path) -> AsyncIterator[contract.Kit]:
    ex = SteeredCompat(api_server, newline_id(tiny_model), speakable_ids(tiny_model))
    counters = Counters(api_server)
    steer = Steering(ex.gate, ex.plan)

    async def stopped(rid: str, h: Harness) -> None:
        assert rid in ex.stats.aborted
        # Inside the kit's wait, so that a slow server fails with this message. Twice
        # in three fresh-clone runs of a 2-core runner the server still counted the
        # aborted request 25 s on (it takes 0.02-0.4 s otherwise; the figure below).
        took = await counters.until_idle(deadline_s=STOP_WITHIN_S - 5)
        name = "stream closed to server idle (api_server, upper bound)"
        FIGURES[name] = max(FIGURES.get(name, 0.0), took)

    made = contract.Kit(
        ex,
        steer.hold,
        steer.first_sentence,
        steer.free,
        steer.fail,
        lambda: ex.calls,
        stopped,
        failure_text="HTTP 404",
        stop_within_s=STOP_WITHIN_S,
    )
    try:
        yield made
    finally:
        await steer.free()
        await ex.aclose()
        await counters.aclose()


@pytest.mark.asyncio(loop_scope="module")
async def test_a_turn_is_answered_in_speech(kit: contract.Kit) -> None:
    await contract.a_turn_is_answered_in_speech(kit)
    ex = kit.executor
    assert isinstance(ex, SteeredCompat)
    marks = list(ex.stats.marks.values())[-1]
    FIGURES["time to first token (api_server)"] = marks["first_token"] - marks["started"]
    FIGURES["time to first audio (api_server)"] = marks["first_audio"] - marks["started"]


@pytest.mark.asyncio(loop_scope="module")
async def test_barge_in_mid_stream_closes_the_server_request(kit: contract.Kit) -> None:
    await contract.barge_in_mid_stream_aborts_the_model(kit)


@pytest.mark.asyncio(loop_scope="module")
async def test_cancel_before_the_first_token(kit: contract.Kit) -> None:
    await contract.cancel_before_the_first_token(kit)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_backend_error_fails_the_response_and_the_session_lives(
    kit: contract.Kit,
) -> None:
    await contract.a_backend_failure_fails_the_response_and_the_session_lives(kit)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_named_tool_choice_comes_back_as_a_function_call(api_server: str) -> None:
    """vLLM's server forces a named `tool_choice` with structured outputs (no tool
    parser needed) and streams the call as `tool_calls`; the executor turns it into
    one function call. The schema's enum leaves the random model nothing to invent."""
    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string", "enum": ["A-17"]}},
        "required": ["order_id"],
        "additionalProperties": False,
    }
    tool = Tool("lookup_order", "Looks up an order by its id.", json.dumps(schema))
    asked = PromptItem("item_1", "user", text="Where is my order A-17?")
    prompt = Prompt(
        "resp_toolcall000001",
        "Use the tool.",
        (asked,),
        output_modalities=("text",),
        tools=(tool,),
        tool_choice=tool.name,
    )
    speaker = Speaker(FliteSynthesizer(timeout_s=180.0), StageSlots("tts", 1))
    options = BackendOptions(
        urls=(api_server,), retries=0, max_output_tokens=64, max_context_tokens=MAX_MODEL_LEN
    )
    ex = OpenAICompatExecutor(options, speaker)
    try:
        chunks = [chunk async for chunk in ex.generate(prompt)]
    finally:
        await ex.aclose()
    calls = [c.function_call for c in chunks if c.function_call is not None]
    assert len(calls) == 1, chunks
    assert calls[0].name == "lookup_order" and calls[0].call_id
    assert json.loads(calls[0].arguments) == {"order_id": "A-17"}
