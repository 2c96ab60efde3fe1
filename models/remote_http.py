"""What every client of a remote model server shares: the speech stages
(models/speech/remote_asr.py, remote_tts.py), the cascade's language model
(models/cascade/remote_llm.py) and `openai_compat`.

- Options: the replicas' URLs, the model, the key, timeouts, retries, the pool.
- The order to try replicas in. A session's requests stick to one replica when
  they carry a key (rendezvous hashing, so a vLLM replica keeps the conversation's
  prefix cached); keyless requests rotate over them. A replica that failed is
  passed over for `down_for_s`.
- The errors: a request is retried, on the next replica when there are several,
  only while nothing of its answer has been received (refused, timed out, 5xx,
  429, a stream that died empty).
- The check at start that every replica answers `GET /v1/models`.
- How each replica last answered a request or a probe (`Replicas.health`, `probe`),
  for /healthz and /metrics; the clients made at start (`open_clients`).

The URLs come from the operator's settings only, never from a client.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from models.errors import ModelMissing
from models.speech.files import ModelInfo

log = logging.getLogger(__name__)


class RemoteError(RuntimeError):
    """A remote server failed; the message names the stage, the replica and how;
    `kind` says how in a word (refused, timeout, http_503, broken, ...), for health
    reports and metrics, which must not carry URLs."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind


class Retryable(RemoteError):
    """Failed before any of the answer arrived: another attempt may succeed."""


