"""Server settings: `parley serve` flags over `PARLEY_*` environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]
VadBackendName = Literal["silero", "webrtc"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PARLEY_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8000
    executor: Literal["scripted"] = "scripted"
    # The model name clients pass as `?model=`; any name is accepted and echoed.
    model: str = "parley-scripted"
    # Scripted executor: audio per chunk and the wall-clock pause between chunks.
    scripted_chunk_ms: int = 100
    scripted_chunk_delay_s: float = 0.05
    # A WebSocket text frame larger than this gets an error event (the session
    # lives on); frames larger than twice this close the connection (1009).
    max_message_bytes: int = 16 * 1024 * 1024
    max_buffer_ms: int = 15 * 60 * 1000
    # server_vad's frame scorer. Silero keeps finding every turn in noise that
    # gives webrtcvad false or merged turns (bench/vad_backends.py).
    vad_backend: VadBackendName = "silero"
    log_level: LogLevel = "info"

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value
