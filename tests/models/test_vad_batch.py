"""VadBatcher: frames of many sessions scored together on one worker thread.

The worker is held inside a round by a gate (a threading.Event), so which requests
share a round is staged exactly, never left to timing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from bench.speech import load_wav, silence
from engine.session import Session
from engine.vad import Pcm16, VadStream
from models.listening.vad import SileroOnnxBackend
from models.listening.vad_batch import VadBatcher
from models.scripted import ScriptedExecutor
from tests.support.harness import Harness

FRAME = 480  # the fake's frame: 30 ms at 16 kHz


@dataclass
class _Counter:
    frames: int = 0


class GatedBackend:
    """Scores a frame as its first sample / 1000 plus the frames its stream has
    scored before (so order and state are both visible); records each round."""

    frame_ms = 30

    def __init__(self, hold_first_round: bool = False) -> None:
        self.rounds: list[list[int]] = []  # first samples of each round's frames
        self.entered = threading.Event()  # the worker is inside a held round
        self.release = threading.Event()
        if not hold_first_round:
            self.release.set()
        self.fail_next = False

    def new_state(self) -> object:
        return _Counter()

    def score(self, state: object, frame: Pcm16) -> float:
        return self.score_batch([state], frame[None, :])[0]

    def score_batch(self, states: Sequence[object], frames: Pcm16) -> list[float]:
        self.entered.set()
        self.release.wait(10)
        self.rounds.append([int(f[0]) for f in frames])
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("model failed")
        out = []
        for state, frame in zip(states, frames, strict=True):
            assert isinstance(state, _Counter)
            out.append(int(frame[0]) / 1000 + state.frames)
            state.frames += 1
        return out


def frames(*firsts: int) -> list[Pcm16]:
    return [np.full(FRAME, v, dtype=np.int16) for v in firsts]


@pytest.fixture
def held() -> tuple[GatedBackend, VadBatcher]:
    backend = GatedBackend(hold_first_round=True)
    batcher = VadBatcher(backend)
    yield backend, batcher  # type: ignore[misc]
    backend.release.set()
    batcher.close()


async def hold_worker(backend: GatedBackend, batcher: VadBatcher) -> asyncio.Task[list[float]]:
    """A first request whose round the worker is now stuck in."""
    first = asyncio.create_task(batcher.score_frames(backend.new_state(), frames(1)))
    await asyncio.to_thread(backend.entered.wait, 10)
    return first


async def queued(batcher: VadBatcher, *requests: list[Pcm16]) -> list[asyncio.Task[list[float]]]:
    """Requests submitted (each in its inbox) before the test goes on."""
    tasks = [asyncio.create_task(batcher.score_frames(_Counter(), r)) for r in requests]
    await asyncio.sleep(0)  # each runs up to its await, after putting its request
    return tasks


async def test_requests_waiting_together_share_each_round(
    held: tuple[GatedBackend, VadBatcher],
) -> None:
    backend, batcher = held
    first = await hold_worker(backend, batcher)
    a, b, c = await queued(batcher, frames(10, 11), frames(20, 21), frames(30))
    backend.release.set()
    assert await first == [0.001]
    # One frame per stream per round; each stream's frames in order, on its own state.
    assert await a == [0.010, 1.011]
    assert await b == [0.020, 1.021]
    assert await c == [0.030]
    assert backend.rounds == [[1], [10, 20, 30], [11, 21]]
    assert batcher.rounds == 3 and batcher.batched == 6


async def test_a_full_round_leaves_the_rest_first_in_line(
    held: tuple[GatedBackend, VadBatcher],
) -> None:
    backend, batcher = held
    batcher.max_batch = 2
    first = await hold_worker(backend, batcher)
    tasks = await queued(batcher, frames(10, 11), frames(20, 21), frames(30, 31))
    backend.release.set()
    await asyncio.gather(first, *tasks)
    # The stream left out of a round is served first in the next.
    assert backend.rounds == [[1], [10, 20], [30, 11], [21, 31]]


async def test_a_failed_round_fails_its_requests_and_the_worker_goes_on(
    held: tuple[GatedBackend, VadBatcher],
) -> None:
    backend, batcher = held
    first = await hold_worker(backend, batcher)
    backend.fail_next = True
    backend.release.set()
    with pytest.raises(RuntimeError, match="model failed"):
        await first
    assert await batcher.score_frames(_Counter(), frames(5)) == [0.005]


async def test_a_cancelled_waiter_does_not_break_the_worker(
    held: tuple[GatedBackend, VadBatcher],
) -> None:
    backend, batcher = held
    first = await hold_worker(backend, batcher)
    first.cancel()
    await asyncio.sleep(0)
    backend.release.set()
    assert await batcher.score_frames(_Counter(), frames(7, 8)) == [0.007, 1.008]
    assert first.cancelled()


async def test_close_stops_the_worker_and_a_later_request_restarts_it() -> None:
    batcher = VadBatcher(GatedBackend())
    assert await batcher.score_frames(_Counter(), frames(2)) == [0.002]
    thread = batcher._thread
    assert thread is not None and thread.is_alive()
    batcher.close()
    assert not thread.is_alive()
    assert await batcher.score_frames(_Counter(), frames(3)) == [0.003]
    batcher.close()


async def test_no_frames_asks_nothing_of_the_worker() -> None:
    batcher = VadBatcher(GatedBackend())
    assert await batcher.score_frames(_Counter(), []) == []
    assert batcher._thread is None and batcher.rounds == 0


# --- with Silero -----------------------------------------------------------------


def _chunks(pcm: Pcm16, n: int = 480) -> list[Pcm16]:
    return [pcm[i : i + n] for i in range(0, len(pcm), n)]


async def test_silero_batched_scores_equal_each_stream_scored_alone() -> None:
    clips = [
        np.concatenate([silence(200), load_wav(f"{name}.wav"), silence(600)])
        for name in ("weather", "joke", "timer")
    ]
    alone = [VadStream(SileroOnnxBackend()).process(clip) for clip in clips]
    batcher = VadBatcher(SileroOnnxBackend())
    streams = [VadStream(batcher) for _ in clips]

    async def feed(stream: VadStream, clip: Pcm16) -> list[object]:
        out: list[object] = []
        for chunk in _chunks(clip):  # 20 ms appends, as a live session sends them
            out += await stream.score(chunk)
        return out

    try:
        together = await asyncio.gather(*(feed(s, c) for s, c in zip(streams, clips, strict=True)))
    finally:
        batcher.close()
    for mine, reference in zip(together, alone, strict=True):
        assert len(mine) == len(reference)
        for got, want in zip(mine, reference, strict=True):
            assert got.start_ms == want.start_ms  # type: ignore[attr-defined]
            assert got.score == pytest.approx(want.score, abs=1e-5)  # type: ignore[attr-defined]
    assert batcher.batched > batcher.rounds  # frames of different streams shared rounds


async def test_a_large_append_is_scored_off_the_loop_in_order() -> None:
    clip = np.concatenate([load_wav("lights.wav"), silence(700)])
    reference = VadStream(SileroOnnxBackend()).process(clip)
    batcher = VadBatcher(SileroOnnxBackend())
    try:
        got = await VadStream(batcher).score(clip, offload=True)
    finally:
        batcher.close()
    assert [f.start_ms for f in got] == [f.start_ms for f in reference]
    assert [f.score for f in got] == pytest.approx([f.score for f in reference], abs=1e-5)


async def test_sessions_on_a_batcher_cut_the_same_turns_as_inline_silero() -> None:
    weather, timer = load_wav("weather.wav"), load_wav("timer.wav")
    audio = np.concatenate([silence(300), weather, silence(900), timer, silence(900)])

    async def turns(vad: object) -> list[tuple[str, int]]:
        h = Harness(ScriptedExecutor(), vad)  # type: ignore[arg-type]
        async with h:
            for chunk in _chunks(audio):
                await h.append(chunk)
                await h.settle()
        return [
            (e["type"], e.get("audio_start_ms", e.get("audio_end_ms")))
            for e in h.events
            if e["type"].startswith("input_audio_buffer.speech_")
        ]

    batcher = VadBatcher(SileroOnnxBackend())
    try:
        batched = await turns(batcher)
    finally:
        batcher.close()
    inline = await turns(SileroOnnxBackend())
    assert batched == inline
    assert [kind for kind, _ in batched].count("input_audio_buffer.speech_stopped") == 2


def test_session_accepts_a_batcher_as_its_backend() -> None:
    batcher = VadBatcher(SileroOnnxBackend())
    session = Session(ScriptedExecutor(), batcher, model="m")
    assert session.user_turns.detection.vad.backend is batcher
