"""`parley serve`: run the realtime server (and `parley models`)."""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, get_args

import uvicorn
from pydantic import ValidationError
from uvicorn.config import STARTUP_FAILURE

from models.errors import ModelMissing
from server.config import ExecutorName, LogLevel, Settings, TtsEngineName, VadBackendName
from server.exposure import UnsafeExposure, refuse_unsafe_exposure
from server.logs import configure_logging
from server.metrics import MULTIPROC_ENV
from server.serving import SHUTDOWN_GRACE_S, DrainingServer, run_workers


def uvicorn_config(settings: Settings, **overrides: Any) -> uvicorn.Config:
    """The uvicorn configuration `parley serve` runs with (tests reuse it).

    Frames up to twice `max_message_bytes` are read so that a message over the
    limit gets an `error` event and the session lives; larger ones close the
    connection (1009). The official SDK turns compression off, and so do we.
    WebSockets run Parley's protocol (server/ws_protocol.py: abortable, and a 1009
    close frame that arrives); uvicorn's own shutdown, after the drain, is bounded.
    """
    from server.app import create_app  # imported late: see worker_app

    options: dict[str, Any] = {**uvicorn_options(settings), **overrides}
    return uvicorn.Config(create_app(settings), **options)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    return {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "ws_max_size": 2 * settings.max_message_bytes,
        "ws_per_message_deflate": False,
        "ws": "server.ws_protocol:WebSocketProtocol",
        "timeout_graceful_shutdown": SHUTDOWN_GRACE_S,
    }


