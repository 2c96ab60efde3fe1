"""Server settings: `parley serve` flags over `PARLEY_*` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, IPvAnyNetwork, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engine.mcp.egress import parse_origin
from server.capacity import default_max_sessions, usable_cores
from server.origins import normalize_origin

LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]
VadBackendName = Literal["silero", "webrtc"]
ExecutorName = Literal["cascade", "scripted", "vllm", "openai_compat"]
PromptStyleName = Literal["auto", "qwen2_audio", "ultravox", "minicpmo", "voxtral"]
TtsEngineName = Literal["auto", "piper", "flite"]
SpeechDeviceName = Literal["auto", "cpu", "cuda"]


class Settings(BaseSettings):
    # Errors name the setting and the rule, never the value: some are secrets.
    model_config = SettingsConfigDict(
        env_prefix="PARLEY_", extra="ignore", hide_input_in_errors=True
    )

    host: str = "127.0.0.1"
    port: int = 8000
    # cascade: the embedded CPU pipeline (speech recognition, language model, speech
    # synthesis); scripted: a deterministic stand-in for tests and benchmarks;
    # vllm: an audio language model on in-process vLLM (the [vllm] extra);
    # openai_compat: a remote OpenAI-compatible server such as `vllm serve`.
    executor: ExecutorName = "cascade"
    # The model name clients pass as `?model=`; any name is accepted and echoed.
    # With the vllm executor: the model directory or Hugging Face id to load.
    model: str = "parley"
    # vllm: how prompts are written (auto: from the model's config.json); the
    # fraction of GPU memory (on CPU: of RAM) vLLM takes; the context length.
    prompt_style: PromptStyleName = "auto"
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    max_model_len: int = Field(default=4096, ge=256)
    # openai_compat: backend base URLs (PARLEY_BACKEND_URL=url1,url2; each session
    # sticks to one), the model to ask for (default: the first the backend lists),
    # its key, timeouts, retries before the answer starts, whether to ask the
    # backend for speech (vLLM-Omni) instead of synthesizing it here, and whether the
    # served model sees images (a vision-language model: clients' `input_image` is
    # then sent to it; Parley cannot tell, so off refuses them).
    backend_url: Annotated[list[str], NoDecode] = []
    backend_model: str | None = None
    backend_api_key: str | None = None
    backend_timeout_s: float = Field(default=60.0, gt=0)
    backend_retries: int = Field(default=2, ge=0)
    backend_audio: bool = False
    backend_vision: bool = False
    # Cascade: Whisper `tiny.en` (bundled), `base` (the [accurate] extra) or a
    # CTranslate2 Whisper directory; a Llama, Qwen2 or Gemma GGUF (default: the
    # bundled SmolLM2-135M-Instruct); the synthesizer and a Piper VOICE.onnx.
    asr_model: str = "tiny.en"
    # What hears speech held while the assistant talks (turn_detection.interruption):
    # Whisper `tiny.en` (bundled), `base` (the [accurate] extra) or a directory.
    hearing_model: str = "tiny.en"
    llm_model: Path | None = None
    tts_engine: TtsEngineName = "auto"
    tts_voice: Path | None = None
    # Where the embedded Whisper (recognizer and hearing) and Piper run: auto takes a
    # CUDA GPU when CTranslate2 (Whisper) or onnxruntime-gpu (Piper) can use one; cuda
    # refuses to start without one (models/speech/device.py).
    speech_device: SpeechDeviceName = "auto"
    # Concurrent calls into each model stage; more sessions wait their turn.
    model_concurrency: int = Field(default=1, ge=1)
    max_output_tokens: int = Field(default=120, ge=1)
    # The cascade ends a spoken answer after this many sentences (a line of a list
    # counts as one); 0: only the model or max_output_tokens ends it.
    max_sentences: int = Field(default=3, ge=0)
    # Scripted executor: audio per chunk and the wall-clock pause between chunks; a
    # 24 kHz mono pcm16 WAV every audio reply speaks whole instead of its short tone
    # (an assistant that talks for seconds: make eval-turns' interruptions).
    scripted_chunk_ms: int = 100
    scripted_chunk_delay_s: float = 0.05
    scripted_speech: Path | None = None
    # A WebSocket text frame larger than this gets an error event (the session
    # lives on); frames larger than twice this close the connection (1009).
    max_message_bytes: int = 16 * 1024 * 1024
    max_buffer_ms: int = 15 * 60 * 1000
    # Out-of-band responses (`conversation: "none"`) one session may run at once;
    # one more is refused with `too_many_active_responses`.
    max_out_of_band_responses: int = Field(default=4, ge=1)
    # Conversation audio (user and assistant) a session keeps for history; past it
    # the oldest items' audio is released and their transcripts kept. The default
    # covers every clip an executor's prompt takes besides the latest turn (vllm:
    # up to 4 clips, 30 s each for Qwen2-Audio) at 5.8 MB of PCM per session.
    max_history_audio_ms: int = Field(default=2 * 60 * 1000, ge=0)
    # Conversation items a session keeps, and the text they hold (transcripts,
    # typed text, tool calls); past either the oldest items are dropped and the
    # client gets `conversation.item.deleted`. Far beyond what a prompt reads (the
    # cascade: 8 turns; an audio model: its context), about 3 MB per session at most.
    max_history_items: int = Field(default=1000, ge=1)
    max_history_text_chars: int = Field(default=1_000_000, ge=0)
    # server_vad's frame scorer. Silero keeps finding every turn in noise that
    # gives webrtcvad false or merged turns (bench/vad_backends.py).
    vad_backend: VadBackendName = "silero"
    log_level: LogLevel = "info"
    # Keys clients must present (PARLEY_API_KEYS=key1,key2). None: anyone may
    # connect, which is meant for a loopback address only.
    api_keys: Annotated[list[str], NoDecode] = []
    # Concurrent realtime sessions (WebSockets and calls); one more is closed with
    # 1013 (try again later). Unset: sized from the host's CPUs and the executor
    # (server/capacity.py); 0: no limit. After validation None means no limit.
    max_sessions: int | None = Field(default=None, ge=0)
    # Prometheus metrics at GET /metrics (behind the API keys when there are some;
    # docs/metrics.md). Off: no route, and no observer unless the app is given one.
    metrics: bool = True
    # Lifetime of a client secret made without `expires_after` (OpenAI's default).
    ephemeral_ttl_s: int = Field(default=600, ge=10, le=7200)
    # Seals ephemeral keys (AES-256-GCM under a key derived from it), so that any
    # process holding it opens the keys of any other: give every replica the same
    # one. None: `parley serve` makes one at start and shares it with its --workers
    # (replicas then refuse each other's keys). At least 32 characters, e.g.
    # `openssl rand -base64 32`.
    key_secret: SecretStr | None = None
    # On SIGTERM/SIGINT answers in flight get this long to finish; then every session
    # still open has its responses cancelled and is closed with 1001 (docs/deploy.md).
    drain_timeout_s: float = Field(default=30.0, ge=0)
    # A send to a client (an event or the close frame) that cannot be handed to the
    # socket for this long means the client stopped reading: its connection is
    # aborted, not closed politely, so it holds no memory and delays no shutdown.
    write_timeout_s: float = Field(default=10.0, gt=0)
    # Parley's resume extension (`?resume=true`, docs/protocol.md): how long a
    # session whose connection dropped waits for its client to take it back. It
    # keeps its seat meanwhile, so `max_sessions` bounds the detached ones too.
    resume_window_s: float = Field(default=30.0, gt=0, le=600)
    # WebRTC calls (POST /v1/realtime/calls): the ICE servers the server gathers
    # candidates with (PARLEY_ICE_SERVERS=stun:host:3478,turn:host:3478; none: host
    # candidates only, which is what a LAN or a host-networked container needs, and
    # never a third party's STUN server), and the TURN credentials.
    ice_servers: Annotated[list[str], NoDecode] = []
    ice_username: str | None = None
    ice_credential: SecretStr | None = None
    # MCP servers sessions may name (`type: "mcp"` tools; docs/deploy.md, "MCP
    # servers"). Off by default: a URL a client chooses would otherwise reach the
    # operator's network. Allowed origins (PARLEY_MCP_ALLOWED_ORIGINS=
    # https://mcp.example.com,https://*.tools.example/mcp,http://10.0.0.5:9000; the
    # host exact or *.suffix, an optional path prefix) are trusted wherever they
    # resolve; `mcp_public` opens any https server whose addresses are all public.
    mcp_allowed_origins: Annotated[list[str], NoDecode] = []
    mcp_public: bool = False
    # `session.prompt`: a directory of prompt templates, ID.txt and ID@VERSION.txt,
    # read at start (server/prompts.py; docs/deploy.md, "Prompts"). None: a session
    # naming a prompt gets an error.
    prompts_dir: Path | None = None

    # WebRTC offers (docs/deploy.md, "WebRTC offers"). Parley sends ICE checks (STUN)
    # to every remote candidate an offer lists: it keeps at most this many distinct
    # addresses, and none that is loopback, link-local, unspecified, multicast or
    # reserved unless one of these networks holds it (e.g.
    # PARLEY_RTC_CANDIDATE_NETWORKS=127.0.0.0/8,::1/128 for callers on this host;
    # default none), so that a browser cannot aim Parley's packets at this host's
    # own services or at many ports.
    rtc_max_candidates: int = Field(default=16, ge=1)
    rtc_candidate_networks: Annotated[list[IPvAnyNetwork], NoDecode] = []
    # A call is hung up this long after it was answered, with OpenAI's
    # `session_expired` error on its data channel (OpenAI's sessions last at most
    # 60 minutes); 0: no limit.
    max_call_s: float = Field(default=3600.0, ge=0)

    # --- browser origins, safe defaults (docs/deploy.md, "Security") ---
    # Web pages besides the server's own that may open sessions (WebSocket upgrades
    # and WebRTC offers), as exact origins: PARLEY_ALLOWED_ORIGINS=https://a.example,
    # https://b.example:8443; `*` any page, `null` sandboxed ones. They get CORS
    # headers too. Default none: any other page is refused with 403 (server/origins.py).
    allowed_origins: Annotated[list[str], NoDecode] = []
    # Serving beyond loopback with no API keys opens the server to anyone who can
    # reach it: refused at start unless this says the network in front is trusted.
    allow_no_keys: bool = False

    @model_validator(mode="after")
    def _session_limit(self) -> Settings:
        # Unset: sized from the host; 0: asked for no limit (None from here on).
        if self.max_sessions is None:
            self.max_sessions = default_max_sessions(self.executor, usable_cores())
        elif self.max_sessions == 0:
            self.max_sessions = None
        return self

    # Fair shares (docs/deploy.md): a session's audio reaches the VAD, which every
    # session shares, at most `ingest_speed` times real time once a burst of
    # `ingest_burst_s` seconds of audio is spent (engine/ingest_pace.py), so one client
    # cannot take a core by sending minutes of audio at once; a client streaming in
    # real time never waits. Default 10x after 60 s; 0 turns pacing off.
    ingest_speed: float = Field(default=10.0, ge=0)
    ingest_burst_s: float = Field(default=60.0, ge=0)
    # Partial input transcripts (engine/partials.py): with a session's transcription
    # on, the turn being spoken is recognized again after this much more speech, when
    # the recognizer is idle (PARLEY_PARTIAL_TRANSCRIPT_MS; 0: none, the whole text
    # comes after the turn).
    partial_transcript_ms: int = Field(default=500, ge=0)

    # --- ephemeral keys and per-key limits (docs/deploy.md, "Security: Keys") ---
    # Sessions (WebSockets or calls) one ephemeral key opens; one more is refused with
    # 401 invalid_api_key, so a key handed to a browser opens its one connection and
    # nothing else (a reconnect needs a new key). 0: any number until it expires, as
    # OpenAI's client secrets do.
    ephemeral_key_uses: int = Field(default=1, ge=0)
    # The record of used keys, an SQLite file every process on this host shares
    # (local disk only). None: in memory, this process only; `parley serve
    # --workers` makes a fresh file for its workers. Replicas keep one each.
    key_uses_db: Path | None = None
    # Concurrent sessions (WebSockets and calls) one client may hold: an API key, an
    # ephemeral key, or on an open server an address. One more gets HTTP 429
    # rate_limit_exceeded. None: only max_sessions bounds it.
    max_sessions_per_key: int | None = Field(default=None, ge=1)
    # New sessions and calls per client per minute, after a burst of
    # `new_sessions_burst` at once (a token bucket); one more gets HTTP 429. Generous
    # for people and apps; it stops one key from churning sessions. 0: no pacing.
    new_sessions_per_key_per_minute: int = Field(default=120, ge=0)
    new_sessions_burst: int = Field(default=60, ge=1)
    # Requests that may wait at once, across all sessions, for each shared listening
    # model (Smart Turn's end-of-turn calls, the hearing recognizer), beside the ones
    # running. One more is refused at once and its session decides by the duration
    # rules (silence ends the turn; held speech interrupts by its length), counted as
    # `overloaded` in parley_model_requests_dropped_total: under overload turns keep
    # their pace instead of waiting behind a line as long as the server is busy. 4:
    # what `make eval-turns`' four streams at once never exceed; 0: only a free thread.
    model_queue_limit: int = Field(default=4, ge=0)
    # semantic_vad also reads the words of a pause: the bundled SmolLM2 scores the
    # speculative transcript and its score moves Smart Turn's (engine/turn_fusion.py).
    # Costs ~60 ms of one core per pause and needs the executor's own recognizer
    # (cascade, vllm, openai_compat). Off by default: on recorded voices it kept no
    # more hesitations whole and, waiting for the words, ended sure turns 200-350 ms
    # later (docs/turn-taking.md, "Reading the words").
    text_end_of_turn: bool = False
    # The cascade's language model on OpenAI-compatible chat completions servers
    # (vLLM, SGLang, llama.cpp's server, Ollama) instead of the embedded GGUF, for a
    # stronger text model on GPUs: PARLEY_LLM_URL=url1,url2 (replicas; each session
    # sticks to one), its bearer key, and how long it may take to start answering and
    # between chunks (seconds). The model is PARLEY_LLM_MODEL (default: the first the
    # server lists), its context PARLEY_MAX_MODEL_LEN. Default: none, the embedded GGUF.
    llm_url: Annotated[list[str], NoDecode] = []
    llm_api_key: str | None = None
    llm_timeout_s: float = Field(default=60.0, gt=0)

    # --- remote speech stages (docs/deploy.md, "Remote speech stages") ---
    # Speech recognition on OpenAI-compatible servers (POST /v1/audio/transcriptions:
    # vLLM serving Whisper, faster-whisper servers) instead of the embedded Whisper,
    # for every executor: base URLs, several for replicas (PARLEY_ASR_URL=url1,url2;
    # a request that fails before its answer goes to the next), the model to ask for
    # (default: the first the server lists) and the server's key. Default none: the
    # embedded Whisper of asr_model. Checked at start (GET /v1/models).
    asr_url: Annotated[list[str], NoDecode] = []
    asr_server_model: str | None = None
    asr_api_key: SecretStr | None = None
    # Speech synthesis likewise (POST /v1/audio/speech streamed as pcm: vLLM-Omni,
    # Kokoro) instead of Piper or Flite, and the table from the session's voice to the
    # server's (PARLEY_TTS_VOICES=alloy=af_bella,*=af_heart; `*` any other voice;
    # default none: the session's voice name as is). Default none: the embedded voice.
    tts_url: Annotated[list[str], NoDecode] = []
    tts_server_model: str | None = None
    tts_api_key: SecretStr | None = None
    tts_voices: Annotated[list[str], NoDecode] = []
    # Both remote speech stages: how long a connection, and an answer's start (and
    # each of its chunks), may take; further attempts before an answer starts.
    speech_timeout_s: float = Field(default=30.0, gt=0)
    speech_retries: int = Field(default=2, ge=0)
    # How often every remote stage's replicas are asked `GET /v1/models`, so /healthz
    # shows each stage's health while no request uses it (0: only requests tell).
    stage_probe_s: float = Field(default=15.0, ge=0)

    # --- WebRTC calls across replicas (docs/deploy.md, "WebRTC calls across replicas") ---
    # This replica's base URL as the other replicas reach it (http://10.0.3.7:8000).
    # Set, call ids name it, sealed under PARLEY_KEY_SECRET (required then), and a
    # call's sideband, hang-up or DELETE that reaches another replica is forwarded
    # here. None: a single server, whose call ids name no replica.
    replica_url: str | None = None

    @field_validator("replica_url")
    @classmethod
    def _replica_url(cls, value: str | None) -> str | None:
        from server.call_routes import replica_url

        return replica_url(value) if value else None  # empty: unset

    @model_validator(mode="after")
    def _routes_need_the_secret(self) -> Settings:
        if self.replica_url is not None and self.key_secret is None:
            raise ValueError(
                "PARLEY_REPLICA_URL needs PARLEY_KEY_SECRET, the same on every replica"
            )
        return self

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator(
        "api_keys",
        "backend_url",
        "llm_url",
        "ice_servers",
        "mcp_allowed_origins",
        "allowed_origins",
        "rtc_candidate_networks",
        "asr_url",
        "tts_url",
        "tts_voices",
        mode="before",
    )
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("tts_voices")
    @classmethod
    def _voice_table(cls, entries: list[str]) -> list[str]:
        from models.speech.remote_tts import voice_table

        voice_table(entries)  # a malformed entry stops the server at start
        return entries

    @field_validator("key_secret")
    @classmethod
    def _long_enough(cls, secret: SecretStr | None) -> SecretStr | None:
        if secret is not None and len(secret.get_secret_value()) < 32:
            raise ValueError("the key secret must be at least 32 characters long")
        return secret

    @field_validator("api_keys")
    @classmethod
    def _not_ephemeral(cls, keys: list[str]) -> list[str]:
        if any(key.startswith("ek_") for key in keys):
            raise ValueError("API keys must not start with 'ek_', the ephemeral key prefix")
        return keys

    @field_validator("mcp_allowed_origins")
    @classmethod
    def _mcp_origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            parse_origin(origin)  # a bad entry stops the server at start
        return origins

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        return [normalize_origin(origin) for origin in origins]