def api_base(url: str) -> str:
    """`http://host:8000`, `http://host:8000/` and `http://host:8000/v1` alike."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@dataclass(frozen=True)
class RemoteOptions:
    stage: str = "model"  # "asr", "tts", "llm" or "model" (openai_compat), for messages
    urls: tuple[str, ...] = ()  # base URLs, e.g. http://whisper:8000 (with or without /v1)
    model: str | None = None  # None: the first model the server lists
    api_key: str | None = None
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0  # for the answer to start, and between its chunks
    retries: int = 2  # further attempts before any of the answer arrived
    down_for_s: float = 10.0  # a failed replica is passed over this long
    max_connections: int = 16  # per stage, across its replicas

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.read_timeout_s, connect=self.connect_timeout_s)

    def headers(self) -> dict[str, str]:
        return auth_headers(self.api_key)

    def limits(self) -> httpx.Limits:
        return httpx.Limits(max_connections=self.max_connections)

    def server(self, url: str) -> str:
        """How messages name one replica: "asr server http://…"."""
        return f"{self.stage} server {url}"


# --- the order of replicas ----------------------------------------------------------


@dataclass
class Cooldown:
    """Replicas that failed lately, each passed over for `down_for_s` after its last
    failure. Its state is one dict, each entry read or written whole (the speech
    stages use it from worker threads)."""

    down_for_s: float
    clock: Callable[[], float] = time.monotonic
    _until: dict[str, float] = field(default_factory=dict)

    def mark(self, url: str) -> None:
        self._until[url] = self.clock() + self.down_for_s

    def down(self) -> set[str]:
        now = self.clock()
        return {u for u, until in self._until.items() if until > now}


def rendezvous(key: str, urls: tuple[str, ...]) -> list[str]:
    """`urls` in this key's order of preference: stable per key, spread over keys,
    and removing one URL moves only the keys that preferred it."""

    def weight(url: str) -> bytes:
        return hashlib.sha256(f"{key}|{url}".encode()).digest()

    return sorted(urls, key=weight, reverse=True)


def attempt_order(urls: tuple[str, ...], start: int, down: set[str]) -> list[str]:
    """The replicas to try, rotated to begin at `start` (requests spread over them),
    the healthy ones before those that failed lately."""
    rotated = [urls[(start + i) % len(urls)] for i in range(len(urls))]
    return healthy_first(rotated, down)


def healthy_first(urls: list[str], down: set[str]) -> list[str]:
    return [u for u in urls if u not in down] + [u for u in urls if u in down]


@dataclass(frozen=True)
class ReplicaHealth:
    """What the last request (or probe) to one replica found; no URL, so it can be
    shown on the unauthenticated /healthz."""

    up: bool  # answered last time it was asked (or not asked yet)
    last_ok_s: float | None  # seconds since it last answered
    last_failure_s: float | None  # seconds since it last failed
    last_failure: str | None  # how, in a word (RemoteError.kind)


@dataclass(frozen=True)
class StageHealth:
    stage: str
    replicas: tuple[ReplicaHealth, ...]  # in the configured order

    @property
    def status(self) -> str:
        up = sum(r.up for r in self.replicas)
        return "ok" if up == len(self.replicas) else "degraded" if up else "down"


@dataclass
class _Outcome:
    ok_at: float | None = None
    failed_at: float | None = None
    failure: str | None = None


def failure_class(kind: str) -> str:
    """A failure's kind for a metric label, from a small fixed set: refused, timeout,
    broken, http_429, http_4xx, http_5xx, error."""
    if kind.startswith("http_") and kind != "http_429":
        return "http_5xx" if kind >= "http_5" else "http_4xx"
    return kind if kind in FAILURE_CLASSES else "error"


FAILURE_CLASSES = ("refused", "timeout", "broken", "http_429", "http_4xx", "http_5xx", "error")


@dataclass
class Replicas:
    """One stage's replicas, which failed lately, and how each last answered.
    `on_failure(stage, failure class)` is told of each failed attempt or probe
    (the server counts them in /metrics)."""

    options: RemoteOptions
    clock: Callable[[], float] = time.monotonic
    _next: Iterator[int] = field(default_factory=itertools.count)
    on_failure: Callable[[str, str], None] | None = None

    def __post_init__(self) -> None:
        self._cooldown = Cooldown(self.options.down_for_s, self.clock)
        self._outcomes = {url: _Outcome() for url in self.options.urls}

    def order(self, key: str | None = None) -> list[str]:
        """Keyed: that key's preferred replica first; keyless: the next in turn.
        Healthy replicas before those that failed lately."""
        down = self._cooldown.down()
        if key is not None:
            return healthy_first(rendezvous(key, self.options.urls), down)
        return attempt_order(self.options.urls, next(self._next), down)

    def attempts(self, key: str | None = None) -> Attempts:
        """The attempts of one request, up to 1 + retries, each replica once before
        any twice."""
        order = self.order(key)
        return Attempts(self, [order[i % len(order)] for i in range(self.options.retries + 1)])

    def failed(self, url: str, error: RemoteError) -> None:
        """Pass `url` over for a while; log the failure when the replica was up."""
        self._cooldown.mark(url)
        outcome = self._outcomes.setdefault(url, _Outcome())
        was_up = outcome.failed_at is None or (outcome.ok_at or 0.0) > outcome.failed_at
        outcome.failed_at, outcome.failure = self.clock(), error.kind
        if self.on_failure is not None:
            self.on_failure(self.options.stage, failure_class(error.kind))
        if was_up:
            log.warning("%s stage: %s", self.options.stage, error)

    def answered(self, url: str) -> None:
        self._outcomes.setdefault(url, _Outcome()).ok_at = self.clock()

    def health(self) -> StageHealth:
        now = self.clock()

        def replica(o: _Outcome) -> ReplicaHealth:
            up = o.failed_at is None or (o.ok_at is not None and o.ok_at > o.failed_at)
            return ReplicaHealth(
                up,
                None if o.ok_at is None else round(now - o.ok_at, 1),
                None if o.failed_at is None else round(now - o.failed_at, 1),
                o.failure,
            )

        outcomes = [self._outcomes.setdefault(u, _Outcome()) for u in self.options.urls]
        return StageHealth(self.options.stage, tuple(replica(o) for o in outcomes))


@dataclass
class Attempts:
    """One request's replicas in order. A client's loop reads:

    tries = replicas.attempts(key)
    for url in tries:
        with tries.retrying(url):
            return attempt(url)
    raise tries.gave_up()
    """

    replicas: Replicas
    urls: list[str]
    failures: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[str]:
        return iter(self.urls)

    @contextlib.contextmanager
    def retrying(self, url: str) -> Iterator[None]:
        """Swallows a Retryable failure of `url` (noting it) so the loop goes on; an
        attempt that ends without one notes that the replica answered."""
        try:
            yield
        except Retryable as exc:
            self.replicas.failed(url, exc)
            self.failures.append(str(exc))
        else:
            self.replicas.answered(url)

    def gave_up(self) -> RemoteError:
        return RemoteError(
            f"the {self.replicas.options.stage} stage did not answer after "
            f"{len(self.failures)} attempts: " + "; ".join(self.failures)
        )


# --- errors -------------------------------------------------------------------------


def status_error(options: RemoteOptions, url: str, status: int, body: bytes) -> RemoteError:
    """An HTTP error answer: retryable when the server is busy or broken (5xx, 429),
    final for a request it cannot serve (4xx)."""
    text = body[:300].decode(errors="replace")
    message = f"{options.server(url)} answered HTTP {status}: {text}"
    kind = f"http_{status}"
    return (
        Retryable(message, kind) if status >= 500 or status == 429 else RemoteError(message, kind)
    )


def transport_error(
    options: RemoteOptions, url: str, exc: httpx.HTTPError, *, heard: bool = False
) -> RemoteError:
    """What went wrong on the wire; retryable while none of the answer was heard."""
    who = options.server(url)
    if isinstance(exc, httpx.ConnectError):
        return Retryable(f"{who} refused the connection ({exc})", "refused")
    if isinstance(exc, httpx.TimeoutException):
        what = "stopped answering" if heard else "did not answer"
        return broken(options, url, heard, f"{what} within {options.read_timeout_s:g} s", "timeout")
    return broken(options, url, heard, f"broke the connection ({exc!r})")


def broken(
    options: RemoteOptions, url: str, heard: bool, what: str, kind: str = "broken"
) -> RemoteError:
    """A failed answer: retryable while nothing of it was heard."""
    if heard:
        return RemoteError(f"{options.server(url)} {what}, in the middle of the answer", kind)
    return Retryable(f"{options.server(url)} {what}", kind)


async def probe(replicas: Replicas, client: httpx.AsyncClient) -> None:
    """Ask every replica `GET /v1/models` and note how it answered, so /healthz
    shows a stage's health while no request uses it, and requests pass over a
    replica a probe found down. Any answer but a refusal, 5xx or 429 counts as up
    (a speech server may have no model list)."""
    options = replicas.options
    for url in options.urls:
        try:
            response = await client.get(api_base(url) + "/models", headers=options.headers())
        except httpx.HTTPError as exc:
            replicas.failed(url, transport_error(options, url, exc))
            continue
        status = response.status_code
        if status >= 500 or status in (401, 403, 429):
            replicas.failed(url, status_error(options, url, status, response.content))
        else:
            replicas.answered(url)


def open_clients(*stages: object) -> None:
    """Make the async HTTP clients of those of `stages` that run on servers, in the
    running loop (the one that serves them): some 60-90 ms each, which the first
    turn would otherwise pay."""
    for stage in stages:
        opener = getattr(stage, "open_client", None)
        if callable(opener):
            opener()


def replicas_of(*stages: object) -> list[Replicas]:
    """The replicas of those of `stages` that run on servers."""
    found = (getattr(stage, "replicas", None) for stage in stages)
    return [r for r in found if isinstance(r, Replicas)]


# --- the check at start -------------------------------------------------------------


def listed_models(payload: Any) -> list[str]:
    """The model ids of a `GET /v1/models` answer; [] when it is not one."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return []
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