_FLAGS = (
    "host",
    "port",
    "executor",
    "model",
    "asr_model",
    "llm_model",
    "tts_engine",
    "tts_voice",
    "vad_backend",
    "log_level",
    "max_sessions",
    "max_sessions_per_key",
    "gpu_memory_utilization",
    "max_model_len",
    "backend_url",
    "llm_url",
    "drain_timeout_s",
    "allow_no_keys",
    "asr_url",
    "asr_server_model",
    "tts_url",
    "tts_server_model",
)
_ENV_ONLY = [name for name in Settings.model_fields if name not in _FLAGS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parley", description="Parley realtime voice server")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve /v1/realtime over HTTP and WebSocket",
        description="Serve /v1/realtime. Every setting can also come from a PARLEY_* "
        "environment variable (flags win).",
        epilog="Settings without a flag: "
        + ", ".join(f"PARLEY_{name.upper()}" for name in _ENV_ONLY),
    )
    serve.add_argument("--host", help="address to bind (PARLEY_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (PARLEY_PORT, default 8000)")
    serve.add_argument(
        "--executor",
        choices=get_args(ExecutorName),
        help="cascade: the embedded CPU voice pipeline (default); scripted: a deterministic "
        "test executor; vllm: an audio language model on in-process vLLM (--model PATH); "
        "openai_compat: an OpenAI-compatible server such as `vllm serve` (--backend-url) "
        "(PARLEY_EXECUTOR)",
    )
    serve.add_argument(
        "--asr-model", help="tiny.en (default), base, or a CTranslate2 Whisper directory"
    )
    serve.add_argument(
        "--llm-model",
        help="a Llama, Qwen2 or Gemma .gguf (default: SmolLM2-135M); with --llm-url, the "
        "served model's name (default: the first the server lists) (PARLEY_LLM_MODEL)",
    )
    serve.add_argument(
        "--llm-url",
        action="append",
        metavar="URL",
        help="cascade: the language model on an OpenAI-compatible chat completions server, "
        "e.g. http://vllm:8000/v1; repeat for replicas, each session sticks to one "
        "(PARLEY_LLM_URL=url1,url2; default: the embedded GGUF)",
    )
    serve.add_argument("--tts-engine", choices=get_args(TtsEngineName), help="default auto")
    serve.add_argument("--tts-voice", help="a Piper VOICE.onnx (VOICE.onnx.json beside it)")
    serve.add_argument(
        "--model",
        help="model name reported to clients; with --executor vllm, the model directory or "
        "Hugging Face id to load (PARLEY_MODEL)",
    )
    serve.add_argument(
        "--gpu-memory-utilization",
        type=float,
        help="vllm: fraction of GPU memory (on CPU: of RAM) for the engine "
        "(PARLEY_GPU_MEMORY_UTILIZATION, default 0.9)",
    )
    serve.add_argument(
        "--max-model-len",
        type=int,
        help="vllm: context length; openai_compat: the backend's, for the history "
        "(PARLEY_MAX_MODEL_LEN, default 4096)",
    )
    serve.add_argument(
        "--backend-url",
        action="append",
        metavar="URL",
        help="openai_compat: an OpenAI-compatible server, e.g. http://vllm:8000; repeat for "
        "replicas, each session sticks to one (PARLEY_BACKEND_URL=url1,url2)",
    )
    serve.add_argument(
        "--vad-backend",
        choices=get_args(VadBackendName),
        help="server_vad voice activity detector (PARLEY_VAD_BACKEND, default silero)",
    )
    serve.add_argument(
        "--log-level",
        type=str.lower,
        choices=get_args(LogLevel),
        help="log level (PARLEY_LOG_LEVEL, default info)",
    )
    serve.add_argument(
        "--max-sessions",
        type=int,
        help="concurrent realtime sessions per process; more are closed with 1013, try "
        "again later (PARLEY_MAX_SESSIONS; default sized from the CPUs and the executor, "
        "0 for no limit)",
    )
    serve.add_argument(
        "--max-sessions-per-key",
        type=int,
        help="concurrent sessions (WebSockets and calls) per API key, ephemeral key or, "
        "on an open server, client address; more get HTTP 429 "
        "(PARLEY_MAX_SESSIONS_PER_KEY, default: only --max-sessions)",
    )
    serve.add_argument(
        "--drain-timeout",
        dest="drain_timeout_s",
        type=float,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long answers in flight may finish before every "
        "session is closed with 1001 (PARLEY_DRAIN_TIMEOUT_S, default 30)",
    )
    serve.add_argument(
        "--allow-no-keys",
        action="store_const",
        const=True,
        help="serve with no API keys on an address beyond loopback, which is otherwise "
        "refused: only where the network in front is trusted (PARLEY_ALLOW_NO_KEYS)",
    )
    serve.add_argument(
        "--asr-url",
        action="append",
        metavar="URL",
        help="recognize speech on an OpenAI-compatible /v1/audio/transcriptions server "
        "(e.g. vLLM serving Whisper) instead of the embedded Whisper; repeat for replicas "
        "(PARLEY_ASR_URL=url1,url2; key: PARLEY_ASR_API_KEY)",
    )
    serve.add_argument(
        "--asr-server-model",
        metavar="NAME",
        help="the model the --asr-url server is asked for (PARLEY_ASR_SERVER_MODEL, "
        "default: the first it lists)",
    )
    serve.add_argument(
        "--tts-url",
        action="append",
        metavar="URL",
        help="synthesize speech on an OpenAI-compatible /v1/audio/speech server (pcm; "
        "vLLM-Omni, Kokoro) instead of Piper; repeat for replicas (PARLEY_TTS_URL=url1,url2; "
        "key: PARLEY_TTS_API_KEY; voices: PARLEY_TTS_VOICES=alloy=af_bella,*=af_heart)",
    )
    serve.add_argument(
        "--tts-server-model",
        metavar="NAME",
        help="the model the --tts-url server is asked for (PARLEY_TTS_SERVER_MODEL, "
        "default: the first it lists)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port (default 1). Sessions are independent, so "
        "any worker takes any connection; each loads its own models and counts "
        "--max-sessions on its own. The workers share one PARLEY_KEY_SECRET (made at "
        "start when unset) and one record of used keys, so ephemeral keys work on all of "
        "them, once",
    )
    commands.add_parser("models", help="list the bundled models: sizes, licences, sources")
    args = parser.parse_args(argv)
    if args.command == "models":
        return print_models()

    skip = ("command", "workers")
    overrides = {k: v for k, v in vars(args).items() if k not in skip and v is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        parser.error(str(exc))
    configure_logging(settings.log_level)
    try:
        if warning := refuse_unsafe_exposure(
            settings.host, settings.api_keys, allow_no_keys=settings.allow_no_keys
        ):
            print(f"parley: WARNING: {warning}", file=sys.stderr)
    except UnsafeExposure as exc:
        print(f"parley: refusing to start: {exc}", file=sys.stderr)
        return 2
    if args.workers > 1:
        return serve_workers(settings, overrides, args.workers)
    try:
        config = uvicorn_config(settings)
    except ModelMissing as exc:
        # A user-fixable problem: say which file and how to fix it, no traceback.
        print(f"parley: cannot start: {exc.problem}\n  fix: {exc.fix}", file=sys.stderr)
        return 2
    server = DrainingServer(config)
    prepare_to_serve()
    server.run()
    return 0 if server.started else 3


def freeze_startup_heap() -> None:
    """What is loaded before serving (modules, schemas, models: ~130k objects) lives as
    long as the server: move it out of the garbage collector's full collections, which
    otherwise scan it every time (80-150 ms on 2 cores, a stall for every session;
    bench/load/ measures the pauses)."""
    gc.freeze()
    atexit.register(gc.unfreeze)  # so that exit still collects it


# How long a thread that holds the GIL keeps it while another thread waits for it.
# Python's default is 5 ms. The event loop holds the GIL nearly all the time, so
# Silero's batch thread (models/listening/vad_batch.py) waited up to 5 ms to hand over each
# round's frames and again for its scores, and every session waiting on that round
# waited too. At 0.5 ms, bench/load/ measured (3 pairs of runs back to back, Parley
# with Silero, 2 cores) p99 turn-end latency at 100 sessions of 12-30 ms instead of
# 32-69 ms, and capacities one sweep step higher (175/137/100 against 137/112/87).
# It costs nothing when no other thread is waiting: only then does the holder drop it.
GIL_SWITCH_INTERVAL_S = 0.0005


def prepare_to_serve(freeze_heap: bool = True) -> None:
    """What `parley serve` does to its process (each worker's too) once the app is
    built, before serving: freeze the start-up heap, and let the server's worker
    threads (VAD batches, model executors) get the GIL back from the event loop
    within half a millisecond (see above)."""
    if freeze_heap:
        freeze_startup_heap()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def serve_workers(settings: Settings, flags: dict[str, Any], workers: int) -> int:
    """`--workers N`: uvicorn's supervisor runs N processes on one socket. Each builds
    its app from PARLEY_* variables (`worker_app`), so the flags are put there, and
    one key secret when none is set: a key minted by one worker opens a session on
    any other (server/ephemeral_keys.py), and one record of used keys, so that it
    opens one session on all of them together (server/key_uses.py).

    The workers' metrics meet in a fresh directory (server/metrics.py), named to them
    before they start (prometheus_client reads it at import) and removed at exit, so
    a run never counts what an earlier one left."""
    from server.ephemeral_keys import new_key_secret

    for name, value in flags.items():
        text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
        os.environ[f"PARLEY_{name.upper()}"] = text
    if settings.key_secret is None:
        os.environ["PARLEY_KEY_SECRET"] = new_key_secret()
    metrics_dir = tempfile.mkdtemp(prefix="parley-metrics-")
    os.environ[MULTIPROC_ENV] = metrics_dir
    keys_dir = None if settings.key_uses_db else shared_key_uses()
    try:
        options = uvicorn_options(settings)
        run_workers(
            uvicorn.Config("server.cli:worker_app", factory=True, workers=workers, **options)
        )
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
        if keys_dir is not None:
            shutil.rmtree(keys_dir, ignore_errors=True)
            os.environ.pop("PARLEY_KEY_USES_DB", None)
    return 0


def shared_key_uses() -> str:
    """A fresh record of used ephemeral keys for the workers (server/key_uses.py), so
    that a key used on one is used on all; made before they start, so that they
    only open it. Returns its directory, to remove at exit."""
    from server.key_uses import KeyUses

    directory = tempfile.mkdtemp(prefix="parley-keys-")
    path = os.path.join(directory, "key-uses.sqlite3")
    KeyUses(Path(path)).close()
    os.environ["PARLEY_KEY_USES_DB"] = path
    return directory


def worker_app() -> Any:
    """One worker's app. A missing model stops the worker as a startup failure, which
    stops the supervisor too (rather than restarting the worker forever).

    The app's modules (the SDK's schemas, onnxruntime: ~3 s, three times that on a
    busy host) are imported here, not when a worker starts: a worker imports this
    module before it can answer the supervisor's 5 s health check, and one that
    does not answer in time is killed and replaced, forever."""
    from server.app import create_app

    settings = Settings()
    configure_logging(settings.log_level)  # a worker starts with no log handler
    try:
        app = create_app(settings)
    except ModelMissing as exc:
        print(f"parley: cannot start: {exc.problem}\n  fix: {exc.fix}", file=sys.stderr)
        sys.exit(STARTUP_FAILURE)
    except UnsafeExposure as exc:
        print(f"parley: refusing to start: {exc}", file=sys.stderr)
        sys.exit(STARTUP_FAILURE)
    prepare_to_serve()
    return app


def print_models() -> int:
    from models.inventory import installed_models, remote_models
    from models.remote_http import describe_remote
    from models.speech.device import where_speech_runs
    from server.remote_stages import remote_speech

    settings = Settings()
    model = None if settings.llm_model is None else str(settings.llm_model)
    rows = installed_models() + remote_models(tuple(settings.llm_url), model)
    # The remote speech stages configured (PARLEY_ASR_URL, PARLEY_TTS_URL): where they run.
    asr, tts = remote_speech(settings)
    if asr is not None:
        rows.append(describe_remote(asr, "/v1/audio/transcriptions"))
    if tts is not None:
        rows.append(describe_remote(tts, "/v1/audio/speech"))
    print(f"{'stage':5}  {'model':38}  {'size':>9}  {'licence':28}  source / path")
    for m in rows:
        size = f"{m.size_bytes / 1e6:.1f} MB" if m.size_bytes else "-"
        print(f"{m.stage:5}  {m.name:38}  {size:>9}  {m.license:28}  {m.source}")
        print(f"{'':5}  {'':38}  {'':>9}  {'':28}  {m.path}")
    devices, can_start = where_speech_runs(settings.speech_device)
    print(devices)
    return 0 if can_start and all(m.path not in ("missing",) for m in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
