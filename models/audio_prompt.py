"""Prompts for audio-in language models, as pure functions (no vLLM needed).

A Parley conversation (a `Prompt`) becomes the turns an audio language model reads:
the session's instructions as the system message, then the recent items, newest
kept first, within a token budget. The latest user turn goes in as audio; earlier
user turns go in as audio while the model's audio limit and the budget allow, else
as their transcript, else the history stops there. Assistant turns are their text.

Each model family writes its audio placeholder its own way [vLLM source]:
- Qwen2-Audio / Qwen2.5-Omni: ChatML, `<|audio_bos|><|AUDIO|><|audio_eos|>`;
- Ultravox: `<|audio|>` in the user turn (Llama 3 chat format);
- MiniCPM-o: ChatML, `(<audio>./</audio>)`;
- Voxtral: Mistral's instruct format; its `[AUDIO]` tokens are made by
  mistral_common from the audio itself, so a Voxtral prompt is handed to the engine
  as turns (see models/vllm_engine.py) and rendered here only to count it.

vLLM expands each placeholder to the clip's real number of audio tokens; the
budget counts them with each family's rate (audio tokens per second of 16 kHz
audio), an estimate that errs high.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from models.base import Prompt, PromptImage, PromptItem, Tool
from models.speech.audio import resample_int16
from models.tool_text import call_text, result_text, tools_block

PromptStyle = Literal["qwen2_audio", "ultravox", "minicpmo", "voxtral"]
PROMPT_STYLES: tuple[PromptStyle, ...] = get_args(PromptStyle)
MODEL_RATE = 16_000  # every one of these audio encoders reads 16 kHz
DEFAULT_SYSTEM = (
    "You are a friendly voice assistant. Answer in one or two short spoken sentences. "
    "Do not use lists, markdown or emoji."
)
TokenCounter = Callable[[str], int]
# What one image of a user message takes, estimated (images go only to a backend
# that sees, models/openai_compat.py, whose server counts them): vision-language
# models scale an image to about a megapixel, ~1300 tokens for Qwen2.5-VL (28-pixel
# patches merged in fours).
IMAGE_TOKENS = 1300
# The styles whose models read tools in the prompt and write calls in the Hermes
# format (ChatML models: Qwen's chat templates; models/tool_text.py).
TOOL_STYLES: tuple[PromptStyle, ...] = ("qwen2_audio", "minicpmo")


@dataclass(frozen=True)
class StyleSpec:
    audio_tokens_per_s: float
    # Longest clip the encoder reads (Whisper-style feature extractors cut at 30 s);
    # a longer turn keeps its last seconds, where the question usually ends.
    max_clip_s: float | None


STYLES: dict[PromptStyle, StyleSpec] = {
    # Whisper frames at 50/s, pooled by 2: 25 tokens/s, 750 for a 30 s window.
    "qwen2_audio": StyleSpec(25.0, 30.0),
    # Whisper frames at 50/s stacked by 8; vLLM splits longer audio into 30 s chunks.
    "ultravox": StyleSpec(6.25, None),
    "minicpmo": StyleSpec(25.0, 30.0),
    "voxtral": StyleSpec(12.5, None),
}

# config.json `model_type` (or an architecture name, lowercased) → style.
_MODEL_TYPES: dict[str, PromptStyle] = {
    "qwen2_audio": "qwen2_audio",
    "qwen2_5_omni": "qwen2_audio",
    "qwen2_5_omni_thinker": "qwen2_audio",
    "qwen3_omni_moe": "qwen2_audio",
    "ultravox": "ultravox",
    "minicpmo": "minicpmo",
    "voxtral": "voxtral",
}


def detect_style(config: Mapping[str, Any]) -> PromptStyle | None:
    """The prompt style of a Hugging Face `config.json`, or None if unknown."""
    model_type = str(config.get("model_type", "")).lower()
    if model_type in _MODEL_TYPES:
        return _MODEL_TYPES[model_type]
    for arch in config.get("architectures") or []:
        name = str(arch).lower()
        for key, style in _MODEL_TYPES.items():
            if key.replace("_", "") in name.replace("_", ""):
                return style
    return None


def style_of_model_dir(path: Path) -> PromptStyle | None:
    config = path / "config.json"
    if not config.is_file():
        return None
    return detect_style(json.loads(config.read_text()))


def estimate_tokens(text: str) -> int:
    """Tokens of `text` without its tokenizer: one per three characters, which is
    above what BPE tokenizers give for English, so a budget holds."""
    return math.ceil(len(text) / 3)


def tokenizer_counter(model_dir: Path) -> TokenCounter | None:
    """A counter from the model's own `tokenizer.json`, when it has one."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


