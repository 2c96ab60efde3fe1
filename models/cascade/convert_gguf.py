"""Convert a Llama-, Qwen2- or Gemma-architecture GGUF file (e.g. SmolLM2-135M-Instruct
Q4_1, Qwen2.5-0.5B-Instruct, Gemma-2B-it) into a CTranslate2 model directory, without torch or
transformers.

Needs only: ``numpy``, ``gguf``, ``ctranslate2`` and ``tokenizers``.

What it does:

1. Reads the GGUF with ``gguf.GGUFReader`` and dequantizes every tensor to float32
   with ``gguf.quants.dequantize`` (Q4_1 / Q8_0 / F16 / F32 ... all supported).
2. Llama: undoes llama.cpp's Q/K row permutation (``convert_hf_to_gguf.py`` permutes
   ``q_proj``/``k_proj`` so that ggml can use interleaved "GPT-J style" rotary);
   after un-permuting, the weights are in Hugging Face layout and the model uses
   CTranslate2's non-interleaved rotary, exactly as ``ct2-transformers-converter``
   does for ``LlamaForCausalLM``. Qwen2 is stored unpermuted (llama.cpp runs it with
   NeoX rotary) and has biases on Q, K and V.
3. Fills a ``TransformerDecoderModelSpec`` (pre-norm, RMSNorm, gated SiLU FFN,
   rotary, GQA; Gemma: tanh-GELU, scaled embeddings, its own head size) and saves it
   with the requested weight quantization.
4. Rebuilds the tokenizer from the GGUF metadata (``tokenizer.ggml.tokens`` /
   ``merges`` / ``token_type`` for byte-level BPE; ``scores`` for SentencePiece) and
   writes a ``tokenizer.json`` (Hugging Face ``tokenizers`` format) plus the chat
   template next to the model.

Usage::

    python convert_gguf_ct2.py MODEL.gguf OUT_DIR [--quantization int8] [--force]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ctranslate2
import numpy as np
from ctranslate2.converters.converter import Converter
from ctranslate2.specs import common_spec, transformer_spec
from gguf import GGUFReader
from gguf.quants import dequantize

# Qwen2's pre-tokenizer split (its tokenizer.json): digits one by one, words with a
# leading non-letter, and runs of punctuation and space kept apart.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# GGUF token_type values (llama.cpp's llama_token_type enum).
_TOKEN_TYPE_CONTROL = 3
_TOKEN_TYPE_USER_DEFINED = 4


# --------------------------------------------------------------------------- GGUF


CONTEXT_FILE = "context.json"


def _field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    """Return the decoded value of a GGUF metadata field (or ``default``)."""
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def _unpermute_qk(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Invert llama.cpp's ``LlamaModel.permute`` applied to q_proj / k_proj.

    llama.cpp stores, per head, the rows as (dim/2, 2) interleaved pairs; Hugging
    Face / CTranslate2 (``rotary_interleave=False``) expects (2, dim/2) halves.
    ``n_head`` is the number of query heads for Q and of KV heads for K.
    """
    rows = weight.shape[0]
    head_half = rows // n_head // 2
    return (
        weight.reshape(n_head, head_half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


@dataclass(frozen=True)
class Architecture:
    """What differs between the architectures read here (``general.architecture``),
    as llama.cpp's convert_hf_to_gguf.py writes them."""

    permuted_qk: bool = False  # Llama: Q/K rows permuted for ggml's rotary
    qkv_bias: bool = False  # Qwen2: biases on Q, K and V
    activation: common_spec.Activation = common_spec.Activation.SWISH  # of the gated FFN
    # Gemma: embeddings times sqrt(hidden size); its norms' "1 + weight" is already
    # in the file (llama.cpp adds the 1), so they load as plain RMSNorm weights.
    scaled_embeddings: bool = False


ARCHITECTURES = {
    "llama": Architecture(permuted_qk=True),
    "qwen2": Architecture(qkv_bias=True),
    "gemma": Architecture(activation=common_spec.Activation.GELUTanh, scaled_embeddings=True),
}


class GGUFLlamaConverter(Converter):  # type: ignore[misc]  # untyped base
    """CTranslate2 converter for GGUF files of the ``ARCHITECTURES``."""

    def __init__(
        self, gguf_path: str | Path, progress: Callable[[int, int], None] | None = None
    ) -> None:
        self.progress = progress  # called with (layer, layers) as layers are read
        self.gguf_path = Path(gguf_path)
        self.reader = GGUFReader(str(self.gguf_path))
        arch = _field(self.reader, "general.architecture")
        if arch not in ARCHITECTURES:
            known = ", ".join(ARCHITECTURES)
            raise NotImplementedError(f"unsupported GGUF architecture: {arch!r} (known: {known})")
        self.arch: str = arch
        self.kind = ARCHITECTURES[arch]
        self._tensors = {t.name: t for t in self.reader.tensors}

    # ---- helpers -------------------------------------------------------------

    def meta(self, key: str, default: Any = None) -> Any:
        return _field(self.reader, f"{self.arch}.{key}", default)

    def tensor(self, name: str) -> np.ndarray:
        """Dequantize one tensor to float32, in numpy (row-major, HF) layout.

        GGUF shapes are listed innermost-first (ne0 = input features), so the
        numpy array comes out as (out_features, in_features) like ``nn.Linear``.
        """
        t = self._tensors[name]
        arr = dequantize(t.data, t.tensor_type)
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        # A copy: an F32 tensor dequantizes to a read-only view of the file, which
        # CTranslate2's int8 quantization would write into.
        return np.array(arr.reshape(shape), dtype=np.float32, order="C", copy=True)

    def tokens(self) -> list[str]:
        return list(_field(self.reader, "tokenizer.ggml.tokens"))

    # ---- Converter API -------------------------------------------------------

    def _load(self) -> transformer_spec.TransformerDecoderModelSpec:
        num_layers = int(self.meta("block_count"))
        num_heads = int(self.meta("attention.head_count"))
        num_heads_kv = int(self.meta("attention.head_count_kv", num_heads))
        rope_base = float(self.meta("rope.freq_base", 10000.0))
        rms_eps = float(self.meta("attention.layer_norm_rms_epsilon", 1e-5))
        hidden = int(self.meta("embedding_length"))
        head_dim = int(self.meta("attention.key_length", hidden // num_heads))
        if self.meta("rope.scaling.type") not in (None, "none"):
            raise NotImplementedError("RoPE scaling in GGUF is not handled")

        # Same settings as ctranslate2.converters.transformers' LlamaLoader, QwenLoader
        # (Qwen2) and GemmaLoader.
        spec = transformer_spec.TransformerDecoderModelSpec.from_config(
            num_layers,
            num_heads,
            activation=self.kind.activation,
            pre_norm=True,
            ffn_glu=True,  # gated FFN: down(act(gate(x)) * up(x))
            rms_norm=True,
            rotary_dim=0,  # 0 = rotate the whole head dimension
            rotary_interleave=False,  # valid once Llama's Q/K are un-permuted below
            rotary_base=rope_base,
            num_heads_kv=None if num_heads_kv == num_heads else num_heads_kv,
            head_dim=head_dim if head_dim != hidden // num_heads else None,
        )

        decoder = spec.decoder
        decoder.scale_embeddings = self.kind.scaled_embeddings
        embeddings = self.tensor("token_embd.weight")
        decoder.embeddings.weight = embeddings
        if self.kind.scaled_embeddings:
            decoder.embeddings.multiply_by_sqrt_depth = hidden**0.5
        decoder.layer_norm.gamma = self.tensor("output_norm.weight")
        if "output.weight" in self._tensors:
            decoder.projection.weight = self.tensor("output.weight")
        else:
            # tie_word_embeddings: same array object, CT2 aliases it on save.
            decoder.projection.weight = embeddings

        for i, layer in enumerate(decoder.layer):
            if self.progress is not None:
                self.progress(i, num_layers)
            p = f"blk.{i}."
            layer.self_attention.layer_norm.gamma = self.tensor(p + "attn_norm.weight")
            layer.ffn.layer_norm.gamma = self.tensor(p + "ffn_norm.weight")

            q = self.tensor(p + "attn_q.weight")
            k = self.tensor(p + "attn_k.weight")
            if self.kind.permuted_qk:
                q, k = _unpermute_qk(q, num_heads), _unpermute_qk(k, num_heads_kv)
            v = self.tensor(p + "attn_v.weight")
            # CT2 expects a fused QKV projection (rows: q, then k, then v).
            layer.self_attention.linear[0].weight = np.concatenate([q, k, v])
            if self.kind.qkv_bias:
                biases = [self.tensor(p + f"attn_{x}.bias") for x in "qkv"]
                layer.self_attention.linear[0].bias = np.concatenate(biases)
            layer.self_attention.linear[1].weight = self.tensor(p + "attn_output.weight")

            layer.ffn.linear_0.weight = self.tensor(p + "ffn_gate.weight")
            layer.ffn.linear_0_noact.weight = self.tensor(p + "ffn_up.weight")
            layer.ffn.linear_1.weight = self.tensor(p + "ffn_down.weight")

        tokens = self.tokens()
        vocab_size = embeddings.shape[0]
        if len(tokens) < vocab_size:  # pad like LlamaLoader.get_vocabulary
            tokens += [f"<extra_id_{i}>" for i in range(vocab_size - len(tokens))]
        spec.register_vocabulary(tokens[:vocab_size])

        def tok(key: str, fallback: str = "") -> str:
            idx = _field(self.reader, f"tokenizer.ggml.{key}_token_id")
            return tokens[int(idx)] if idx is not None else fallback

        spec.config.bos_token = tok("bos")
        spec.config.eos_token = tok("eos")
        spec.config.unk_token = tok("unknown")
        spec.config.layer_norm_epsilon = rms_eps
        return spec


# ---------------------------------------------------------------------- tokenizer


def build_tokenizer_json(reader: GGUFReader) -> dict[str, Any]:
    """Rebuild a Hugging Face ``tokenizer.json`` from GGUF BPE metadata.

    Supports ``tokenizer.ggml.model == "gpt2"`` (byte-level BPE). For the
    ``smollm`` pre-tokenizer this reproduces the original SmolLM2 tokenizer
    (single digits split, then GPT-2 byte-level regex, no prefix space). A
    SentencePiece vocabulary (``"llama"``: Gemma's) is `spm_tokenizer_json`'s.
    """
    model = _field(reader, "tokenizer.ggml.model")
    if model == "llama":
        return spm_tokenizer_json(reader)
    if model != "gpt2":
        raise NotImplementedError(f"unsupported GGUF tokenizer model: {model!r}")
    pre = _field(reader, "tokenizer.ggml.pre", "default")
    normalizer: dict[str, Any] | None = None
    tokens: list[str] = list(_field(reader, "tokenizer.ggml.tokens"))
    types: list[int] = list(_field(reader, "tokenizer.ggml.token_type"))
    merges: list[str] = list(_field(reader, "tokenizer.ggml.merges"))

    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": bool(_field(reader, "tokenizer.ggml.add_space_prefix", False)),
        "trim_offsets": True,
        "use_regex": True,
    }
    if pre == "smollm":
        pre_tokenizer: dict[str, Any] = {
            "type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level],
        }
    elif pre in ("gpt2", "default"):
        pre_tokenizer = byte_level
    elif pre == "qwen2":
        # Qwen2's own tokenizer.json: its split pattern, then bytes without GPT-2's regex.
        split = {
            "type": "Split",
            "pattern": {"Regex": QWEN2_PATTERN},
            "behavior": "Isolated",
            "invert": False,
        }
        pre_tokenizer = {
            "type": "Sequence",
            "pretokenizers": [split, {**byte_level, "use_regex": False}],
        }
        normalizer = {"type": "NFC"}
    else:
        raise NotImplementedError(f"unsupported GGUF pre-tokenizer: {pre!r}")

    return _bpe_json(
        reader,
        tokens,
        types,
        merges,
        normalizer=normalizer,
        pre_tokenizer=pre_tokenizer,
        post_processor={**byte_level, "type": "ByteLevel"},
        decoder={**byte_level, "type": "ByteLevel"},
        byte_fallback=False,
    )


def spm_merges(pieces: list[tuple[str, float]], vocab: dict[str, int]) -> list[str]:
    """BPE merges for a SentencePiece BPE vocabulary, which has scores instead:
    every split of a piece into two known pieces, the higher the piece's score the
    earlier (as transformers' SentencePieceExtractor derives them)."""
    found: list[tuple[str, str, float]] = []
    for piece, score in pieces:
        splits = [
            (piece[:i], piece[i:])
            for i in range(1, len(piece))
            if piece[:i] in vocab and piece[i:] in vocab
        ]
        splits.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        found += [(left, right, score) for left, right in splits]
    found.sort(key=lambda m: m[2], reverse=True)  # stable: a piece's splits keep their order
    return [f"{left} {right}" for left, right, _ in found]


def spm_tokenizer_json(reader: GGUFReader) -> dict[str, Any]:
    """A ``tokenizer.json`` for a SentencePiece BPE vocabulary (``tokenizer.ggml.model
    == "llama"``, e.g. Gemma): spaces as "▁", an optional leading one
    (``add_space_prefix``), merges from the scores, and unknown characters as byte
    tokens ("<0x41>"), as Hugging Face's own Gemma tokenizer does."""
    tokens: list[str] = list(_field(reader, "tokenizer.ggml.tokens"))
    scores: list[float] = list(_field(reader, "tokenizer.ggml.scores"))
    types: list[int] = list(_field(reader, "tokenizer.ggml.token_type"))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    normal = [(t, sc) for t, sc, ty in zip(tokens, scores, types, strict=True) if ty == 1]
    prefix = bool(_field(reader, "tokenizer.ggml.add_space_prefix", True))
    normalizers: list[dict[str, Any]] = [
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    ]
    decoders: list[dict[str, Any]] = [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ]
    if prefix:
        normalizers.insert(0, {"type": "Prepend", "prepend": "\u2581"})
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return _bpe_json(
        reader,
        tokens,
        types,
        spm_merges(normal, vocab),
        normalizer={"type": "Sequence", "normalizers": normalizers},
        pre_tokenizer=None,
        post_processor=None,
        decoder={"type": "Sequence", "decoders": decoders},
        byte_fallback=True,
    )


def _bpe_json(
    reader: GGUFReader,
    tokens: list[str],
    types: list[int],
    merges: list[str],
    *,
    normalizer: dict[str, Any] | None,
    pre_tokenizer: dict[str, Any] | None,
    post_processor: dict[str, Any] | None,
    decoder: dict[str, Any],
    byte_fallback: bool,
) -> dict[str, Any]:
    """A BPE ``tokenizer.json`` over the GGUF's vocabulary: control and user-defined
    tokens matched whole before the model splits text; with `byte_fallback`, unknown
    characters as byte tokens (SentencePiece's way)."""
    unk_id = _field(reader, "tokenizer.ggml.unknown_token_id")
    added = [
        {
            "id": i,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": types[i] == _TOKEN_TYPE_CONTROL,
        }
        for i, tok in enumerate(tokens)
        if types[i] in (_TOKEN_TYPE_CONTROL, _TOKEN_TYPE_USER_DEFINED)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post_processor,
        "decoder": decoder,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": tokens[int(unk_id)] if unk_id is not None else None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": byte_fallback,
            "byte_fallback": byte_fallback,
            "ignore_merges": False,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": merges,  # "a b" strings, as in HF tokenizer.json
        },
    }


# --------------------------------------------------------------------------- main


def context_length(reader: GGUFReader) -> int | None:
    """The context length the model was trained for (`<arch>.context_length`)."""
    value = _field(reader, f"{_field(reader, 'general.architecture')}.context_length")
    return None if value is None else int(value)


def convert(
    gguf_path: str | Path,
    output_dir: str | Path,
    quantization: str | None = "int8",
    force: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Convert ``gguf_path`` into a CTranslate2 model directory at ``output_dir``.

    ``quantization`` is the on-disk weight type (int8, float32, int8_float32, ...);
    CTranslate2 can still load an int8 model with ``compute_type="float32"``.
    Writes model.bin, config.json, vocabulary.json, tokenizer.json,
    chat_template.jinja and context.json (its context length).
    """
    converter = GGUFLlamaConverter(gguf_path, progress)
    out = Path(converter.convert(str(output_dir), quantization=quantization, force=force))
    reader = converter.reader
    (out / "tokenizer.json").write_text(
        json.dumps(build_tokenizer_json(reader), ensure_ascii=False), encoding="utf-8"
    )
    template = _field(reader, "tokenizer.chat_template")
    if template:
        (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    write_context(out, reader)
    return out


def write_context(out: Path, reader: GGUFReader) -> None:
    (out / CONTEXT_FILE).write_text(json.dumps({"context_length": context_length(reader)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gguf", help="input .gguf file (llama, qwen2 or gemma architecture)")
    parser.add_argument("output_dir", help="CTranslate2 model directory to create")
    parser.add_argument(
        "--quantization",
        default="int8",
        choices=sorted(ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES),
        help="weight type stored on disk (default: int8)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite output_dir")
    args = parser.parse_args()
    start = time.perf_counter()
    out = convert(args.gguf, args.output_dir, args.quantization, args.force)
    size = sum(f.stat().st_size for f in out.iterdir()) / 1e6
    print(f"converted {args.gguf} -> {out} ({size:.1f} MB) in {time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
