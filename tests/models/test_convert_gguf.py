"""The GGUF → CTranslate2 converter (models/cascade/convert_gguf.py) on tiny random
GGUFs of each architecture, built at test time: the converted model's logits match a
reference forward pass of the same weights."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from models.cascade.convert_gguf import convert
from models.cascade.llm import Ct2LanguageModel, read_context_length
from models.cascade.text import ChatMessage
from tests.support.tiny_gguf import (
    GEMMA_TEMPLATE,
    QWEN25_TEMPLATE,
    TOKENS,
    random_model,
    reference_logits,
    tokens_of,
    write_gguf,
)

IDS = [1, 7, 12, 3, 30, 30, 5, 44, 9, 2]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma"])
def test_converted_logits_match_the_reference(arch: str, tmp_path: Path) -> None:
    import ctranslate2

    model = random_model(arch)
    gguf = write_gguf(model, tmp_path / f"tiny-{arch}.gguf")
    out = convert(gguf, tmp_path / "ct2", quantization="float32")
    generator = ctranslate2.Generator(str(out), compute_type="float32")
    logits = np.array(generator.forward_batch([[tokens_of(arch)[i] for i in IDS]]))[0]
    expected = reference_logits(model, IDS)
    assert logits.shape == expected.shape
    assert np.abs(logits - expected).max() < 1e-3 * np.abs(expected).max()
    assert (logits.argmax(-1) == expected.argmax(-1)).all()


def test_the_reference_tells_a_wrong_layout_apart(tmp_path: Path) -> None:
    """The check has teeth: Qwen2 weights read as Llama's (unpermuted, no biases)
    give other logits."""
    model = random_model("qwen2")
    as_llama = type(model)("llama", model.embeddings, model.layers, model.norm, model.output)
    gguf = write_gguf(as_llama, tmp_path / "tiny.gguf")  # permuted, biases left out
    import ctranslate2

    out = convert(gguf, tmp_path / "ct2", quantization="float32")
    generator = ctranslate2.Generator(str(out), compute_type="float32")
    logits = np.array(generator.forward_batch([[TOKENS[i] for i in IDS]]))[0]
    assert np.abs(logits - reference_logits(model, IDS)).max() > 0.1


def test_an_unknown_architecture_is_refused_by_name(tmp_path: Path) -> None:
    model = random_model("llama")
    falcon = type(model)("falcon", model.embeddings, model.layers, model.norm, model.output)
    gguf = write_gguf(falcon, tmp_path / "x.gguf")
    with pytest.raises(NotImplementedError, match=r"'falcon'.*llama, qwen2, gemma"):
        convert(gguf, tmp_path / "ct2")


def test_a_qwen2_tokenizer_splits_as_qwen2s_own(tmp_path: Path) -> None:
    """Qwen2's pre-tokenizer (digits one by one, a word keeps the space before it)."""
    from tokenizers import Tokenizer

    out = convert(write_gguf(random_model("qwen2"), tmp_path / "q.gguf"), tmp_path / "ct2")
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tokenizer.pre_tokenizer is not None
    pieces = [p for p, _ in tokenizer.pre_tokenizer.pre_tokenize_str("It's 123 ok")]
    assert pieces == ["It", "'s", "Ġ", "1", "2", "3", "Ġok"]


def test_the_context_length_is_kept_beside_the_conversion(tmp_path: Path) -> None:
    """What the session's truncation bounds the embedded model's prompt by; a
    conversion made before it was kept reads it from the GGUF once."""
    gguf = write_gguf(random_model("llama"), tmp_path / "tiny.gguf")
    out = convert(gguf, tmp_path / "ct2", quantization="float32")
    assert read_context_length(out, tmp_path / "absent.gguf") == 256  # not read again
    (out / "context.json").unlink()
    assert read_context_length(out, gguf) == 256
    assert (out / "context.json").is_file()


def test_the_cascade_runs_a_qwen2_gguf_whose_template_calls_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--llm-model` with a Qwen2 GGUF: converted on first use, it streams a reply,
    and its chat template (Qwen2.5's tools block) makes the cascade give it tools;
    the bundled SmolLM2's does not (tests/models/test_tool_text.py)."""
    monkeypatch.setenv("PARLEY_CACHE_DIR", str(tmp_path / "cache"))
    model = random_model("qwen2")
    gguf = write_gguf(model, tmp_path / "qwen.gguf", chat_template=QWEN25_TEMPLATE)
    llm = Ct2LanguageModel(gguf, temperature=0.0)
    try:
        assert llm.calls_tools
        messages = [ChatMessage("system", "Be brief."), ChatMessage("user", "aa bb")]
        reply = "".join(llm.stream(messages, max_tokens=6, stop=threading.Event()))
        assert reply  # random words, but words: the tokenizer and the weights load
    finally:
        llm.close()
    plain = write_gguf(model, tmp_path / "plain.gguf", chat_template="{{ messages }}")
    other = Ct2LanguageModel(plain)
    try:
        assert not other.calls_tools
    finally:
        other.close()


def test_a_gemma_sentencepiece_vocabulary_tokenizes_as_sentencepiece(tmp_path: Path) -> None:
    """Merges come from the scores, spaces are "▁" with no leading one (Gemma's), and
    a character with no piece falls back to its byte token; decoding gives the text."""
    from tokenizers import Tokenizer

    out = convert(write_gguf(random_model("gemma"), tmp_path / "g.gguf"), tmp_path / "ct2")
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    encoded = tokenizer.encode("ab ab!", add_special_tokens=False)
    assert encoded.tokens == ["ab", "\u2581ab", "<0x21>"]
    assert tokenizer.decode(encoded.ids) == "ab ab!"
    assert tokenizer.encode("<start_of_turn>ba", add_special_tokens=False).tokens == [
        "<start_of_turn>",
        "ba",
    ]


def test_the_cascade_runs_a_gemma_gguf_in_its_own_chat_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--llm-model` with a Gemma GGUF: its template (no system role) renders the
    prompt, its <end_of_turn> ends the reply, and it is not given tools."""
    monkeypatch.setenv("PARLEY_CACHE_DIR", str(tmp_path / "cache"))
    gguf = write_gguf(random_model("gemma"), tmp_path / "gemma.gguf", chat_template=GEMMA_TEMPLATE)
    llm = Ct2LanguageModel(gguf)
    try:
        assert not llm.calls_tools
        assert llm.end_tokens == ["<end_of_turn>", "<eos>"]
        messages = [ChatMessage("system", "Be brief."), ChatMessage("user", "ab")]
        assert llm.prompt(messages) == (
            "<bos><start_of_turn>user\nBe brief.\n\nab<end_of_turn>\n<start_of_turn>model\n"
        )
        reply = "".join(llm.stream(messages, max_tokens=6, stop=threading.Event()))
        assert reply
    finally:
        llm.close()
