"""Time to first audio of the synthesizers against the length of the text.

Run from the repository root:  .venv/bin/python -m bench.tts_first_audio

For Piper (the bundled voice, in its long-lived worker) and Flite (the fallback), each
prefix of one natural sentence (1, 2, 3 ... words) is synthesized REPEATS times after
a warm-up; the median wall time is the time the first chunk of a reply costs before
it can be heard. Beside it: the audio's length and the real-time factor (synthesis
time / audio time). The first-clause cut of models/speech/sentences.py is chosen from
this table: a first chunk long enough to sound like a phrase, and whose audio lasts
longer than it takes to write and synthesize the next one. Prints a table and writes
bench/results/tts_first_audio.json.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from bench.machine import machine
from bench.results import write_results
from models.errors import ModelMissing
from models.speech.tts import FliteSynthesizer, PiperSynthesizer, Synthesizer

REPEATS = 5
WORDS = [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 30, 40]
SENTENCE = (
    "The weather today is mostly sunny with a light breeze from the west, and later this "
    "afternoon a few clouds may roll in over the hills before the evening turns cool and "
    "clear, so you might want to bring a light jacket if you plan to stay outside after "
    "dark tonight."
)
PACKAGES = ["piper-tts", "onnxruntime"]
RESULTS = Path(__file__).parent / "results" / "tts_first_audio.json"


def measure(tts: Synthesizer) -> list[dict[str, Any]]:
    words = SENTENCE.split()
    tts.synthesize("Ready.")  # the worker and the voice are loaded before timing
    rows = []
    for n in WORDS:
        text = " ".join(words[:n])
        times, samples = [], 0
        for _ in range(REPEATS):
            began = time.perf_counter()
            audio = tts.synthesize(text)
            times.append(time.perf_counter() - began)
            samples = len(audio)
        synth_ms = statistics.median(times) * 1000
        audio_ms = samples / tts.sample_rate * 1000
        rows.append(
            {
                "words": n,
                "chars": len(text),
                "synth_ms": round(synth_ms, 1),
                "synth_min_ms": round(min(times) * 1000, 1),
                "audio_ms": round(audio_ms, 1),
                "rtf": round(synth_ms / audio_ms, 3) if audio_ms else None,
            }
        )
    return rows


def fit(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Least squares synth_ms = fixed + per_word * words, and the audio per word."""
    xs = [float(r["words"]) for r in rows]
    ys = [float(r["synth_ms"]) for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    per_word = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    audio_per_word = sum(r["audio_ms"] for r in rows) / sum(r["words"] for r in rows)
    return {
        "fixed_ms": round(my - per_word * mx, 1),
        "per_word_ms": round(per_word, 1),
        "audio_per_word_ms": round(audio_per_word, 1),
    }


def main() -> None:
    makers: dict[str, Any] = {"piper": PiperSynthesizer, "flite": FliteSynthesizer}
    results: dict[str, Any] = {}
    for name, make in makers.items():
        try:
            tts = make()
        except ModelMissing as exc:
            print(f"{name}: not available ({exc})")
            continue
        try:
            rows = measure(tts)
        finally:
            tts.close()
        results[name] = {"synthesizer": tts.name, "rows": rows, "fit": fit(rows)}
        print(f"\n{tts.name}: median of {REPEATS}, wall clock")
        print("words | chars | synth ms | audio ms | RTF")
        for r in rows:
            print(
                f"{r['words']} | {r['chars']} | {r['synth_ms']:.0f} | {r['audio_ms']:.0f} |"
                f" {r['rtf']:.3f}"
            )
        f = results[name]["fit"]
        print(
            f"fit: {f['fixed_ms']:.0f} ms + {f['per_word_ms']:.1f} ms/word;"
            f" {f['audio_per_word_ms']:.0f} ms of audio per word"
        )
    out = {"machine": machine(PACKAGES), "repeats": REPEATS, "text": SENTENCE, **results}
    write_results(RESULTS, out, 2)


if __name__ == "__main__":
    main()
