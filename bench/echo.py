"""The echo guard (audio.input.echo_cancellation): how much of the assistant's echo
AEC3 removes (echo return loss enhancement) and how much of the user's speech over it
survives (double talk), at -10/-20 dB and 50/100/200 ms of delay, and its CPU cost.

The far end is a real-speech answer sent in 100 ms deltas at once (it plays back to
back from t=0, as a client plays it); the microphone hears it `delay` later at `gain`,
appended in 20 ms chunks on a fake clock, through the session's own path (24 kHz in,
AEC3 at 16 kHz, 24 kHz out). Double talk: another utterance starts 2 s in.

Run from the repository root:  .venv/bin/python -m bench.echo  (or `make bench`)
Prints a table and writes bench/results/echo.json.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.machine import machine
from bench.results import print_table, write_results
from bench.speech import load_wav
from models.base import PCM_RATE
from models.listening.echo import EchoCanceller, FarEnd

RESULTS = Path(__file__).parent / "results" / "echo.json"
CHUNK = PCM_RATE // 50  # 20 ms appends
DELTA = PCM_RATE // 10  # 100 ms deltas


class Clock:
    def __init__(self) -> None:
        self.t = 10.0

    def __call__(self) -> float:
        return self.t


def db(x: npt.NDArray[Any]) -> float:
    return float(10 * np.log10(np.mean(x.astype(np.float64) ** 2) + 1e-9))


def run(
    far: npt.NDArray[np.int16], near: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], float]:
    """The cancelled microphone and the CPU seconds it took."""
    clock = Clock()
    guard = EchoCanceller(FarEnd(clock))
    for i in range(0, len(far), DELTA):
        guard.far.sent(far[i : i + DELTA])
    mic = np.clip(np.rint(near), -32768, 32767).astype(np.int16)
    pieces = []
    cpu = time.process_time()
    for i in range(0, len(mic), CHUNK):
        clock.t += CHUNK / PCM_RATE
        pieces.append(guard.process(mic[i : i + CHUNK]))
    pieces.append(guard.flush())
    cpu = time.process_time() - cpu
    return np.concatenate(pieces).astype(np.float64)[: len(mic)], cpu


def main() -> None:
    far = np.concatenate([load_wav("joke"), load_wav("weather"), load_wav("lights")])
    user = load_wav("timer").astype(np.float64)
    at = 2 * PCM_RATE
    rows: list[dict[str, Any]] = []
    cpu_total, audio_total = 0.0, 0.0
    for gain_db in (-10, -20):
        for delay_ms in (50, 100, 200):
            d = delay_ms * PCM_RATE // 1000
            echo = np.concatenate([np.zeros(d), far[: len(far) - d]]) * 10 ** (gain_db / 20)
            out, cpu = run(far, echo)
            cpu_total, audio_total = cpu_total + cpu, audio_total + len(echo) / PCM_RATE
            both = echo.copy()
            both[at : at + len(user)] += user
            out_dt, _ = run(far, both)
            seg = slice(at, at + len(user))
            kept = out_dt[seg]
            gain = float(np.dot(kept, user) / np.dot(user, user))  # the user's, in the output
            rows.append(
                {
                    "echo_db": gain_db,
                    "delay_ms": delay_ms,
                    "erle_db": round(db(echo) - db(out), 1),
                    "erle_first_s_db": round(db(echo[:PCM_RATE]) - db(out[:PCM_RATE]), 1),
                    "erle_after_1s_db": round(db(echo[PCM_RATE:]) - db(out[PCM_RATE:]), 1),
                    "double_talk_user_kept_db": round(db(kept) - db(user), 1),
                    "double_talk_user_gain": round(gain, 2),
                    "double_talk_residual_db": round(db(kept - gain * user) - db(user), 1),
                }
            )
    cpu_ms = round(cpu_total / audio_total * 1000, 1)
    print("echo cancellation (AEC3, 16 kHz), real-speech far end; CPU", cpu_ms, "ms per audio s")
    # DT residual: what of the output is not the user's speech (echo and distortion).
    columns = ["echo_db", "delay_ms", "erle_db", "erle_first_s_db", "erle_after_1s_db"]
    columns += ["double_talk_user_kept_db", "double_talk_residual_db"]
    print_table(
        "echo dB | delay ms | ERLE dB | first s | after 1 s | DT user kept dB | DT residual dB",
        ([r[c] for c in columns] for r in rows),
    )
    figures = {"machine": machine(["pywebrtc-audio", "soxr"]), "cpu_ms_per_audio_s": cpu_ms}
    write_results(RESULTS, figures | {"rows": rows}, 1)


if __name__ == "__main__":
    main()
