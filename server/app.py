"""The FastAPI application: health, readiness, metrics, model list, client secrets,
the realtime WebSocket and the browser client at `/`. Everything but /healthz, /readyz
and the browser client's static files needs a key when keys are configured."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from engine.mcp.client import StreamableHttpMcp
from engine.mcp.egress import policy_of
from engine.observer import Observer
from engine.turn_fusion import SoundAndWords
from engine.vad import VadBackend
from models.base import Executor
from models.cascade.llm import bundled_ct2
from models.listening.hearing import WhisperHearing
from models.listening.smart_turn import load_smart_turn
from models.listening.text_turn import load_text_turn
from models.listening.vad import SileroOnnxBackend, WebRtcVadBackend
from models.listening.vad_batch import VadBatcher
from models.scripted import ScriptedExecutor, read_speech
from server.auth import (
    MAX_BODY_BYTES,
    ApiError,
    KeyStore,
    create_client_secret,
    parse_client_secret_request,
    presented_key,
)
from server.call_forward import forwarder_of
from server.calls import CallsEndpoint
from server.config import Settings
from server.ephemeral_keys import new_key_secret
from server.exposure import refuse_unsafe_exposure
from server.key_limits import KeyLimits, RefusalReason
from server.key_uses import KeyUses
from server.logs import LogObserver, install_redaction
from server.metrics import CONTENT_TYPE, Metrics, MetricsObserver, mark_dead, probe_loop, render
from server.observers import compose
from server.prompts import load_prompts
from server.realtime import RealtimeEndpoint
from server.remote_stages import probe_forever, stages_health
from server.resume import ResumeRegistry
from server.resume_tokens import ResumeTokens
from server.sessions import SessionHub

if TYPE_CHECKING:
    from models.speech.voice import VoiceOptions

log = logging.getLogger(__name__)

# The browser client (docs/browser.md): plain ES modules and AudioWorklets, no build.
STATIC_DIR = Path(__file__).parent / "static"


def make_executor(settings: Settings) -> Executor:
    """One executor per server process; its sessions share it. Raises ModelMissing
    (with the file and the fix) when a model cannot be found or loaded."""
    if settings.executor == "cascade":
        from models.cascade.build import CascadeOptions, build_cascade  # loads models

        voice = vars(voice_options(settings))  # its fields, not deep-copied to dicts
        return build_cascade(
            CascadeOptions(
                **voice,
                llm_model=settings.llm_model,
                llm_url=tuple(settings.llm_url),
                llm_api_key=settings.llm_api_key,
                llm_timeout_s=settings.llm_timeout_s,
                llm_context_tokens=settings.max_model_len,
                max_output_tokens=settings.max_output_tokens,
                max_sentences=settings.max_sentences,
            )
        )
    if settings.executor in ("vllm", "openai_compat"):
        return make_hosted_executor(settings)
    speech = settings.scripted_speech
    return ScriptedExecutor(
        chunk_ms=settings.scripted_chunk_ms,
        chunk_delay_s=settings.scripted_chunk_delay_s,
        speech=None if speech is None else read_speech(speech),
    )


def voice_options(settings: Settings) -> VoiceOptions:
    """The speech stages every executor but the scripted one uses."""
    from models.speech.remote_tts import voice_table
    from models.speech.voice import VoiceOptions
    from server.remote_stages import remote_speech

    asr_remote, tts_remote = remote_speech(settings)
    return VoiceOptions(
        asr_model=settings.asr_model,
        tts_engine=settings.tts_engine,
        tts_voice=settings.tts_voice,
        concurrency=settings.model_concurrency,
        asr_remote=asr_remote,
        tts_remote=tts_remote,
        tts_voices=voice_table(settings.tts_voices),
        device=settings.speech_device,
    )


def make_hosted_executor(settings: Settings) -> Executor:
    """The language model in vLLM (in this process, or a server's), speech by Parley's
    own stages. vLLM itself is imported only when the engine starts (lifespan)."""
    from models.hosted import build_openai_compat, build_vllm
    from models.openai_compat import BackendOptions
    from models.vllm_engine import VllmOptions

    voice = voice_options(settings)
    if settings.executor == "vllm":
        style = None if settings.prompt_style == "auto" else settings.prompt_style
        options = VllmOptions(
            model=settings.model,
            prompt_style=style,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            max_model_len=settings.max_model_len,
            max_output_tokens=settings.max_output_tokens,
        )
        return build_vllm(options, voice)
    backend = BackendOptions(
        urls=tuple(settings.backend_url),
        model=settings.backend_model,
        api_key=settings.backend_api_key,
        read_timeout_s=settings.backend_timeout_s,
        retries=settings.backend_retries,
        max_output_tokens=settings.max_output_tokens,
        max_context_tokens=settings.max_model_len,
        audio_output=settings.backend_audio,
        vision=settings.backend_vision,
    )
    return build_openai_compat(backend, voice)


def make_vad_backend(settings: Settings) -> VadBackend:
    # One per server, shared by all sessions: Silero loads its model here, once, and
    # scores every session's frames in batches off the event loop (models/listening/vad_batch.py).
    if settings.vad_backend == "silero":
        return VadBatcher(SileroOnnxBackend())
    return WebRtcVadBackend()


def key_uses(settings: Settings) -> KeyUses | None:
    """The record of used ephemeral keys (None: they are not used up)."""
    uses = settings.ephemeral_key_uses
    return KeyUses(settings.key_uses_db, uses_per_key=uses) if uses else None


def key_limits(settings: Settings) -> KeyLimits:
    return KeyLimits(
        settings.max_sessions_per_key,
        settings.new_sessions_per_key_per_minute,
        settings.new_sessions_burst,
    )


def create_app(
    settings: Settings | None = None,
    executor: Executor | None = None,
    observer: Observer | None = None,
) -> FastAPI:
    """The app; `observer` is told what every session does (engine/observer.py),
    besides the metrics (server/metrics.py) and the session log (server/logs.py)."""
    settings = settings or Settings()
    # Refused before any model loads (UnsafeExposure): a keyless server beyond loopback.
    warning = refuse_unsafe_exposure(
        settings.host, settings.api_keys, allow_no_keys=settings.allow_no_keys
    )
    owned = executor is None  # an executor passed in belongs to the caller
    model_executor = executor or make_executor(settings)

    vad = make_vad_backend(settings)
    # semantic_vad's end-of-turn model (Smart Turn), one per process; None with a
    # warning when it cannot load, and semantic_vad turns then end on fixed silence.
    end_of_turn = load_smart_turn(queue_limit=settings.model_queue_limit)
    # PARLEY_TEXT_END_OF_TURN: the words of a pause move Smart Turn's score.
    text_turn = load_text_turn(bundled_ct2) if settings.text_end_of_turn and end_of_turn else None
    scorer = SoundAndWords(end_of_turn, text_turn) if end_of_turn and text_turn else end_of_turn
    # Hears speech held while the assistant talks (turn_detection.interruption, on by
    # default); its model loads in the background once the server starts.
    hearing = WhisperHearing(
        settings.hearing_model,
        queue_limit=settings.model_queue_limit,
        device=settings.speech_device,
    )
    # Reaches the MCP servers a session names (`type: "mcp"` tools), for every session.
    mcp_client = StreamableHttpMcp(policy_of(settings.mcp_allowed_origins, settings.mcp_public))
    # No audio or key in any server or library log line, at any level.
    install_redaction(settings.api_keys)
    metrics = Metrics() if settings.metrics else None
    metered = MetricsObserver(metrics, time.monotonic) if metrics else None
    if metrics is not None:  # what the shared models' fair shares drop is counted
        hearing.pool.on_drop = metrics.dropped_by("hearing")
        if end_of_turn is not None:
            end_of_turn.pool.on_drop = metrics.dropped_by("end_of_turn")
        if text_turn is not None:
            text_turn.pool.on_drop = metrics.dropped_by("text_end_of_turn")
        for replicas in model_executor.remote_stages():
            replicas.on_failure = metrics.remote_failed
    observers = compose([observer, metered, LogObserver()])

    def queued() -> int:
        return model_executor.queued

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if warning is not None:
            log.warning(warning)
        await model_executor.start()  # vLLM's engine starts here (in the loop)
        hearing.prepare()
        probe = None
        stages = model_executor.remote_stages()
        stage_probe = None
        if stages and settings.stage_probe_s > 0:
            stage_probe = asyncio.create_task(
                probe_forever(stages, settings.stage_probe_s), name="stage-probe"
            )
        if metrics is not None:
            clock = asyncio.get_running_loop().time
            probe = asyncio.create_task(probe_loop(metrics, queued, clock), name="probe")
        try:
            yield
        finally:
            await calls.close()
            for task in (probe, stage_probe):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if metrics is not None and metrics.multiprocess_dir is not None:
                mark_dead(metrics.multiprocess_dir, os.getpid())  # its gauges go with it
            if isinstance(vad, VadBatcher):
                vad.close()
            if end_of_turn is not None:
                end_of_turn.close()
            if text_turn is not None:
                text_turn.close()
            hearing.close()
            if owned:
                await model_executor.aclose()

    # No /docs, /redoc or /openapi.json: they would describe the server to anyone.
    app = FastAPI(
        title="Parley",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    if settings.allowed_origins:
        # Pages the operator allowed may read answers (the SDP answer, its Location);
        # no CORS headers for any other page (server/origins.py).
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.allowed_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "OpenAI-Beta"],
            expose_headers=["Location"],
        )
    # Without a configured secret this process seals with its own: its keys work
    # here only (`parley serve --workers` shares one, server/cli.py).
    secret = settings.key_secret.get_secret_value() if settings.key_secret else new_key_secret()

    def count_refused(reason: RefusalReason) -> None:
        if metrics is not None:
            metrics.sessions_refused.labels(reason).inc()

    keys = KeyStore(
        settings.api_keys,
        secret,
        uses=key_uses(settings),
        limits=key_limits(settings),
        refused=count_refused,
    )
    # The sessions of both transports, siblings over the hub (server/sessions.py).
    prompts = None if settings.prompts_dir is None else load_prompts(settings.prompts_dir)
    hub = SessionHub(
        settings,
        model_executor,
        vad,
        observers,
        end_of_turn=scorer,
        hearing=hearing,
        mcp_client=mcp_client,
        prompts=prompts,
    )
    # Behind a load balancer: what reaches this replica for a call another holds is
    # forwarded there (server/call_forward.py); None for a single server.
    forwarder = forwarder_of(settings)
    # Sessions that may outlive their WebSocket (`?resume=true`, server/resume.py).
    resumes = ResumeRegistry(ResumeTokens(window_s=settings.resume_window_s), observers)
    realtime = RealtimeEndpoint(hub, keys, resumes, forwarder)  # WebSockets, calls' sidebands
    # WebRTC calls; resumable ones (`?resume=true`) have tokens of their own.
    call_resumes = ResumeRegistry(ResumeTokens(window_s=settings.resume_window_s))
    calls = CallsEndpoint(hub, keys, call_resumes, forwarder)
    app.state.calls = calls
    app.state.keys = keys
    app.state.hub = hub  # what server/serving.py drains
    app.state.realtime = realtime
    started = int(time.time())

    @app.exception_handler(ApiError)
    async def refuse(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), exc.status, exc.headers())

    def api_key(request: Request) -> None:
        keys.authenticate(presented_key(request.headers), websocket=False)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        # Liveness: 200 while the process serves, draining included.
        # Model calls waiting for a free slot (the cascade bounds each stage).
        queued = model_executor.queued
        status = "draining" if hub.draining else "ok"
        report: dict[str, Any] = {"status": status, "sessions": hub.sessions, "model_queue": queued}
        # The remote model stages' health. Not part of liveness: restarting Parley
        # would not bring a model server back.
        if stages := model_executor.remote_stages():
            report["remote_stages"] = stages_health(stages)
        return report

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        # Readiness: 503 from the start of a drain, so load balancers stop sending
        # new sessions here while the open ones finish.
        if hub.draining:
            return JSONResponse({"status": "draining"}, 503)
        return JSONResponse({"status": "ready"})

    @app.get("/v1/models", dependencies=[Depends(api_key)])
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": settings.model, "object": "model", "created": started, "owned_by": "parley"}
            ],
        }

    if metrics is not None:

        @app.get("/metrics", dependencies=[Depends(api_key)], include_in_schema=False)
        async def scrape() -> Response:
            return Response(render(metrics), media_type=CONTENT_TYPE)

    @app.post("/v1/realtime/client_secrets", dependencies=[Depends(api_key)])
    async def client_secrets(request: Request) -> Response:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise ApiError(413, "request_too_large", "The request body is too large.")
        minted = create_client_secret(
            keys,
            parse_client_secret_request(body),
            default_model=settings.model,
            default_ttl_s=settings.ephemeral_ttl_s,
            mcp_policy=mcp_client.policy,
            prompts=prompts,
        )
        return Response(minted, media_type="application/json")

    app.add_api_websocket_route("/v1/realtime", realtime.handle)

    # WebRTC (server/calls.py): the offer/answer, and hang-up by the client or by the
    # application's server; `/v1/realtime?call_id=` above attaches to a call.
    @app.post("/v1/realtime/calls", status_code=201)
    async def create_call(request: Request) -> Response:
        return await calls.create(request)

    @app.delete("/v1/realtime/calls/{call_id}")
    async def delete_call(call_id: str, request: Request) -> Response:
        return await calls.hang_up(call_id, request, api_key_only=False)

    @app.post("/v1/realtime/calls/{call_id}/hangup")
    async def hangup_call(call_id: str, request: Request) -> Response:
        return await calls.hang_up(call_id, request, api_key_only=True)

    # The page holds no secret: it asks for an ephemeral key with the key its user
    # types in (only needed when the server has keys).
    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
