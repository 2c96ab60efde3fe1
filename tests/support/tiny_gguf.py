"""Tiny random GGUF language models of each architecture the converter reads, written
with the `gguf` package the way llama.cpp's convert_hf_to_gguf.py writes them, and the
reference forward pass their logits must match (numpy, float64, Hugging Face layout).

Random weights in Hugging Face layout go through what llama.cpp does to them on the
way to a GGUF (Llama's Q/K row permutation); the reference reads the unpermuted ones,
so a converter that got the layout, the biases or the rotary wrong disagrees. The
norms are kept as the factor applied, which is what a GGUF holds for each of them
(for Gemma llama.cpp writes its "1 + weight").

Gemma's differ most: its head size is not hidden size / heads, its embeddings are
scaled by sqrt(hidden size), its gated FFN uses tanh-GELU, and its vocabulary is
SentencePiece's (scores instead of merges, "▁" for spaces, byte tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]

VOCAB = 48
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
FFN = 96
LAYERS = 2
RMS_EPS = 1e-5
ROPE_BASE = 10_000.0
GEMMA_HEAD_DIM = 32  # 4 heads of 32 over a hidden size of 64, as Gemma-7B has 16 x 256 over 3072
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]
TOKENS = SPECIALS + [chr(ord("a") + i % 26) * (1 + i // 26) for i in range(VOCAB - len(SPECIALS))]


# Gemma's: SentencePiece pieces; merged pieces with falling scores (the order BPE
# merges them in); "<0x21>" stands for "!" (byte fallback).
SPM_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
SPM_BYTES = ["<0x21>"]
SPM_CHARS = ["\u2581"] + [chr(ord("a") + i) for i in range(26)]
SPM_MERGED = ["ab", "\u2581a", "\u2581ab", "ba", "abc", "\u2581b", "cd", "\u2581c"]
SPM_MERGED += ["de", "ef", "fg", "gh", "hi", "ij"]
SPM_TOKENS = SPM_SPECIALS + SPM_BYTES + SPM_CHARS + SPM_MERGED
assert len(SPM_TOKENS) == VOCAB


def tokens_of(arch: str) -> list[str]:
    return SPM_TOKENS if arch == "gemma" else TOKENS


def head_dim_of(arch: str) -> int:
    return GEMMA_HEAD_DIM if arch == "gemma" else HIDDEN // HEADS


@dataclass(frozen=True)
class Layer:
    attn_norm: Array
    q: Array
    k: Array
    v: Array
    o: Array
    ffn_norm: Array
    gate: Array
    up: Array
    down: Array
    q_bias: Array | None = None
    k_bias: Array | None = None
    v_bias: Array | None = None


@dataclass(frozen=True)
class TinyModel:
    arch: str
    embeddings: Array
    layers: list[Layer]
    norm: Array
    output: Array | None  # None: tied to the embeddings


def random_model(arch: str, seed: int = 0) -> TinyModel:
    rng = np.random.default_rng(seed)
    head_dim = head_dim_of(arch)

    def w(*shape: int) -> Array:
        return rng.normal(0, 0.2, shape)

    def norm() -> Array:
        return 1.0 + rng.normal(0, 0.1, HIDDEN)

    biased = arch == "qwen2"
    layers = [
        Layer(
            norm(),
            w(HEADS * head_dim, HIDDEN),
            w(KV_HEADS * head_dim, HIDDEN),
            w(KV_HEADS * head_dim, HIDDEN),
            w(HIDDEN, HEADS * head_dim),
            norm(),
            w(FFN, HIDDEN),
            w(FFN, HIDDEN),
            w(HIDDEN, FFN),
            w(HEADS * head_dim) if biased else None,
            w(KV_HEADS * head_dim) if biased else None,
            w(KV_HEADS * head_dim) if biased else None,
        )
        for _ in range(LAYERS)
    ]
    # Qwen2.5-0.5B and Gemma tie them.
    output = None if arch in ("qwen2", "gemma") else w(VOCAB, HIDDEN)
    return TinyModel(arch, w(VOCAB, HIDDEN), layers, norm(), output)


def _llama_permute(weight: Array, n_head: int) -> Array:
    """llama.cpp's LlamaModel.permute (convert_hf_to_gguf.py)."""
    rows = weight.shape[0]
    return (
        weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def write_gguf(model: TinyModel, path: Path, chat_template: str | None = None) -> Path:
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), model.arch)
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    if model.arch == "gemma":
        writer.add_key_length(GEMMA_HEAD_DIM)
        writer.add_value_length(GEMMA_HEAD_DIM)
        _write_spm_vocabulary(writer)
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("qwen2" if model.arch == "qwen2" else "default")
        writer.add_token_list(TOKENS)
        writer.add_token_types([3] * len(SPECIALS) + [1] * (VOCAB - len(SPECIALS)))
        writer.add_token_merges(["a a", "b b"])  # "aa", "bb" are tokens
        writer.add_unk_token_id(0)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    def put(name: str, array: Array) -> None:
        writer.add_tensor(name, array.astype(np.float32))

    put("token_embd.weight", model.embeddings)
    put("output_norm.weight", model.norm)
    if model.output is not None:
        put("output.weight", model.output)
    for i, layer in enumerate(model.layers):
        p = f"blk.{i}."
        q, k = layer.q, layer.k
        if model.arch == "llama":
            q, k = _llama_permute(q, HEADS), _llama_permute(k, KV_HEADS)
        put(p + "attn_norm.weight", layer.attn_norm)
        put(p + "attn_q.weight", q)
        put(p + "attn_k.weight", k)
        put(p + "attn_v.weight", layer.v)
        put(p + "attn_output.weight", layer.o)
        put(p + "ffn_norm.weight", layer.ffn_norm)
        put(p + "ffn_gate.weight", layer.gate)
        put(p + "ffn_up.weight", layer.up)
        put(p + "ffn_down.weight", layer.down)
        for x, bias in (("q", layer.q_bias), ("k", layer.k_bias), ("v", layer.v_bias)):
            if bias is not None:
                put(p + f"attn_{x}.bias", bias)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _write_spm_vocabulary(writer: Any) -> None:
    """Gemma's vocabulary as llama.cpp's `_set_vocab_sentencepiece` writes it."""
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(SPM_TOKENS)
    scores = [0.0] * (len(SPM_TOKENS) - len(SPM_MERGED)) + [
        -1.0 - i for i in range(len(SPM_MERGED))
    ]
    writer.add_token_scores(scores)
    types = [3] * len(SPM_SPECIALS) + [6] * len(SPM_BYTES)
    writer.add_token_types(types + [1] * (VOCAB - len(types)))
    writer.add_add_space_prefix(False)  # Gemma's SentencePiece adds no dummy prefix
    writer.add_unk_token_id(3)
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)


