"""The microphone's path inside a session: decode (the wire's format, or a track's
audio already decoded) → echo guard → noise suppression → the input buffer, where
turns are cut. The VAD reads what this hands on.

`InputAudio` owns the decoder, the echo canceller, the noise suppressor and the
buffer. A `session.update` that changes them is built first (`prepare`, which may
refuse it) and applied only once the whole update is known to succeed (`apply`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine import protocol
from engine.audio_format import InputDecoder
from engine.input_buffer import InputBuffer
from engine.session_config import SessionConfig
from models.base import PCM_RATE
from models.errors import ModelMissing
from models.listening.denoise import Denoiser
from models.listening.echo import MAX_LAG_S, EchoCanceller, FarEnd, own_voice_score
from models.listening.frame_stage import RATE

Pcm16 = npt.NDArray[np.int16]

# The own-voice score (models/listening/echo.py) above which held speech is the
# assistant's echo: the echo alone scores ~0.85-1.0, the user alone or talking over a
# -10 dB echo ~0.35 (tests/models/test_echo.py).
OWN_VOICE = 0.6
OWN_VOICE_WINDOW = RATE  # the latest second of held speech is scored


@dataclass(frozen=True)
class InputChange:
    """What a `session.update` changes on the input path, built but not applied."""

    decoder: InputDecoder | None  # None: unchanged
    denoiser_changed: bool
    denoiser: Denoiser | None
    echo_changed: bool
    echo: EchoCanceller | None


class InputAudio:
    def __init__(self, config: SessionConfig, clock: Callable[[], float]) -> None:
        # The echo guard's wall clock (when audio was sent, when input arrived);
        # injectable so tests are deterministic.
        self._clock = clock
        self.buffer = InputBuffer(PCM_RATE)
        self.decoder = InputDecoder(config.input_format)
        # audio.input.noise_reduction (an ephemeral key's preset may ask for it too)
        self.denoiser: Denoiser | None = (
            Denoiser(config.noise_reduction) if config.noise_reduction else None
        )
        # audio.input.echo_cancellation (an ephemeral key's preset may ask for it)
        self.echo = (
            EchoCanceller(FarEnd(clock), cancel=config.echo_cancel_input)
            if config.echo_cancellation
            else None
        )
        self._echo_base = 0  # the buffer position of the canceller's first input sample
        self._track_dropping = False  # a track's audio is dropped past the buffer's bound

    @property
    def far_end(self) -> FarEnd | None:
        """The echo guard's record of what the client plays (None: the guard is off)."""
        return None if self.echo is None else self.echo.far

    @property
    def guards_echo(self) -> bool:
        return self.echo is not None

    def decode(self, event: protocol.InputAudioBufferAppend) -> Pcm16:
        try:
            return self.decoder.decode(event.pcm)
        except ValueError as exc:  # e.g. an odd byte count for 16-bit PCM
            raise protocol.ProtocolError(
                "invalid_value", f"Invalid value for 'audio': {exc}", "audio", event.event_id
            ) from None

    def take(self, pcm: Pcm16, received_at: float | None) -> Pcm16:
        """Decoded 24 kHz input through the echo guard and the suppressor into the
        buffer; what went in."""
        if self.echo is not None:  # before the suppressor: it needs the echo linear
            pcm = self.echo.process(pcm, received_at)
        if self.denoiser is not None:
            pcm = self.denoiser.process(pcm)
        self.buffer.append(pcm)
        return pcm

    def flush(self) -> None:
        """What the resampler, the canceller and the suppressor still hold goes into
        the buffer (a commit: it belongs to this turn)."""
        tail = self.decoder.flush()
        if self.echo is not None:
            tail = np.concatenate([self.echo.process(tail), self.echo.flush()])
        if self.denoiser is not None:
            tail = np.concatenate([self.denoiser.process(tail), self.denoiser.flush()])
        self.buffer.append(tail)

    def clear(self) -> None:
        self.decoder.reset()
        if self.echo is not None:
            self.echo.reset()
        if self.denoiser is not None:
            self.denoiser.reset()
        self.buffer.clear()

    def track_dropped(self, dropped: bool) -> bool:
        """Whether a track's audio was `dropped` (past the buffer's bound) or taken;
        True only at the first drop of a run, when the client is told."""
        first = dropped and not self._track_dropping
        self._track_dropping = dropped
        return first

    def held_ms(self) -> int:
        return self.buffer.pos_to_ms(len(self.buffer))

    def now_ms(self) -> int:
        """The input audio clock: ms of audio received since the session began."""
        return self.buffer.pos_to_ms(self.buffer.end)

    def own_voice(self, start: int, end: int) -> bool:
        """Whether input buffer positions [start, end) are the assistant's own voice:
        the raw microphone of their latest second correlates with what was playing
        then, 0-500 ms earlier (models/listening/echo.py). False without the echo guard."""
        if self.echo is None or end <= start:
            return False
        end -= self._echo_base
        start = max(start - self._echo_base, end - OWN_VOICE_WINDOW * PCM_RATE // RATE)
        near, wall = self.echo.raw_near(max(start, 0), max(end, 0))
        if not len(near) or not np.any(near):
            return False
        lag = round(MAX_LAG_S * RATE)
        far = self.echo.far.read(wall - lag, len(near) + lag)
        return own_voice_score(near, far, lag) >= OWN_VOICE

    # --- session.update -------------------------------------------------------------

    def prepare(self, old: SessionConfig, new: SessionConfig, event_id: str | None) -> InputChange:
        """Build what `new` changes; refuses (ProtocolError) what cannot be had here."""
        decoder = InputDecoder(new.input_format) if new.input_format != old.input_format else None
        denoiser_changed = new.noise_reduction != old.noise_reduction
        denoiser = _denoiser(new.noise_reduction, event_id) if denoiser_changed else None
        echo_changed = (new.echo_cancellation, new.echo_cancel_input) != (
            old.echo_cancellation,
            old.echo_cancel_input,
        )
        echo = (
            self._new_echo(new.echo_cancel_input, event_id)
            if echo_changed and new.echo_cancellation
            else None
        )
        return InputChange(decoder, denoiser_changed, denoiser, echo_changed, echo)

    def apply(self, change: InputChange) -> None:
        if change.decoder is not None:
            self.decoder = change.decoder
        if change.denoiser_changed:
            self.denoiser = change.denoiser
        if change.echo_changed:
            self.echo, self._echo_base = change.echo, self.buffer.end

    def _new_echo(self, cancel: bool, event_id: str | None) -> EchoCanceller:
        try:
            return EchoCanceller(FarEnd(self._clock), cancel=cancel)
        except ModelMissing as exc:
            raise protocol.ProtocolError(
                "unsupported_value",
                f"Echo cancellation is not available here: {exc.problem}",
                "session.audio.input.echo_cancellation",
                event_id,
            ) from None


def _denoiser(kind: str | None, event_id: str | None) -> Denoiser | None:
    if kind is None:
        return None
    try:
        return Denoiser(kind)  # type: ignore[arg-type]
    except ModelMissing as exc:
        raise protocol.ProtocolError(
            "unsupported_value",
            f"Noise reduction is not available here: {exc.problem}",
            "session.audio.input.noise_reduction",
            event_id,
        ) from None
