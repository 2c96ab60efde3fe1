"""The FastAPI application: health, model list, client secrets and the realtime
WebSocket. Everything but /healthz needs a key when keys are configured."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from engine.vad import SileroOnnxBackend, VadBackend, WebRtcVadBackend
from models.base import Executor
from models.scripted import ScriptedExecutor
from server.auth import (
    MAX_BODY_BYTES,
    ApiError,
    KeyStore,
    create_client_secret,
    exposure_warning,
    parse_client_secret_request,
    presented_key,
)
from server.config import Settings
from server.realtime import RealtimeEndpoint

log = logging.getLogger(__name__)


def make_executor(settings: Settings) -> Executor:
    """One executor per server process; its sessions share it. Raises ModelMissing
    (with the file and the fix) when a model cannot be found or loaded."""
    if settings.executor == "cascade":
        from models.cascade.build import CascadeOptions, build_cascade  # loads models

        return build_cascade(
            CascadeOptions(
                asr_model=settings.asr_model,
                llm_model=settings.llm_model,
                tts_engine=settings.tts_engine,
                tts_voice=settings.tts_voice,
                concurrency=settings.model_concurrency,
                max_output_tokens=settings.max_output_tokens,
            )
        )
    return ScriptedExecutor(
        chunk_ms=settings.scripted_chunk_ms, chunk_delay_s=settings.scripted_chunk_delay_s
    )


def make_vad_backend(settings: Settings) -> VadBackend:
    # One per server, shared by all sessions: Silero loads its model here, once.
    if settings.vad_backend == "silero":
        return SileroOnnxBackend()
    return WebRtcVadBackend()


def create_app(settings: Settings | None = None, executor: Executor | None = None) -> FastAPI:
    settings = settings or Settings()
    owned = executor is None  # an executor passed in belongs to the caller
    model_executor = executor or make_executor(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if warning := exposure_warning(settings.host, settings.api_keys):
            log.warning(warning)
        try:
            yield
        finally:
            if owned:
                await model_executor.aclose()

    app = FastAPI(title="Parley", version="0.1.0", lifespan=lifespan)
    keys = KeyStore(settings.api_keys)
    endpoint = RealtimeEndpoint(settings, model_executor, make_vad_backend(settings), keys)
    app.state.keys = keys
    app.state.endpoint = endpoint
    started = int(time.time())

    @app.exception_handler(ApiError)
    async def refuse(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), exc.status, exc.headers())

    def api_key(request: Request) -> None:
        keys.authenticate(presented_key(request.headers), websocket=False)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        # Model calls waiting for a free slot (the cascade bounds each stage).
        queued = getattr(model_executor, "queued", 0)
        return {"status": "ok", "sessions": endpoint.sessions, "model_queue": queued}

    @app.get("/v1/models", dependencies=[Depends(api_key)])
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": settings.model, "object": "model", "created": started, "owned_by": "parley"}
            ],
        }

    @app.post("/v1/realtime/client_secrets", dependencies=[Depends(api_key)])
    async def client_secrets(request: Request) -> dict[str, Any]:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise ApiError(413, "request_too_large", "The request body is too large.")
        return create_client_secret(
            keys,
            parse_client_secret_request(body),
            default_model=settings.model,
            default_ttl_s=settings.ephemeral_ttl_s,
        )

    app.add_api_websocket_route("/v1/realtime", endpoint.handle)
    return app
