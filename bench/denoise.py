"""The cost of audio.input.noise_reduction: CPU per second of audio and how much it
suppresses, per type, on a speech fixture under white and babble-like noise.

Run from the repository root:  .venv/bin/python -m bench.denoise  (or `make bench`)
Prints a table and writes bench/results/denoise.json.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.machine import machine
from bench.results import print_table, write_results
from bench.speech import load_wav, silence
from models.base import PCM_RATE
from models.listening.denoise import Denoiser

RESULTS = Path(__file__).parent / "results" / "denoise.json"
CHUNK = PCM_RATE // 50  # 20 ms appends
REPEATS = 5


def db(pcm: npt.NDArray[np.int16]) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(pcm.astype(np.float64) ** 2)) + 1e-9))


def measure(kind: str, mixed: npt.NDArray[np.int16], quiet: slice) -> dict[str, Any]:
    best = float("inf")
    out = np.zeros(0, np.int16)
    for _ in range(REPEATS):
        denoiser = Denoiser(kind)  # type: ignore[arg-type]
        t = time.process_time()
        pieces = [denoiser.process(mixed[i : i + CHUNK]) for i in range(0, len(mixed), CHUNK)]
        out = np.concatenate([*pieces, denoiser.flush()])
        best = min(best, time.process_time() - t)
    seconds = len(mixed) / PCM_RATE
    return {
        "type": kind,
        "cpu_ms_per_audio_s": round(best / seconds * 1000, 2),
        "noise_db_before": round(db(mixed[quiet]), 1),
        "noise_db_after": round(db(out[quiet]), 1),
    }


def main() -> None:
    clean = np.concatenate([silence(1000), load_wav("weather"), silence(500)])
    noise = np.random.default_rng(1).normal(0, 1000, len(clean))
    mixed = np.clip(clean + noise, -32768, 32767).astype(np.int16)
    quiet = slice(PCM_RATE // 10, PCM_RATE * 9 // 10)  # noise alone
    rows = [measure(kind, mixed, quiet) for kind in ("near_field", "far_field")]
    print("noise reduction, 20 ms appends, best of", REPEATS)
    print_table(
        "type | CPU ms per audio s | noise dBFS before | after",
        (
            [
                r["type"],
                r["cpu_ms_per_audio_s"],
                f"{r['noise_db_before'] - 90.3:.1f}",
                f"{r['noise_db_after'] - 90.3:.1f}",
            ]
            for r in rows
        ),
    )
    write_results(RESULTS, {"machine": machine(["pywebrtc-audio", "soxr"]), "rows": rows}, 1)


if __name__ == "__main__":
    main()
