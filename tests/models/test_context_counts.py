"""What each executor tells the session's truncation (engine/truncation.py): the
tokens a prompt may take (its context less the answer's) and the tokens of each
part, counted by the model's own tokenizer where the executor has it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from models.audio_prompt import IMAGE_TOKENS
from models.base import Prompt, PromptImage, PromptItem
from models.context import CHAT_FRAME_TOKENS
from models.openai_compat import BackendOptions, OpenAICompatExecutor
from models.speech.slots import StageSlots
from models.speech.speaker import Speaker
from models.speech.tts import FliteSynthesizer
from models.vllm_engine import VllmExecutor, VllmOptions
from tests.support.fake_vllm import FakeVllm

FRAME = CHAT_FRAME_TOKENS


def speaker() -> Speaker:
    return Speaker(FliteSynthesizer(), StageSlots("tts", 1))


def prompt(max_output_tokens: int | None = None) -> Prompt:
    items = (
        PromptItem("u1", "user", text="what is the weather"),
        PromptItem("a1", "assistant", text="sunny"),
        PromptItem("u2", "user", audio=np.zeros(48_000, np.int16)),  # 2 s, no transcript yet
    )
    return Prompt("r", "be brief", items, max_output_tokens=max_output_tokens)


def test_vllm_counts_with_the_models_tokenizer_and_leaves_room_for_the_answer(
    tmp_path: Path,
) -> None:
    # A word-level tokenizer.json whose counts differ from any estimate ("weather"
    # is one token here, three by characters).
    words = ["be", "brief", "what", "is", "the", "weather", "sunny", "[UNK]"]
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()  # type: ignore[assignment]
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_audio"}))
    options = VllmOptions(model=str(tmp_path), max_model_len=1000, max_output_tokens=100)
    ex = VllmExecutor(options, speaker(), backend=FakeVllm())
    tokens = ex.prompt_tokens(prompt())
    assert tokens.exact
    assert tokens.instructions == 2 + FRAME
    # Text by the tokenizer; audio at Qwen2-Audio's 25 tokens a second.
    assert tokens.items == (4 + FRAME, 1 + FRAME, 50 + FRAME)
    assert ex.context_limit(prompt()) == 900
    assert ex.context_limit(prompt(max_output_tokens=30)) == 970


def test_a_remote_backend_estimates_and_says_so() -> None:
    options = BackendOptions(urls=("http://127.0.0.1:1",), max_context_tokens=2000)
    ex = OpenAICompatExecutor(options, speaker())
    tokens = ex.prompt_tokens(prompt())
    assert not tokens.exact
    assert tokens.items[0] == -(-len("what is the weather") // 3) + FRAME  # 3 characters a token
    assert ex.context_limit(prompt(max_output_tokens=50)) == 1950


def test_each_image_counts_its_estimate() -> None:
    options = BackendOptions(urls=("http://127.0.0.1:1",), vision=True)
    ex = OpenAICompatExecutor(options, speaker())
    pictures = (PromptImage("data:image/png;base64,AAAA"),) * 2
    shown = PromptItem("u1", "user", text="what is this", images=pictures)
    tokens = ex.prompt_tokens(Prompt("r", "be brief", (shown,)))
    assert tokens.items == (2 * IMAGE_TOKENS + 4 + FRAME,)  # "what is this": 4 tokens