def to_model_audio(audio: np.ndarray, rate: int) -> np.ndarray:
    """int16 mono at `rate` as float32 in [-1, 1) at 16 kHz, as vLLM's audio
    processors take it."""
    pcm = resample_int16(audio, rate, MODEL_RATE)
    out: np.ndarray = pcm.astype(np.float32) / 32768.0
    return out


@dataclass(frozen=True)
class ToolTurn:
    """A function call the assistant made, or its result (`output`), as chat APIs
    carry them (`tool_calls`, a `tool` message); `text` renders either as prose for
    prompts written here."""

    call_id: str
    name: str | None = None
    arguments: str | None = None  # the call's, JSON text
    output: str | None = None  # the result's


@dataclass(frozen=True)
class Turn:
    role: Literal["user", "assistant"]
    text: str = ""
    audio: np.ndarray | None = None  # float32 at 16 kHz
    tool: ToolTurn | None = None
    images: tuple[PromptImage, ...] = ()  # a user's, for a chat backend that sees


@dataclass(frozen=True)
class AudioPrompt:
    """What the model reads: system text, then turns; audio clips in turn order."""

    style: PromptStyle
    system: str
    turns: tuple[Turn, ...]
    tools: tuple[Tool, ...] = ()  # in the prompt: the model may call them

    @property
    def audios(self) -> list[np.ndarray]:
        return [t.audio for t in self.turns if t.audio is not None]

    def render(self) -> str:
        """The prompt text, ending with the assistant's turn open."""
        parts = [render_system(self.style, self.system, self.tools)]
        index = 0
        for turn in self.turns:
            if turn.audio is not None:
                index += 1
            parts.append(render_turn(self.style, turn, index, tools=bool(self.tools)))
        parts.append(GENERATION_PROMPT[self.style])
        return "".join(parts)


GENERATION_PROMPT: dict[PromptStyle, str] = {
    "qwen2_audio": "<|im_start|>assistant\n",
    "minicpmo": "<|im_start|>assistant\n",
    "ultravox": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "voxtral": "",
}


def render_system(style: PromptStyle, system: str, tools: tuple[Tool, ...] = ()) -> str:
    if tools:
        system += tools_block(tools)  # only TOOL_STYLES get tools (build_audio_prompt)
    if style == "ultravox":
        return f"<|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>"
    if style == "voxtral":
        return f"[SYSTEM_PROMPT]{system}[/SYSTEM_PROMPT]"
    return f"<|im_start|>system\n{system}<|im_end|>\n"


def _placeholder(style: PromptStyle, index: int) -> str:
    if style == "qwen2_audio":
        return f"Audio {index}: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
    if style == "ultravox":
        return "<|audio|>\n"
    if style == "minicpmo":
        return "(<audio>./</audio>)\n"
    return "[BEGIN_AUDIO][AUDIO]"  # for counting only: mistral_common writes Voxtral's


def render_turn(style: PromptStyle, turn: Turn, audio_index: int, *, tools: bool = False) -> str:
    """One turn; `audio_index` numbers the clip (1-based) when the turn has audio.
    With `tools` in the prompt a function call and its result are written as the
    model writes and reads them, else as prose."""
    content = _placeholder(style, audio_index) if turn.audio is not None else turn.text
    if tools and turn.tool is not None:
        tool = turn.tool
        content = (
            call_text(tool.name, tool.arguments)
            if tool.output is None
            else result_text(tool.output)
        )
    if style == "ultravox":
        return f"<|start_header_id|>{turn.role}<|end_header_id|>\n\n{content}<|eot_id|>"
    if style == "voxtral":
        return f"[INST]{content}[/INST]" if turn.role == "user" else f"{content}</s>"
    return f"<|im_start|>{turn.role}\n{content}<|im_end|>\n"


