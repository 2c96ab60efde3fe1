"""audio.input.noise_reduction in a session: the turn's audio the model gets is the
suppressed audio, on the same clock as what the client sent."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from bench.speech import load_wav, silence
from engine.protocol import SessionIn, normalize_session
from engine.session import Session
from models.listening.vad import SileroOnnxBackend, WebRtcVadBackend
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.harness import Harness


def db(pcm: npt.NDArray[np.int16]) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(pcm.astype(np.float64) ** 2)) + 1e-9))


async def committed_audio(noise_reduction: str | None) -> npt.NDArray[np.int16]:
    clean = np.concatenate([silence(600), load_wav("weather"), silence(1000)])
    noise = np.random.default_rng(3).normal(0, 800, len(clean))
    mixed = np.clip(clean + noise, -32768, 32767).astype(np.int16)
    async with Harness(vad=SileroOnnxBackend()) as h:
        nr = None if noise_reduction is None else {"type": noise_reduction}
        await h.update_audio(input={"noise_reduction": nr})
        await append_chunked(h, mixed)
        await h.settle()
        [committed] = h.of("input_audio_buffer.committed")
        [started] = h.of("input_audio_buffer.speech_started")
        assert 300 <= started["audio_start_ms"] <= 700  # the speech begins at 600 ms
        prompt = h.scripted.prompts[-1]
        [turn] = [i for i in prompt.items if i.id == committed["item_id"]]
        assert turn.audio is not None
        return turn.audio


async def test_the_model_hears_the_suppressed_turn() -> None:
    plain = await committed_audio(None)
    suppressed = await committed_audio("near_field")
    # The turns start at the same point (prefix padding before the same onset) and
    # their first 100 ms are noise alone: quieter by the suppressor's ~10 dB.
    assert abs(len(plain) - len(suppressed)) <= 24_000 // 10
    assert db(plain[:2400]) - db(suppressed[:2400]) >= 6


def test_an_ephemeral_keys_preset_applies_noise_reduction_too() -> None:
    """A preset (fixed before the client connected) asks for it: the session starts
    with the suppressor, not only with the setting."""
    preset = normalize_session(
        SessionIn.model_validate(
            {"type": "realtime", "audio": {"input": {"noise_reduction": {"type": "far_field"}}}}
        )
    )
    session = Session(ScriptedExecutor(), WebRtcVadBackend(), model="test", preset=preset)
    assert session.config.noise_reduction == "far_field"
    assert session.input.denoiser is not None
    plain = Session(ScriptedExecutor(), WebRtcVadBackend(), model="test")
    assert plain.input.denoiser is None
