"""Smart Turn v3.2: has the user finished their turn, judged from the turn's audio.

The model (BSD-2-Clause, 8.7 MB ONNX, a Whisper-tiny encoder with a classifier) ships
inside the `pipecat-ai` wheel, installed with --no-deps and found through its
distribution metadata: importing `pipecat` would pull its heavy dependencies.

One InferenceSession per process, one thread: a call costs ~50 ms of features plus
~100-200 ms of model on one core, so it must stay off the event loop, and a second
thread would only take the core the loop and the VAD need. Batching several
sessions' windows into one run does not pay on this model (per-item time is flat or
worse, see bench/turn_model.py), so requests queue for the thread in fair shares
(models/listening/fair_pool.py): a session has at most one call running and one
waiting, a newer pause's request replaces its waiting one (which scores None), and
sessions take turns. A caller that gives up withdraws its request before it starts.

`SmartTurnModel` implements engine/end_of_turn.py's EndOfTurnModel structurally
(models do not import engine).
"""

from __future__ import annotations

import importlib.metadata
import logging
from functools import partial
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from models.errors import ModelMissing
from models.listening.fair_pool import FairPool
from models.listening.turn_features import features

log = logging.getLogger(__name__)

PACKAGE = "pipecat-ai"
ONNX_IN_PACKAGE = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
FIX = "pip install --no-deps pipecat-ai==1.14.0"
# The reference analyzer (pipecat's LocalSmartTurnAnalyzerV3) calls a turn complete
# above this probability; the engine may choose its own.
REFERENCE_THRESHOLD = 0.5
_INPUT = "input_features"


class OnnxRunner(Protocol):
    """What the model needs of an onnxruntime.InferenceSession (a fake in tests)."""

    def run(self, output_names: None, feeds: dict[str, npt.NDArray[np.float32]]) -> list[object]:
        """All outputs for `feeds`."""
        ...


def bundled_smart_turn() -> Path:
    """The ONNX file inside the installed pipecat-ai wheel, found without importing
    it; ModelMissing when the package or the file is absent."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelMissing(
            "The pipecat-ai package (Smart Turn v3.2) is not installed.", FIX
        ) from None
    path = Path(str(dist.locate_file(ONNX_IN_PACKAGE)))
    if not path.is_file():
        raise ModelMissing(f"Smart Turn model file {path} is missing.", f"{FIX} --force-reinstall")
    return path


def open_session(path: Path) -> OnnxRunner:
    """An InferenceSession on one thread (callers run it from one worker thread)."""
    # Imported here: `parley models` finds the file without loading onnxruntime.
    import onnxruntime  # type: ignore[import-untyped]

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    inputs = [i.name for i in session.get_inputs()]
    if inputs != [_INPUT]:
        raise ValueError(f"{path} is not a Smart Turn v3 model (inputs {inputs})")
    runner: OnnxRunner = session
    return runner


def probability_of(output: object) -> float:
    """The model's output [[p]] (a sigmoid already applied) as a float in [0, 1];
    ValueError for anything else."""
    values = np.asarray(output, dtype=np.float64)
    if values.size != 1 or not np.isfinite(values).all():
        raise ValueError(f"unexpected Smart Turn output {values!r}")
    return float(np.clip(values.item(), 0.0, 1.0))


class SmartTurnModel:
    """End-of-turn probability for a turn's 16 kHz int16 audio, scored off the loop."""

    def __init__(self, runner: OnnxRunner, queue_limit: int | None = None) -> None:
        self._runner = runner
        self.pool = FairPool(1, "smart-turn", queue_limit)

    def _score(self, pcm: npt.NDArray[np.int16]) -> float:
        outputs = self._runner.run(None, {_INPUT: features(pcm)[np.newaxis]})
        return probability_of(outputs[0])

    async def probability(self, pcm: npt.NDArray[np.int16]) -> float | None:
        """Probability in [0, 1] that the turn is complete, from (at most) its last
        8 s; None when scoring fails (warned once; the caller falls back) or when the
        same session asked again before it was scored (a newer pause) or too many
        requests wait already (`Overloaded`)."""
        failing = "Smart Turn scoring failed (%s); using fixed silence instead"
        return await self.pool.answer(partial(self._score, pcm), failing)

    def close(self) -> None:
        """Stop the worker thread once the running request is done; requests still
        waiting, and later ones, score None."""
        self.pool.close()


def load_smart_turn(
    path: Path | None = None, queue_limit: int | None = None
) -> SmartTurnModel | None:
    """The process's one Smart Turn model, or None (with a warning) when the file is
    missing or onnxruntime cannot open it: turns then end on fixed silence."""
    try:
        model_path = path or bundled_smart_turn()
        if not model_path.is_file():
            raise ModelMissing(f"Smart Turn model file {model_path} is missing.", FIX)
        runner = open_session(model_path)
    except ModelMissing as exc:
        log.warning("Smart Turn unavailable: %s Fix: %s", exc.problem, exc.fix)
        return None
    except Exception as exc:  # onnxruntime's load errors are plain Exceptions
        log.warning("Smart Turn unavailable: cannot load %s (%s)", path or "the model", exc)
        return None
    return SmartTurnModel(runner, queue_limit)
