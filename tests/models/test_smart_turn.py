"""Smart Turn v3.2 on onnxruntime: it tells a finished question from one cut at a
pause, falls back (None, one warning) when it cannot load or score, and scores on
its own thread so the event loop keeps serving other sessions meanwhile."""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import sys
import threading
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from models.errors import ModelMissing
from models.inventory import installed_models
from models.listening import smart_turn
from models.listening.smart_turn import (
    REFERENCE_THRESHOLD,
    SmartTurnModel,
    bundled_smart_turn,
    load_smart_turn,
)

QUESTION = Path(__file__).parent / "fixtures" / "turn_question.wav"  # 16 kHz
PAUSE_BEFORE_TODAY = 16 * 960  # samples: "What is the weather like" | "today?"
SILENCE = np.zeros(16 * 200, dtype=np.int16)  # what the VAD hears before it asks


def question() -> npt.NDArray[np.int16]:
    with wave.open(str(QUESTION)) as w:
        assert w.getframerate() == 16_000
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)


@pytest.fixture(scope="module")
def model() -> SmartTurnModel:
    loaded = load_smart_turn()
    assert loaded is not None, "pip install --no-deps pipecat-ai==1.14.0 (make does)"
    return loaded


async def test_a_finished_question_scores_far_above_one_cut_at_a_pause(
    model: SmartTurnModel,
) -> None:
    pcm = question()
    finished = await model.probability(np.concatenate([pcm, SILENCE]))
    cut = await model.probability(np.concatenate([pcm[:PAUSE_BEFORE_TODAY], SILENCE]))
    assert finished is not None and cut is not None
    # Observed 0.95 and 0.02 (cuts anywhere in that pause: 0.015-0.04).
    assert finished > 0.9
    assert cut < 0.1 < REFERENCE_THRESHOLD


async def test_a_turn_longer_than_8_s_is_scored_on_its_last_8_s(model: SmartTurnModel) -> None:
    long = np.concatenate([np.tile(question(), 6), SILENCE])
    assert long.size > 8 * 16_000
    assert await model.probability(long) == await model.probability(long[-8 * 16_000 :])


def test_the_onnx_file_comes_from_the_pipecat_wheel() -> None:
    path = bundled_smart_turn()
    assert path.name == "smart-turn-v3.2-cpu.onnx" and path.stat().st_size > 8_000_000
    turn = [m for m in installed_models() if m.stage == "turn"]
    assert len(turn) == 1 and turn[0].path == str(path) and turn[0].license == "BSD-2-Clause"
    assert load_smart_turn(path) is not None
    assert "pipecat" not in sys.modules  # importing it would pull a voice-agent framework


def test_no_pipecat_package_is_a_model_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def absent(name: str) -> importlib.metadata.Distribution:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", absent)
    with pytest.raises(ModelMissing, match="pipecat-ai"):
        bundled_smart_turn()


def test_a_missing_file_falls_back_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=smart_turn.__name__):
        assert load_smart_turn(tmp_path / "nothing.onnx") is None
    assert "nothing.onnx is missing" in caplog.text


def test_a_corrupt_file_falls_back_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"not a model")
    with caplog.at_level(logging.WARNING, logger=smart_turn.__name__):
        assert load_smart_turn(corrupt) is None
    assert "corrupt.onnx" in caplog.text


class _Failing:
    def run(self, output_names: None, feeds: dict[str, npt.NDArray[np.float32]]) -> list[object]:
        raise RuntimeError("onnxruntime exploded")


async def test_a_failing_score_is_none_and_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    model = SmartTurnModel(_Failing())
    with caplog.at_level(logging.WARNING, logger=smart_turn.__name__):
        assert await model.probability(question()) is None
        assert await model.probability(question()) is None
    assert [r.message for r in caplog.records].count(
        "Smart Turn scoring failed (onnxruntime exploded); using fixed silence instead"
    ) == 1
    model.close()


class _Garbage:
    def run(self, output_names: None, feeds: dict[str, npt.NDArray[np.float32]]) -> list[object]:
        return [np.array([[np.nan]], dtype=np.float32)]


async def test_an_output_that_is_not_a_probability_is_none() -> None:
    model = SmartTurnModel(_Garbage())
    assert await model.probability(question()) is None
    model.close()


class _Blocking:
    """Holds its run until released: if it ran on the loop, the loop would stall."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.thread: str | None = None
        self.runs = 0

    def run(self, output_names: None, feeds: dict[str, npt.NDArray[np.float32]]) -> list[object]:
        self.runs += 1
        self.thread = threading.current_thread().name
        assert feeds["input_features"].shape == (1, 80, 800)
        self.entered.set()
        released = self.release.wait(timeout=10)  # fails the test rather than hanging
        return [np.array([[0.75 if released else 0.0]], dtype=np.float32)]


async def test_scoring_runs_off_the_event_loop() -> None:
    runner = _Blocking()
    model = SmartTurnModel(runner)
    scoring = asyncio.create_task(model.probability(question()))
    # The loop keeps running other work while the model is busy: this await only
    # returns if the loop is free while `run` is blocked.
    await asyncio.to_thread(runner.entered.wait)
    other = asyncio.Event()
    asyncio.get_running_loop().call_soon(other.set)
    await other.wait()
    assert not scoring.done()
    runner.release.set()
    assert await scoring == 0.75
    assert runner.thread is not None and runner.thread.startswith("smart-turn")
    model.close()


async def test_a_request_given_up_before_its_turn_is_never_scored() -> None:
    runner = _Blocking()
    model = SmartTurnModel(runner)
    first = asyncio.create_task(model.probability(question()))
    await asyncio.to_thread(runner.entered.wait)
    second = asyncio.create_task(model.probability(question()))
    await asyncio.sleep(0)  # queued behind the first
    second.cancel()
    # The cancel reaches the worker's queue in a done-callback, one loop turn later:
    # released before that, the worker could take the second request first.
    await asyncio.sleep(0)
    runner.release.set()
    assert await first == 0.75
    with pytest.raises(asyncio.CancelledError):
        await second
    # One thread, first in first out: had the second run, it would have run by now.
    assert await model.probability(question()) == 0.75
    assert runner.runs == 2
    model.close()
    assert await model.probability(question()) is None  # closed: the caller falls back


async def test_silence_alone_scores_without_error(model: SmartTurnModel) -> None:
    for pcm in (np.zeros(0, dtype=np.int16), np.zeros(16_000, dtype=np.int16)):
        p = await model.probability(pcm)
        assert p is not None and 0.0 <= p <= 1.0


async def test_a_full_line_scores_none_at_once_and_is_counted() -> None:
    runner = _Blocking()
    model = SmartTurnModel(runner, queue_limit=0)
    first = asyncio.create_task(model.probability(question()))
    await asyncio.to_thread(runner.entered.wait)
    # The one thread is busy and nothing may wait: None now (the session ends its turn
    # on fixed silence), not a score after the first.
    assert await model.probability(question()) is None
    assert model.pool.dropped["overloaded"] == 1
    assert runner.runs == 1
    runner.release.set()
    assert await first == 0.75
    model.close()