def _item_text(item: PromptItem, transcripts: Mapping[str, str]) -> str:
    if item.kind == "function_call":
        return f"(I called {item.name} with {item.arguments})"
    if item.kind == "function_call_output":
        return f"(The function {item.name or item.call_id} returned: {item.output})"
    text = item.text if item.text is not None else transcripts.get(item.id, "")
    return text.strip()


def _tool_of(item: PromptItem) -> ToolTurn | None:
    if item.call_id is None or item.kind == "message":
        return None
    if item.kind == "function_call":
        return ToolTurn(item.call_id, name=item.name, arguments=item.arguments or "{}")
    return ToolTurn(item.call_id, name=item.name, output=item.output or "")


class PromptTooLong(ValueError):
    """Even the latest turn alone does not fit the model's context."""


def build_audio_prompt(
    prompt: Prompt,
    *,
    style: PromptStyle,
    budget: int,
    count_tokens: TokenCounter = estimate_tokens,
    transcripts: Mapping[str, str] | None = None,
    max_audio: int = 1,
) -> AudioPrompt:
    """The conversation as the model reads it, within `budget` tokens (the context
    length less the tokens left for the answer).

    Newest first: the latest user audio always goes in as audio (only its last
    `max_clip_s` seconds, and cut further if the budget needs it); earlier user
    audio as audio while fewer than `max_audio` clips are in and it fits, else as
    its transcript; the first turn that does not fit ends the history.
    """
    spec = STYLES[style]
    transcripts = transcripts or {}
    system_parts = [prompt.instructions.strip() or DEFAULT_SYSTEM]
    system_parts += [
        t for i in prompt.items if i.role == "system" and (t := _item_text(i, transcripts))
    ]
    system = "\n".join(system_parts)
    tools = prompt.tools if style in TOOL_STYLES and prompt.tool_choice != "none" else ()
    used = count_tokens(render_system(style, system, tools))
    used += count_tokens(GENERATION_PROMPT[style])
    if used > budget:
        raise PromptTooLong(f"the instructions alone take {used} tokens of a {budget} budget")

    def audio_cost(samples: int) -> int:
        return math.ceil(samples / MODEL_RATE * spec.audio_tokens_per_s) + 1

    items = [i for i in prompt.items if i.role != "system"]
    latest_audio = next(
        (i.id for i in reversed(items) if i.role == "user" and i.audio is not None), None
    )
    kept: list[Turn] = []
    clips = 0
    for item in reversed(items):
        role: Literal["user", "assistant"] = "assistant" if item.role == "assistant" else "user"
        if item.kind == "function_call_output":
            role = "user"
        images = item.images  # they go with the turn, whether heard or read
        pictures = IMAGE_TOKENS * len(images)
        turn: Turn | None = None
        if item.audio is not None and len(item.audio) and item.kind == "message":
            audio = to_model_audio(item.audio, item.rate)
            if spec.max_clip_s is not None:
                audio = audio[-int(spec.max_clip_s * MODEL_RATE) :]
            frame = count_tokens(render_turn(style, Turn(role, audio=audio), clips + 1))
            if item.id == latest_audio:
                room = budget - used - frame - pictures
                fits = int((room - 1) / spec.audio_tokens_per_s * MODEL_RATE)
                if fits < MODEL_RATE // 4:  # under a quarter second: nothing to answer
                    raise PromptTooLong(
                        f"the latest turn does not fit the {budget}-token context budget"
                    )
                audio = audio[-fits:]
                turn = Turn(role, audio=audio, images=images)
            elif clips < max_audio and used + frame + audio_cost(len(audio)) + pictures <= budget:
                turn = Turn(role, audio=audio, images=images)
        if turn is not None and turn.audio is not None:
            used += count_tokens(render_turn(style, turn, clips + 1)) + audio_cost(len(turn.audio))
            used += pictures
            clips += 1
            kept.append(turn)
            continue
        text = _item_text(item, transcripts)
        if not text:
            if item.audio is not None:
                break  # audio we can neither fit nor read: the history ends here
            if not images:
                continue
        turn = Turn(role, text=text, tool=_tool_of(item), images=images)
        cost = count_tokens(render_turn(style, turn, 0, tools=bool(tools))) + pictures
        if used + cost > budget:
            break
        used += cost
        kept.append(turn)
    kept.reverse()
    while kept and kept[0].role == "assistant":
        kept.pop(0)  # a chat starts with the user
    return AudioPrompt(style, system, tuple(kept), tools)
