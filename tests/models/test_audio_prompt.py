"""Prompt builders for audio language models: pure functions, no vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from models.audio_prompt import (
    IMAGE_TOKENS,
    MODEL_RATE,
    STYLES,
    PromptTooLong,
    build_audio_prompt,
    detect_style,
    estimate_tokens,
    style_of_model_dir,
    tokenizer_counter,
)
from models.base import Prompt, PromptImage, PromptItem
from models.vllm_engine import text_prompt


def user_audio(item_id: str, seconds: float, rate: int = 24_000) -> PromptItem:
    t = np.arange(int(seconds * rate)) / rate
    pcm = (3000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)
    return PromptItem(item_id, "user", audio=pcm, rate=rate)


def said(item_id: str, role: str, text: str) -> PromptItem:
    return PromptItem(item_id, role, text=text)  # type: ignore[arg-type]


def conversation(*items: PromptItem, instructions: str = "Be brief.") -> Prompt:
    return Prompt("resp_1", instructions, items)


ONE_TURN = conversation(user_audio("u1", 2.0))


def test_qwen2_audio_prompt_is_chatml_with_its_placeholder() -> None:
    built = build_audio_prompt(ONE_TURN, style="qwen2_audio", budget=4000)
    assert built.render() == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nAudio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    (clip,) = built.audios
    assert clip.dtype == np.float32 and len(clip) == 2 * MODEL_RATE  # resampled to 16 kHz
    assert 0.05 < float(np.abs(clip).max()) < 0.1  # scaled from int16 to [-1, 1)


def test_minicpmo_and_ultravox_and_voxtral_placeholders() -> None:
    mini = build_audio_prompt(ONE_TURN, style="minicpmo", budget=4000).render()
    assert "<|im_start|>user\n(<audio>./</audio>)\n<|im_end|>\n" in mini
    ultra = build_audio_prompt(ONE_TURN, style="ultravox", budget=4000).render()
    assert ultra == (
        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n<|audio|>\n<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    vox = build_audio_prompt(ONE_TURN, style="voxtral", budget=4000).render()
    assert vox == "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST][BEGIN_AUDIO][AUDIO][/INST]"


def test_history_numbers_clips_and_keeps_assistant_text() -> None:
    p = conversation(
        user_audio("u1", 1.0),
        said("a1", "assistant", "It is sunny."),
        user_audio("u2", 1.0),
    )
    built = build_audio_prompt(p, style="qwen2_audio", budget=4000, max_audio=4)
    text = built.render()
    assert text.index("Audio 1:") < text.index("It is sunny.") < text.index("Audio 2:")
    assert len(built.audios) == 2
    assert text_prompt(built)["multi_modal_data"]["audio"][1][1] == MODEL_RATE


def test_older_audio_becomes_its_transcript_past_the_clip_limit() -> None:
    p = conversation(
        user_audio("u1", 1.0),
        said("a1", "assistant", "Sunny."),
        user_audio("u2", 1.0),
    )
    built = build_audio_prompt(
        p, style="qwen2_audio", budget=4000, max_audio=1, transcripts={"u1": "weather?"}
    )
    assert [t.text or "<audio>" for t in built.turns] == ["weather?", "Sunny.", "<audio>"]
    # Without a transcript the history ends at audio it cannot hold.
    bare = build_audio_prompt(p, style="qwen2_audio", budget=4000, max_audio=1)
    assert [t.text or "<audio>" for t in bare.turns] == ["<audio>"]  # a1 dropped: user first


def test_budget_drops_the_oldest_turns_first() -> None:
    items = []
    for n in range(20):
        items += [said(f"u{n}", "user", f"question {n} " * 10), said(f"a{n}", "assistant", "ok")]
    items.append(user_audio("last", 2.0))
    budget = 400
    built = build_audio_prompt(conversation(*items), style="minicpmo", budget=budget)
    rendered = built.render()
    audio_tokens = 2 * STYLES["minicpmo"].audio_tokens_per_s
    assert estimate_tokens(rendered) + audio_tokens <= budget
    assert "question 19" in rendered and "question 0 " not in rendered
    assert built.turns[0].role == "user" and built.turns[-1].audio is not None


def test_latest_turn_keeps_its_end_within_the_window_and_budget() -> None:
    long_turn = conversation(user_audio("u1", 40.0))
    (clip,) = build_audio_prompt(long_turn, style="qwen2_audio", budget=4000).audios
    assert len(clip) == 30 * MODEL_RATE  # Whisper's 30 s window: the last 30 s
    (clip,) = build_audio_prompt(long_turn, style="ultravox", budget=4000).audios
    assert len(clip) == 40 * MODEL_RATE  # Ultravox chunks long audio itself
    (tight,) = build_audio_prompt(long_turn, style="ultravox", budget=100).audios
    assert 0 < len(tight) < 40 * MODEL_RATE
    with pytest.raises(PromptTooLong):
        build_audio_prompt(long_turn, style="qwen2_audio", budget=30)


def test_system_items_tools_and_typed_text() -> None:
    p = conversation(
        said("s1", "system", "Speak French."),
        said("u1", "user", "Bonjour"),
        PromptItem("c1", "assistant", kind="function_call", name="time", arguments="{}"),
        PromptItem("o1", "user", kind="function_call_output", call_id="c1", output="noon"),
        instructions="",
    )
    built = build_audio_prompt(p, style="qwen2_audio", budget=4000)
    assert "Speak French." in built.system and "voice assistant" in built.system
    texts = [t.text for t in built.turns]
    assert texts[0] == "Bonjour"
    assert "time" in texts[1] and "noon" in texts[2]
    assert built.audios == [] and "multi_modal_data" not in text_prompt(built)


@pytest.mark.parametrize(
    ("config", "style"),
    [
        ({"model_type": "qwen2_audio"}, "qwen2_audio"),
        ({"model_type": "qwen2_5_omni"}, "qwen2_audio"),
        ({"model_type": "ultravox"}, "ultravox"),
        ({"model_type": "minicpmo"}, "minicpmo"),
        ({"model_type": "voxtral"}, "voxtral"),
        ({"architectures": ["VoxtralForConditionalGeneration"]}, "voxtral"),
        ({"architectures": ["UltravoxModel"]}, "ultravox"),
        ({"model_type": "llama"}, None),
    ],
)
def test_detect_style(config: dict[str, object], style: str | None) -> None:
    assert detect_style(config) == style


def test_model_dir_style_and_tokenizer(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    assert style_of_model_dir(tmp_path) is None and tokenizer_counter(tmp_path) is None
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_audio"}))
    assert style_of_model_dir(tmp_path) == "qwen2_audio"
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|im_start|>"])
    tok.train_from_iterator(["hello there, how are you today"] * 20, trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    count = tokenizer_counter(tmp_path)
    assert count is not None
    assert count("<|im_start|>") == 1
    assert 0 < count("hello there") < estimate_tokens("hello there") + 5


def test_images_go_with_their_turns_and_count_against_the_budget() -> None:
    picture = (PromptImage("data:image/png;base64,AAAA"),)
    shown = PromptItem("u0", "user", images=picture)  # an image and no words
    latest = PromptItem("u1", "user", audio=user_audio("u1", 1.0).audio, images=picture)
    roomy = build_audio_prompt(
        conversation(shown, latest), style="qwen2_audio", budget=3 * IMAGE_TOKENS
    )
    assert [t.images for t in roomy.turns] == [picture, picture]
    assert roomy.turns[0].text == "" and roomy.turns[1].audio is not None
    # Room for the latest turn and its image only: the older image is left out.
    tight = build_audio_prompt(
        conversation(shown, latest), style="qwen2_audio", budget=IMAGE_TOKENS + 100
    )
    assert [t.images for t in tight.turns] == [picture]
