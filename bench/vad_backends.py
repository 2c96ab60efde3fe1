"""Turn detection in noise, per VAD backend: picks the default `vad_backend`.

Run from the repository root:  .venv/bin/python -m bench.vad_backends

The clip is the four speech fixtures joined with 1 s of silence (and 1 s
before and after), clean and with white noise added. Each backend runs
through VadStream + TurnDetector with the default ServerVadParams, and the
turns are matched against the true utterances. Prints a table and writes
bench/results/vad_backends.json. tests/engine/test_vad_noise.py asserts on the same
measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.results import print_table, write_results
from bench.speech import FIXTURES, PCM_RATE, load_wav, silence
from engine.turns import ServerVadParams, SpeechStarted, SpeechStopped, TurnDetector
from engine.vad import VadBackend, VadStream
from models.listening.vad import SileroOnnxBackend, WebRtcVadBackend

GAP_MS = 1000
# Noise RMS as a fraction of full scale. The fixtures' speech is ~0.1 RMS
# (10 ms blocks above the speech floor), so these are clean, ~24, ~14 and ~8 dB SNR.
NOISE_LEVELS = [0.0, 0.0065, 0.02, 0.04]
SEED = 1234
BACKENDS: dict[str, Callable[[], VadBackend]] = {
    "silero": SileroOnnxBackend,
    "webrtc": WebRtcVadBackend,
}
RESULTS = Path(__file__).parent / "results" / "vad_backends.json"

Pcm16 = npt.NDArray[np.int16]
Span = tuple[int, int]  # ms


def speech_extent_ms(pcm: Pcm16) -> Span:
    """First and last 10 ms block with audible energy (as in tests/engine/test_turns.py)."""
    blocks = pcm[: len(pcm) // 240 * 240].astype(float).reshape(-1, 240)
    loud = np.flatnonzero(np.sqrt((blocks**2).mean(axis=1)) > 100)
    return int(loud[0]) * 10, int(loud[-1] + 1) * 10


def build_clip() -> tuple[Pcm16, list[Span]]:
    """The clean clip and the true speech span of each utterance in it."""
    parts, truth, at = [silence(GAP_MS)], [], GAP_MS
    for name in FIXTURES:
        pcm = load_wav(name)
        start, end = speech_extent_ms(pcm)
        truth.append((at + start, at + end))
        parts += [pcm, silence(GAP_MS)]
        at += len(pcm) * 1000 // PCM_RATE + GAP_MS
    return np.concatenate(parts), truth


def add_noise(pcm: Pcm16, rms: float, seed: int = SEED) -> Pcm16:
    """pcm plus white Gaussian noise of the given RMS (fraction of full scale)."""
    noise = np.random.default_rng(seed).normal(0.0, rms * 32768, len(pcm))
    return np.clip(np.rint(pcm + noise), -32768, 32767).astype(np.int16)


def detect_turns(backend: VadBackend, pcm: Pcm16, params: ServerVadParams) -> list[Span]:
    """(onset, speech end) per detected turn; the end excludes the silence window."""
    events = TurnDetector(params).feed(VadStream(backend).process(pcm))
    turns, onset = [], None
    for event in events:
        if isinstance(event, SpeechStarted):
            onset = event.onset_ms
        elif isinstance(event, SpeechStopped) and onset is not None:
            turns.append((onset, event.audio_end_ms - params.silence_duration_ms))
            onset = None
    if onset is not None:  # still open at the end of the clip
        turns.append((onset, len(pcm) * 1000 // PCM_RATE))
    return turns


@dataclass(frozen=True)
class Score:
    backend: str
    noise_rms: float
    turns_found: int  # true utterances matched by a detected turn
    false_turns: int  # detected turns matching no (not yet matched) utterance
    mean_start_err_ms: float | None  # over matched turns: |onset - true start|
    mean_end_err_ms: float | None  # |speech end - true end|
    cpu_us_per_audio_s: float


def _overlap(a: Span, b: Span) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def match(turns: list[Span], truth: list[Span]) -> tuple[list[tuple[Span, Span]], int]:
    """Pairs (turn, utterance) by most overlap, each utterance at most once.

    A turn that overlaps no free utterance is false: noise, or a second
    piece of a split utterance. An utterance merged into its neighbour's
    turn stays unmatched.
    """
    pairs, free, false = [], list(truth), 0
    for turn in turns:
        best = max(free, key=lambda u: _overlap(turn, u), default=None)
        if best is None or _overlap(turn, best) == 0:
            false += 1
            continue
        free.remove(best)
        pairs.append((turn, best))
    return pairs, false


def cpu_us_per_audio_s(backend: VadBackend, pcm: Pcm16, repeats: int = 3) -> float:
    """Process CPU time of VadStream.process (resampling included), best of a few runs."""
    best = float("inf")
    for _ in range(repeats):
        stream = VadStream(backend)
        t0 = time.process_time()
        stream.process(pcm)
        best = min(best, time.process_time() - t0)
    return best * 1e6 / (len(pcm) / PCM_RATE)


def measure(
    name: str, backend: VadBackend, noise_rms: float, params: ServerVadParams | None = None
) -> Score:
    clean, truth = build_clip()
    pcm = add_noise(clean, noise_rms) if noise_rms else clean
    pairs, false = match(detect_turns(backend, pcm, params or ServerVadParams()), truth)

    def mean_err(side: int) -> float | None:
        errs = [abs(turn[side] - utt[side]) for turn, utt in pairs]
        return float(np.mean(errs)) if errs else None

    return Score(
        backend=name,
        noise_rms=noise_rms,
        turns_found=len(pairs),
        false_turns=false,
        mean_start_err_ms=mean_err(0),
        mean_end_err_ms=mean_err(1),
        cpu_us_per_audio_s=cpu_us_per_audio_s(backend, pcm),
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def main() -> None:
    backends = {name: make() for name, make in BACKENDS.items()}
    scores = [measure(n, b, rms) for n, b in backends.items() for rms in NOISE_LEVELS]
    print(f"{len(FIXTURES)} true utterances, default ServerVadParams")
    print_table(
        "backend | noise rms | turns found | false turns | |start err| ms | |end err| ms"
        " | CPU us/audio s",
        (
            [
                s.backend,
                f"{s.noise_rms:g}",
                f"{s.turns_found}/{len(FIXTURES)}",
                s.false_turns,
                _ms(s.mean_start_err_ms),
                _ms(s.mean_end_err_ms),
                f"{s.cpu_us_per_audio_s:.0f}",
            ]
            for s in scores
        ),
    )
    write_results(RESULTS, [asdict(s) for s in scores], 2)


if __name__ == "__main__":
    main()
