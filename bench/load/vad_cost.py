"""CPU per second of audio of each VAD path as a live session feeds it, resampling
included, and the share of one core that 100 live sessions take."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np

from bench.floors import _Audio
from bench.load.clips import Clip
from bench.speech import PCM_RATE
from bench.vad_backends import BACKENDS
from engine.vad import VadBackend, VadStream
from models.listening.vad import SileroOnnxBackend
from models.listening.vad_batch import VadBatcher

BATCHED_SESSIONS = 32  # streams sharing the VadBatcher in the VAD cost figure


async def vad_cost(clip: Clip) -> dict[str, dict[str, float]]:
    """CPU per second of audio of each VAD path, resampling included, fed as a live
    session feeds it (20 ms chunks; bench/vad_backends.py feeds the whole clip at
    once, which spreads the per-call cost), and the share of one core that 100 live
    sessions take."""

    def best_us(new_feed: Callable[[], Callable[[np.ndarray], object]]) -> float:
        best = float("inf")
        for _ in range(3):
            feed = new_feed()
            t0 = time.process_time()
            for chunk in clip.chunks(20):
                feed(chunk)
            best = min(best, time.process_time() - t0)
        return best * 1e6 / (len(clip.pcm) / PCM_RATE)

    def parley(make: Callable[[], VadBackend]) -> Callable[[], Callable[[np.ndarray], object]]:
        return lambda: VadStream(make()).process

    paths = {f"parley {name}": parley(make) for name, make in BACKENDS.items()}
    paths["floor soxr+webrtcvad"] = lambda: _Audio().feed
    out = {}
    for name, new_feed in paths.items():
        us = best_us(new_feed)
        out[name] = {"us_per_audio_s": us, "core_pct_100_sessions": us * 100 / 1e4}
    us, loop_us = await batched_silero_us(clip)
    out["parley silero batched"] = {
        "us_per_audio_s": us,
        "core_pct_100_sessions": us * 100 / 1e4,
        "loop_us_per_audio_s": loop_us,  # the rest is the worker thread's
    }
    return out


async def batched_silero_us(clip: Clip, sessions: int = BATCHED_SESSIONS) -> tuple[float, float]:
    """CPU per second of audio of Silero as the server runs it, and the event loop's
    part of it: `sessions` streams, each a task that awaits its 20 ms chunks one after
    the other as a session does, sharing one VadBatcher (the worker thread's CPU is the
    process's too). Best of 3."""

    async def feed(stream: VadStream) -> None:
        for chunk in clip.chunks(20):
            await stream.score(chunk)

    best = (float("inf"), float("inf"))
    for _ in range(3):
        batcher = VadBatcher(SileroOnnxBackend())
        streams = [VadStream(batcher) for _ in range(sessions)]
        try:
            t0, loop0 = time.process_time(), time.thread_time()
            await asyncio.gather(*(feed(s) for s in streams))
            best = min(best, (time.process_time() - t0, time.thread_time() - loop0))
        finally:
            batcher.close()
    audio_s = sessions * len(clip.pcm) / PCM_RATE
    return best[0] * 1e6 / audio_s, best[1] * 1e6 / audio_s