def _gelu_tanh(x: Array) -> Array:
    out: Array = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return out


def _rms(x: Array, gamma: Array) -> Array:
    out: Array = x / np.sqrt((x * x).mean(-1, keepdims=True) + RMS_EPS) * gamma
    return out


def _rope(x: Array) -> Array:
    """Rotary on (heads, time, head_dim), halves rotated (Hugging Face's rotate_half)."""
    half = x.shape[-1] // 2
    inv = ROPE_BASE ** (-np.arange(half) / half)
    angles = np.arange(x.shape[1])[:, None] * inv[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def reference_logits(model: TinyModel, ids: list[int]) -> Array:
    """The model's logits at each position of `ids` (time, vocab)."""
    head_dim = head_dim_of(model.arch)
    x = model.embeddings[ids]
    if model.arch == "gemma":
        x = x * np.sqrt(HIDDEN)
    t = len(ids)
    causal = np.triu(np.full((t, t), -np.inf), 1)
    for layer in model.layers:
        h = _rms(x, layer.attn_norm)
        q, k, v = h @ layer.q.T, h @ layer.k.T, h @ layer.v.T
        if layer.q_bias is not None and layer.k_bias is not None and layer.v_bias is not None:
            q, k, v = q + layer.q_bias, k + layer.k_bias, v + layer.v_bias
        q = _rope(q.reshape(t, HEADS, head_dim).transpose(1, 0, 2))
        k = _rope(k.reshape(t, KV_HEADS, head_dim).transpose(1, 0, 2))
        v = v.reshape(t, KV_HEADS, head_dim).transpose(1, 0, 2)
        k, v = np.repeat(k, HEADS // KV_HEADS, 0), np.repeat(v, HEADS // KV_HEADS, 0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(head_dim) + causal
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attended = (weights @ v).transpose(1, 0, 2).reshape(t, HEADS * head_dim)
        x = x + attended @ layer.o.T
        h = _rms(x, layer.ffn_norm)
        gate = h @ layer.gate.T
        act = _gelu_tanh(gate) if model.arch == "gemma" else gate / (1 + np.exp(-gate))
        x = x + (act * (h @ layer.up.T)) @ layer.down.T
    out = model.output if model.output is not None else model.embeddings
    logits: Array = _rms(x, model.norm) @ out.T
    return logits


# Qwen2.5-Instruct's chat template, abridged (its branches for `tool_calls` and `tool`
# messages left out: Parley writes those as text): ChatML, with the tools block.
QWEN25_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}\n"
    "    {%- else %}{{- 'You are Qwen, created by Alibaba Cloud.' }}{%- endif %}\n"
    '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the '
    "user query.\\n\\nYou are provided with function signatures within <tools></tools> "
    'XML tags:\\n<tools>" }}\n'
    '    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}\n'
    '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function '
    "name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call>'
    '<|im_end|>\\n" }}\n'
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.role != 'system' or not loop.first %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
)

# Gemma's (1.x) chat template: no system role, user and model turns alternating.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)
