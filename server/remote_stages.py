"""The remote speech stages the operator configured, as the models' options: from
settings only, never from a client (docs/deploy.md, "Remote speech stages")."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

import httpx
from pydantic import SecretStr

from models.remote_http import RemoteOptions, Replicas, probe
from server.config import Settings

PROBE_TIMEOUT_S = 5.0


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


async def probe_forever(stages: list[Replicas], every_s: float) -> None:
    """Probe every remote stage's replicas every `every_s` seconds, until cancelled."""
    async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
        while True:
            await asyncio.gather(*(probe(replicas, client) for replicas in stages))
            await asyncio.sleep(every_s)


def stages_health(stages: list[Replicas]) -> list[dict[str, Any]]:
    """/healthz's view of the remote stages: each one's status (ok, degraded, down)
    and its replicas in the configured order, without their URLs (/healthz needs no
    key; `parley models` shows where each stage runs)."""
    report = []
    for replicas in stages:
        health = replicas.health()
        report.append(
            {
                "stage": health.stage,
                "status": health.status,
                "replicas": [asdict(r) for r in health.replicas],
            }
        )
    return report
