"""Headless Chromium for the browser tests (tests/browser/): Debian's
/usr/bin/chromium (never a downloaded browser), driven by the Python `playwright`
package, with a WAV file as its fake microphone."""

from __future__ import annotations

import os
import wave
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest
import soxr

from bench.speech import load_wav

try:
    from playwright.async_api import Browser, async_playwright
except ImportError:  # reported by `require_browser`
    async_playwright = None  # type: ignore[assignment]

CHROMIUM = Path("/usr/bin/chromium")
CAPTURE_RATE = 48_000
TIMEOUT_S = 30.0
TIMEOUT_MS = TIMEOUT_S * 1000
API_KEY = "sk-browser-test"
CHROMIUM_ARGS = [
    "--no-sandbox",  # the tests run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # the machine's network is closed
    "--disable-component-update",
    "--disable-sync",
    "--use-fake-ui-for-media-stream",  # grant the microphone without a prompt
    "--use-fake-device-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
]


def require_browser() -> None:
    problems = []
    if not CHROMIUM.exists():
        problems.append(
            f"Debian chromium is not installed at {CHROMIUM} "
            "(`make system-deps` installs it as root: apt-get install chromium)"
        )
    if async_playwright is None:
        problems.append("the `playwright` package is missing (pip install -e '.[test]')")
    if problems:
        message = "BROWSER TESTS NOT RUN: " + "; ".join(problems)
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def capture_wav(path: Path, *, lead_s: float, tail_s: float) -> float:
    """The fake microphone's file: silence, a spoken sentence, silence, as 48 kHz
    mono pcm16 (what chromium's fake capture device expects). Returns the speech's
    length in seconds."""
    speech = soxr.resample(load_wav("weather").astype(np.float32), 24_000, CAPTURE_RATE)
    audio = np.concatenate(
        [np.zeros(int(lead_s * CAPTURE_RATE)), speech, np.zeros(int(tail_s * CAPTURE_RATE))]
    )
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(CAPTURE_RATE)
        wav.writeframes(np.clip(audio, -32768, 32767).astype("<i2").tobytes())
    return len(speech) / CAPTURE_RATE


Launcher = Callable[[Path], Awaitable[Browser]]
