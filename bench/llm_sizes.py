"""How fast the cascade's language model runs at the sizes a user would bring
(`--llm-model PATH.gguf`), on this machine: time to the first token of a reply and
tokens per second after it, as Parley loads the model (models/cascade/llm.py).

Run from the repository root:  .venv/bin/python -m bench.llm_sizes

No model is downloaded: speed depends on a model's shapes, not on its weights, so
each size is a GGUF of random weights with the real model's architecture and
dimensions (from its config.json), written with the `gguf` package and converted by
Parley's own converter, as a real one would be. The bundled SmolLM2-135M runs as
itself. The answers are noise; the figures are the speed a real model of that size
has here. Each model is timed on a 150-token prompt (a system message and a
question) and 48 generated tokens, REPEATS times; the median is reported. Prints a
table and writes bench/results/llm_sizes.json. About 15 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.machine import machine

PROMPT_TOKENS = 150
NEW_TOKENS = 48
REPEATS = 3
RESULTS = Path(__file__).parent / "results" / "llm_sizes.json"


@dataclass(frozen=True)
class Shape:
    """A model's architecture and dimensions, as its config.json gives them."""

    name: str
    arch: str  # general.architecture: llama, qwen2, gemma
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    head_dim: int | None = None  # None: hidden / heads

    @property
    def params(self) -> int:
        head_dim = self.head_dim or self.hidden // self.heads
        attention = self.hidden * head_dim * (2 * self.heads + 2 * self.kv_heads)
        per_layer = attention + 3 * self.hidden * self.ffn
        return self.layers * per_layer + self.vocab * self.hidden  # embeddings tied


SHAPES = [
    Shape("SmolLM2-360M-Instruct", "llama", 960, 32, 15, 5, 2560, 49152),
    Shape("Qwen2.5-0.5B-Instruct", "qwen2", 896, 24, 14, 2, 4864, 151936),
    Shape("Llama-3.2-1B-Instruct", "llama", 2048, 16, 32, 8, 8192, 128256),
    Shape("Qwen2.5-1.5B-Instruct", "qwen2", 1536, 28, 12, 2, 8960, 151936),
    Shape("gemma-2b-it", "gemma", 2048, 18, 8, 1, 16384, 256000, head_dim=256),
]


def write_random_gguf(shape: Shape, path: Path, seed: int = 0) -> Path:
    """A GGUF of `shape` with random F16 weights and a placeholder vocabulary."""
    from gguf import GGUFWriter

    rng = np.random.default_rng(seed)
    head_dim = shape.head_dim or shape.hidden // shape.heads
    writer = GGUFWriter(str(path), shape.arch)
    writer.add_block_count(shape.layers)
    writer.add_context_length(4096)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(10_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([f"t{i}" for i in range(shape.vocab)])
    writer.add_token_types([3] * 3 + [1] * (shape.vocab - 3))
    writer.add_token_merges(["t 1"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)

    def put(name: str, *dims: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(dims, np.float32) * 0.02).astype(np.float16))

    put("token_embd.weight", shape.vocab, shape.hidden)
    put("output_norm.weight", shape.hidden)
    q, kv = shape.heads * head_dim, shape.kv_heads * head_dim
    for i in range(shape.layers):
        p = f"blk.{i}."
        put(p + "attn_norm.weight", shape.hidden)
        put(p + "attn_q.weight", q, shape.hidden)
        put(p + "attn_k.weight", kv, shape.hidden)
        put(p + "attn_v.weight", kv, shape.hidden)
        put(p + "attn_output.weight", shape.hidden, q)
        put(p + "ffn_norm.weight", shape.hidden)
        put(p + "ffn_gate.weight", shape.ffn, shape.hidden)
        put(p + "ffn_up.weight", shape.ffn, shape.hidden)
        put(p + "ffn_down.weight", shape.hidden, shape.ffn)
        if shape.arch == "qwen2":
            put(p + "attn_q.bias", q)
            put(p + "attn_k.bias", kv)
            put(p + "attn_v.bias", kv)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def time_model(model_dir: Path, vocab: int) -> dict[str, Any]:
    """First-token latency and decode speed as Parley runs the model here."""
    import ctranslate2

    from models.cascade.llm import cpu_flags, default_compute_type

    compute_type = default_compute_type(cpu_flags())
    threads = 1 if compute_type == "int8" else 2
    generator = ctranslate2.Generator(
        str(model_dir), device="cpu", compute_type=compute_type, intra_threads=threads
    )
    tokens = json.loads((model_dir / "vocabulary.json").read_text())
    rng = np.random.default_rng(1)
    first_ms, rates = [], []
    try:
        for _ in range(REPEATS + 1):  # the first run warms up
            prompt = [tokens[int(t)] for t in rng.integers(3, vocab, PROMPT_TOKENS)]
            began = time.perf_counter()
            stamps = []
            for _step in generator.generate_tokens(
                prompt, max_length=NEW_TOKENS, min_length=NEW_TOKENS, sampling_topk=1
            ):
                stamps.append(time.perf_counter())
            first_ms.append((stamps[0] - began) * 1000)
            rates.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))
    finally:
        generator.unload_model()
    return {
        "compute_type": compute_type,
        "threads": threads,
        "first_token_ms": round(statistics.median(first_ms[1:]), 1),
        "tokens_per_s": round(statistics.median(rates[1:]), 1),
    }


def measure(shape: Shape | None, work: Path) -> dict[str, Any]:
    from models.cascade.convert_gguf import convert
    from models.cascade.llm import bundled_gguf

    if shape is None:  # the bundled model, as itself
        gguf, name, params, vocab = bundled_gguf(), "SmolLM2-135M-Instruct (bundled)", 135e6, 49152
    else:
        began = time.perf_counter()
        gguf = write_random_gguf(shape, work / f"{shape.name}.gguf")
        print(f"  wrote {gguf.name} in {time.perf_counter() - began:.0f} s", flush=True)
        name, params, vocab = shape.name, shape.params, shape.vocab
    began = time.perf_counter()
    model_dir = convert(gguf, work / f"{name}-ct2", quantization="float32", force=True)
    converted_s = time.perf_counter() - began
    timing = time_model(model_dir, vocab)
    for path in (gguf, model_dir):
        if path.is_relative_to(work):
            _remove(path)
    row = {"model": name, "params_m": round(params / 1e6), "convert_s": round(converted_s, 1)}
    return {**row, **timing, "shape": None if shape is None else asdict(shape)}


def _remove(path: Path) -> None:
    if path.is_dir():
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    else:
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="model names to time (default: all)")
    args = parser.parse_args()
    shapes: list[Shape | None] = [None, *SHAPES]
    if args.only:
        shapes = [s for s in shapes if s is not None and s.name in args.only]
    rows = []
    with tempfile.TemporaryDirectory(prefix="parley-llm-sizes-") as tmp:
        for shape in shapes:
            print(f"{shape.name if shape else 'bundled'} ...", flush=True)
            rows.append(measure(shape, Path(tmp)))
    print(f"\n{'model':34} {'params':>7} {'compute':>12} {'first token':>12} {'tokens/s':>9}")
    for r in rows:
        compute = f"{r['compute_type']} x{r['threads']}"
        print(
            f"{r['model']:34} {r['params_m']:>6}M {compute:>12} "
            f"{r['first_token_ms']:>9.0f} ms {r['tokens_per_s']:>9.1f}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": machine(["ctranslate2", "gguf"]),
        "prompt_tokens": PROMPT_TOKENS,
        "new_tokens": NEW_TOKENS,
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