@dataclass(frozen=True)
class StageFixes:
    """What a deployer changes when the check fails, per kind of failure."""

    unreachable: str  # e.g. "check --asr-url (PARLEY_ASR_URL) and that the server is up"
    key: str  # e.g. "set PARLEY_ASR_API_KEY"
    model: str  # e.g. "name the model: PARLEY_ASR_SERVER_MODEL"


def served_model(options: RemoteOptions, fixes: StageFixes, *, must_list: bool = False) -> str:
    """Check at start that every replica answers `GET /v1/models` (with the key), and
    return the model to ask for: the configured one, else the first listed. With
    `must_list`, every replica that lists models must list that one (a language
    model: asking for another is an error on every request). Speech servers may
    list voices or nothing, so for them a named model is taken on trust. Raises
    ModelMissing naming the stage and the replica. Blocking."""
    stage = options.stage.upper()
    if not options.urls:
        raise ModelMissing(f"The remote {stage} stage has no URL.", fixes.unreachable)
    bad = [u for u in options.urls if not u.startswith(("http://", "https://"))]
    if bad:
        raise ModelMissing(f"{stage} server URL {bad[0]} is not http(s).", fixes.unreachable)
    model = options.model
    with httpx.Client(timeout=options.timeout(), headers=options.headers()) as client:
        for url in options.urls:
            try:
                response = client.get(api_base(url) + "/models")
            except httpx.HTTPError as exc:
                problem = transport_error(options, url, exc)
                raise ModelMissing(
                    f"The remote {stage} stage is unreachable: {problem}.", fixes.unreachable
                ) from None
            if response.status_code in (401, 403):
                raise ModelMissing(
                    f"The {stage} server {url} refused the API key (HTTP {response.status_code}).",
                    fixes.key,
                )
            listed = _models_of(response)
            if listed is None:
                if model is None or must_list:
                    raise ModelMissing(
                        f"The {stage} server {url} lists no models "
                        f"(GET /v1/models: HTTP {response.status_code}).",
                        fixes.model if response.status_code < 400 else fixes.unreachable,
                    )
                continue
            model = model or listed[0]
            if must_list and model not in listed:
                raise ModelMissing(
                    f"The {stage} server {url} does not serve {model} "
                    f"(it lists {', '.join(listed)}).",
                    fixes.model,
                )
    assert model is not None
    return model


def _models_of(response: httpx.Response) -> list[str] | None:
    """The models a `GET /v1/models` answer lists; None when it lists none."""
    if response.status_code >= 400:
        return None
    try:
        listed = listed_models(response.json())
    except ValueError:
        return None
    return listed or None


def describe_remote(options: RemoteOptions, endpoint: str) -> ModelInfo:
    """The stage's line in `parley models`: what runs where."""
    return ModelInfo(
        options.stage,
        f"{options.model or 'the served model'} (remote)",
        ", ".join(options.urls),
        0,
        "see the server's model card",
        f"OpenAI-compatible {endpoint}",
    )


class RemoteStage:
    """What every remote stage keeps: its options and replicas, the model checked at
    start, and where it runs (`parley models`)."""

    endpoint = ""  # under /v1, e.g. "/audio/speech"

    def __init__(self, options: RemoteOptions, fixes: StageFixes, *, check: bool = True) -> None:
        self.options = options
        self.model = served_model(options, fixes) if check else (options.model or "")
        self.name = f"remote-{options.stage}-{self.model}"
        self.replicas = Replicas(options)

    def endpoint_of(self, url: str) -> str:
        return api_base(url) + self.endpoint

    def describe(self) -> ModelInfo:
        return describe_remote(self.options, "/v1" + self.endpoint)
