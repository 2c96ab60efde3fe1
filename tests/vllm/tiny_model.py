"""Tiny random models, built at test time (no hub download): a Qwen2-Audio for the
vllm executor and vLLM's OpenAI server, a Qwen2 text model for the cascade's
language model on a server (`--llm-url`), and a Whisper for its recognizer on one
(`--asr-url`).

All three have a small byte-level BPE tokenizer trained on the spot. The first two
share a 2-layer Qwen2 language model (hidden 256, 4 heads, 2 KV heads: CPU attention
needs head_dim 64) and the ChatML specials. The audio model adds a 1-layer
Whisper-style encoder (d_model 64, 128 mel bins), the audio specials and the
processor vLLM loads for `qwen2_audio`; the text model has Qwen2.5's chat template
with its tool branches; the Whisper has Whisper's specials and processor.
Their answers are random tokens; what the tests check is the plumbing, not the words.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

CHATML = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
AUDIO_SPECIALS = ["<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"]
SPECIALS = CHATML + AUDIO_SPECIALS
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'audio' or 'audio_url' in part or 'input_audio' in part %}"
    "{{ 'Audio ' + loop.index|string + ': <|audio_bos|><|AUDIO|><|audio_eos|>\n' }}"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Qwen2.5-Instruct's chat template (the default system message left out): the tools
# block in the system message, calls as <tool_call> JSON, results as <tool_response>.
TOOLS_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.'"
    " + '\\n\\nYou are provided with function signatures within <tools></tools> XML tags:'"
    " + '\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name'"
    " + ' and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n'"
    ' + \'{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>\''
    " + '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first)"
    " or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for call in message.tool_calls %}"
    "{%- if call.function is defined %}{%- set call = call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' + call.name + \'", "arguments": \' }}'
    "{{- call.arguments if call.arguments is string else call.arguments | tojson }}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
WORDS = re.compile(r"[A-Za-z ,.!?']+")
CORPUS = [
    "Hello, how can I help you today? The weather is sunny and warm.",
    "Tell me a joke. Why did the chicken cross the road? To get to the other side!",
    "You are a friendly voice assistant. Answer in one or two short spoken sentences.",
    "Do not use lists, markdown or emoji. Audio 1: what did the user say?",
    "system user assistant The quick brown fox jumps over the lazy dog. 0123456789",
]


def tiny_tokenizer(specials: list[str], chat_template: str | None, eos: str = "<|im_end|>") -> Any:
    """A byte-level BPE of at most 600 tokens trained on CORPUS (ChatML's <|im_end|>
    its eos, unless told)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(CORPUS * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=eos,
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=specials[1:],
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def tiny_qwen2_config(tokenizer: Any, max_positions: int = 32_768) -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )


def save_generation_config(out: Path, tokenizer: Any) -> None:
    gen = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    (out / "generation_config.json").write_text(json.dumps(gen))


def build_tiny_qwen2_audio(out: Path) -> Path:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import (
        Qwen2AudioConfig,
        Qwen2AudioEncoderConfig,
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
        WhisperFeatureExtractor,
    )

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny_tokenizer(SPECIALS, CHAT_TEMPLATE)
    audio_id = tokenizer.convert_tokens_to_ids("<|AUDIO|>")

    torch.manual_seed(0)
    config = Qwen2AudioConfig(
        audio_config=Qwen2AudioEncoderConfig(
            num_mel_bins=128,
            encoder_layers=1,
            encoder_attention_heads=2,
            encoder_ffn_dim=128,
            d_model=64,
            max_source_positions=1500,
        ).to_dict(),
        text_config=tiny_qwen2_config(tokenizer).to_dict(),
        audio_token_index=audio_id,
    )
    config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    model = Qwen2AudioForConditionalGeneration(config).to(torch.bfloat16)
    model.save_pretrained(out)
    # transformers 5 saves the LM as language_model.model.model.*; vLLM reads
    # language_model.model.*.
    for path in out.glob("*.safetensors"):
        tensors = load_file(path)
        renamed = {
            k.replace("language_model.model.model.", "language_model.model."): v
            for k, v in tensors.items()
        }
        save_file(renamed, path, metadata={"format": "pt"})

    processor = Qwen2AudioProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=128),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    save_generation_config(out, tokenizer)
    return out


def build_tiny_qwen2(out: Path, max_positions: int = 32_768) -> Path:
    """The text model: Qwen2ForCausalLM with the tools chat template."""
    import torch
    from transformers import Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny_tokenizer(CHATML, TOOLS_CHAT_TEMPLATE)
    torch.manual_seed(0)
    config = tiny_qwen2_config(tokenizer, max_positions)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    save_generation_config(out, tokenizer)
    return out


def build_tiny_whisper(out: Path) -> Path:
    """A Whisper (1 encoder and 1 decoder layer, d_model 128, 2 heads: head_dim 64)
    with Whisper's specials, a language token for each of its languages among them,
    and an 80-bin WhisperProcessor."""
    import torch
    from transformers import (
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    out.mkdir(parents=True, exist_ok=True)
    specials = [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *(f"<|{code}|>" for code in LANGUAGES),
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nocaptions|>",
        "<|notimestamps|>",
    ]
    tiny_tokenizer(specials, None, eos="<|endoftext|>").save_pretrained(out)
    tokenizer = WhisperTokenizer.from_pretrained(out)  # the same files, Whisper's class
    start = tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        encoder_layers=1,
        decoder_layers=1,
        d_model=128,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=256,
        decoder_ffn_dim=256,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=start,
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        suppress_tokens=[],
        begin_suppress_tokens=[],
    )
    model = WhisperForConditionalGeneration(config)
    # Every token but plain words has a zero embedding (tied to the output): its
    # logit is 0, below the best word's, so a transcript is words (greedy: the same
    # few again) until the server's length ends it.
    others = [i for i in range(len(tokenizer)) if not WORDS.fullmatch(tokenizer.decode([i]))]
    with torch.no_grad():
        model.model.decoder.embed_tokens.weight[others] = 0.0
    model.to(torch.bfloat16).save_pretrained(out)
    processor = WhisperProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer
    )
    processor.save_pretrained(out)
    gen = {"decoder_start_token_id": start, "eos_token_id": end, "pad_token_id": end}
    (out / "generation_config.json").write_text(json.dumps(gen))
    return out


if __name__ == "__main__":
    import sys

    builders = {
        "audio": build_tiny_qwen2_audio,
        "text": build_tiny_qwen2,
        "whisper": build_tiny_whisper,
    }
    build = builders[sys.argv[1]]
    print(build(Path(sys.argv[2])))
