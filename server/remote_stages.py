"""The remote speech stages the operator configured, as the models' options: from
settings only, never from a client (docs/deploy.md, "Remote speech stages")."""

from __future__ import annotations

from pydantic import SecretStr

from models.remote_http import RemoteOptions
from server.config import Settings


def remote_speech(settings: Settings) -> tuple[RemoteOptions | None, RemoteOptions | None]:
    """The remote ASR and TTS stages the operator configured (None: embedded)."""

    def stage(
        name: str, urls: list[str], model: str | None, key: SecretStr | None
    ) -> RemoteOptions | None:
        if not urls:
            return None
        return RemoteOptions(
            name,
            tuple(urls),
            model=model,
            api_key=None if key is None else key.get_secret_value(),
            connect_timeout_s=min(settings.speech_timeout_s, 5.0),
            read_timeout_s=settings.speech_timeout_s,
            retries=settings.speech_retries,
        )

    asr = stage("asr", settings.asr_url, settings.asr_server_model, settings.asr_api_key)
    tts = stage("tts", settings.tts_url, settings.tts_server_model, settings.tts_api_key)
    return asr, tts
