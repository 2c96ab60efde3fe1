"""How Parley hears and speaks, whichever model writes the replies: the options and
the stages they make, embedded or on remote OpenAI-compatible servers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from models.base import PCM_RATE
from models.remote_http import RemoteOptions
from models.speech.asr import SpeechRecognizer, WhisperRecognizer
from models.speech.device import SpeechDevice
from models.speech.remote_asr import RemoteRecognizer
from models.speech.remote_tts import RemoteSynthesizer
from models.speech.slots import StageSlots
from models.speech.speaker import Speaker
from models.speech.tts import (
    FliteSynthesizer,
    PiperSynthesizer,
    Synthesizer,
    default_synthesizer,
)

TtsEngine = Literal["auto", "piper", "flite"]


@dataclass(frozen=True)
class VoiceOptions:
    asr_model: str = "tiny.en"  # tiny.en, base, or a CTranslate2 Whisper directory
    tts_engine: TtsEngine = "auto"
    tts_voice: Path | None = None  # a Piper VOICE.onnx (with VOICE.onnx.json beside it)
    concurrency: int = 1  # concurrent calls per model stage
    asr_remote: RemoteOptions | None = None  # None: the embedded Whisper
    tts_remote: RemoteOptions | None = None  # None: Piper or Flite
    tts_voices: dict[str, str] = field(default_factory=dict)  # session voice → server's
    device: SpeechDevice = "auto"  # where the embedded Whisper and Piper run


def make_recognizer(options: VoiceOptions) -> SpeechRecognizer:
    """The remote recognizer when one is configured (checked now), else Whisper."""
    if options.asr_remote is not None:
        return RemoteRecognizer(options.asr_remote)
    return WhisperRecognizer(options.asr_model, device=options.device)


def make_synthesizer(options: VoiceOptions) -> Synthesizer:
    if options.tts_remote is not None:
        return RemoteSynthesizer(options.tts_remote, voices=options.tts_voices)
    if options.tts_voice is not None or options.tts_engine == "piper":
        return PiperSynthesizer(options.tts_voice, device=options.device)
    if options.tts_engine == "flite":
        return FliteSynthesizer()
    return default_synthesizer(options.device)


def make_speaker(voice: VoiceOptions, output_rate: int = PCM_RATE) -> Speaker:
    tts = make_synthesizer(voice)
    return Speaker(tts, StageSlots("tts", voice.concurrency), output_rate)
