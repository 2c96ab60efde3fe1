"""Smart Turn v3.2 cost on this machine: features, model, and whether batching pays.

Run from the repository root:  .venv/bin/python -m bench.turn_model  (not part of `make bench`)

Scores the speech fixtures (resampled to 16 kHz, 200 ms of silence after each) the
way SmartTurnModel does, one thread, intra_op_num_threads=1: milliseconds for the
features, for one model run, and per item for runs of 1, 2, 4 and 8 windows at once
(several sessions asking together). Prints a table, writes
bench/results/turn_model.json. Batching is worth implementing only if the per-item
time of a batch falls well below a single run's.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soxr

from bench.speech import FIXTURES, PCM_RATE, load_wav, silence
from models.listening.smart_turn import bundled_smart_turn, open_session
from models.listening.turn_features import RATE, features

OUT = Path(__file__).parent / "results" / "turn_model.json"
ROUNDS = 10
BATCHES = (1, 2, 4, 8)


def at_16k(pcm: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
    resampled = np.asarray(soxr.resample(pcm.astype(np.float32) / 32768.0, PCM_RATE, RATE))
    out: npt.NDArray[np.int16] = np.clip(np.round(resampled * 32768.0), -32768, 32767).astype(
        np.int16
    )
    return out


def timings_ms(work: Callable[[], object], rounds: int) -> tuple[float, float]:
    """(best, median) of `rounds` calls after a warm-up: on a shared machine the best
    is the work's own cost, the median what a busy server sees."""
    work()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1000)
    return min(times), statistics.median(times)


def main() -> None:
    runner = open_session(bundled_smart_turn())
    turns = [at_16k(np.concatenate([load_wav(name), silence(200)])) for name in FIXTURES]
    windows = np.stack([features(t) for t in turns])
    feat_best, feat_median = timings_ms(lambda: features(turns[0]), ROUNDS)
    rows: list[dict[str, float]] = []
    for size in BATCHES:
        batch = np.resize(windows, (size, *windows.shape[1:])).astype(np.float32)
        feeds = {"input_features": batch}
        best, median = timings_ms(partial(runner.run, None, feeds), ROUNDS)
        rows.append(
            {
                "batch": size,
                "best_ms_per_item": round(best / size, 1),
                "median_ms_per_item": round(median / size, 1),
            }
        )
    print(
        f"features (numpy log-mel, 8 s window): best {feat_best:.1f} ms, median {feat_median:.1f}"
    )
    print(f"{'batch':>5} {'best ms/item':>13} {'median ms/item':>15}")
    for row in rows:
        print(f"{row['batch']:>5} {row['best_ms_per_item']:>13} {row['median_ms_per_item']:>15}")
    OUT.parent.mkdir(exist_ok=True)
    result = {"features_ms": {"best": round(feat_best, 1), "median": round(feat_median, 1)}}
    OUT.write_text(json.dumps({**result, "model": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
