"""A tiny random Qwen2-Audio model, built at test time (no hub download).

A 1-layer Whisper-style audio encoder (d_model 64, 128 mel bins) and a 2-layer
Qwen2 language model (hidden 256, 4 heads, 2 KV heads: CPU attention needs
head_dim 64), a small byte-level BPE tokenizer trained on the spot with the
ChatML and audio specials, and the processor vLLM loads for `qwen2_audio`. Its
answers are random tokens; what the tests check is the plumbing, not the words.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
]
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
CORPUS = [
    "Hello, how can I help you today? The weather is sunny and warm.",
    "Tell me a joke. Why did the chicken cross the road? To get to the other side!",
    "You are a friendly voice assistant. Answer in one or two short spoken sentences.",
    "Do not use lists, markdown or emoji. Audio 1: what did the user say?",
    "system user assistant The quick brown fox jumps over the lazy dog. 0123456789",
]


def build_tiny_qwen2_audio(out: Path) -> Path:
    import torch
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2AudioConfig,
        Qwen2AudioEncoderConfig,
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
        Qwen2Config,
        WhisperFeatureExtractor,
    )

    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(CORPUS * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=SPECIALS[1:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    vocab = len(tokenizer)
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
        text_config=Qwen2Config(
            vocab_size=vocab,
            hidden_size=256,
            intermediate_size=512,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=32_768,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            tie_word_embeddings=False,
        ).to_dict(),
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
    gen = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    (out / "generation_config.json").write_text(json.dumps(gen))
    return out


if __name__ == "__main__":
    import sys

    print(build_tiny_qwen2_audio(Path(sys.argv[1])))
