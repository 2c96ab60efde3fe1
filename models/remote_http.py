"""What every remote model stage shares (models/speech/remote_asr.py, remote_tts.py):
its replicas, the order to try them in, the errors that allow another attempt, and
the check at start that the stage's servers answer.

A request is retried, on the next replica when there are several, only while
nothing of its answer has been received: refused, timed out, 5xx or 429. A replica
that failed is passed over for `down_for_s`. The URLs come from the operator's
settings only, never from a client.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx

from models.chat_backends import Cooldown, api_base, auth_headers
from models.errors import ModelMissing
from models.speech.files import ModelInfo

log = logging.getLogger(__name__)


class StageError(RuntimeError):
    """A remote stage failed; the message names the stage, the replica and how."""


class Retryable(StageError):
    """Failed before any of the answer arrived: another attempt may succeed."""


@dataclass(frozen=True)
class RemoteOptions:
    stage: str  # "asr" or "tts", for messages
    urls: tuple[str, ...]  # base URLs, e.g. http://whisper:8000 (with or without /v1)
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


def attempt_order(urls: tuple[str, ...], start: int, down: set[str]) -> list[str]:
    """The replicas to try, rotated to begin at `start` (requests spread over them),
    the healthy ones before those that failed lately."""
    rotated = [urls[(start + i) % len(urls)] for i in range(len(urls))]
    return [u for u in rotated if u not in down] + [u for u in rotated if u in down]


@dataclass
class Replicas:
    """One stage's replicas, and which failed lately. Shared by threads: its state is
    a counter and a dict, each read or written whole."""

    options: RemoteOptions
    clock: Callable[[], float] = time.monotonic
    _next: Iterator[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self._cooldown = Cooldown(self.options.down_for_s, self.clock)

    def attempts(self) -> Attempts:
        """The attempts of one request, up to 1 + retries, each replica once before
        any twice, the healthy ones first."""
        order = attempt_order(self.options.urls, next(self._next), self._cooldown.down())
        return Attempts(self, [order[i % len(order)] for i in range(self.options.retries + 1)])

    def failed(self, url: str, error: Retryable) -> None:
        self._cooldown.mark(url)
        log.warning("%s stage: %s", self.options.stage, error)


@dataclass
class Attempts:
    """One request's replicas in order. A stage's loop reads:

    tries = replicas.attempts()
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
        """Swallows a Retryable failure of `url` (noting it) so the loop goes on."""
        try:
            yield
        except Retryable as exc:
            self.replicas.failed(url, exc)
            self.failures.append(str(exc))

    def gave_up(self) -> StageError:
        return StageError(
            f"the {self.replicas.options.stage} stage did not answer after "
            f"{len(self.failures)} attempts: " + "; ".join(self.failures)
        )


def status_error(stage: str, url: str, status: int, body: bytes) -> StageError:
    """An HTTP error answer: retryable when the server is busy or broken."""
    text = body[:300].decode(errors="replace")
    message = f"{stage} server {url} answered HTTP {status}: {text}"
    return Retryable(message) if status >= 500 or status == 429 else StageError(message)


def transport_error(options: RemoteOptions, url: str, exc: httpx.HTTPError) -> StageError:
    """What went wrong on the wire, before any of the answer arrived (retryable)."""
    stage = options.stage
    if isinstance(exc, httpx.ConnectError):
        return Retryable(f"{stage} server {url} refused the connection ({exc})")
    if isinstance(exc, httpx.TimeoutException):
        return Retryable(f"{stage} server {url} did not answer within {options.read_timeout_s:g} s")
    return Retryable(f"{stage} server {url} broke the connection ({exc!r})")


def describe_remote(stage: str, options: RemoteOptions, endpoint: str) -> ModelInfo:
    """The stage's line in `parley models`: where it runs."""
    return ModelInfo(
        stage,
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

    def __init__(self, options: RemoteOptions, fix: str, *, check: bool = True) -> None:
        self.options = options
        self.model = served_model(options, fix) if check else (options.model or "")
        self.name = f"remote-{options.stage}-{self.model}"
        self.replicas = Replicas(options)

    def endpoint_of(self, url: str) -> str:
        return api_base(url) + self.endpoint

    def describe(self) -> ModelInfo:
        return describe_remote(self.options.stage, self.options, "/v1" + self.endpoint)


def served_model(options: RemoteOptions, fix: str) -> str:
    """Check at start that every replica answers `GET /v1/models` (with the key), and
    return the model to ask for: the configured one, else the first listed. Raises
    ModelMissing naming the stage and the replica otherwise."""
    stage = options.stage.upper()
    if not options.urls:
        raise ModelMissing(f"The remote {stage} stage has no URL.", fix)
    bad = [u for u in options.urls if not u.startswith(("http://", "https://"))]
    if bad:
        raise ModelMissing(f"{stage} server URL {bad[0]} is not http(s).", fix)
    model = options.model
    with httpx.Client(timeout=options.timeout(), headers=options.headers()) as client:
        for url in options.urls:
            try:
                response = client.get(api_base(url) + "/models")
            except httpx.HTTPError as exc:
                problem = transport_error(options, url, exc)
                raise ModelMissing(
                    f"The remote {stage} stage is unreachable: {problem}.", fix
                ) from None
            if response.status_code in (401, 403):
                raise ModelMissing(
                    f"The {stage} server {url} refused the API key (HTTP {response.status_code}).",
                    f"set PARLEY_{stage}_API_KEY",
                )
            if response.status_code >= 400 and model is None:
                raise ModelMissing(
                    f"The {stage} server {url} lists no models (HTTP {response.status_code}).",
                    f"name the model: PARLEY_{stage}_SERVER_MODEL",
                )
            if response.status_code < 400 and model is None:
                model = _first_model(stage, url, response)
    assert model is not None
    return model


def _first_model(stage: str, url: str, response: httpx.Response) -> str:
    try:
        return str(response.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ModelMissing(
            f"The {stage} server {url} answered GET /v1/models with no model in it.",
            f"check the URL, or name the model: PARLEY_{stage}_SERVER_MODEL",
        ) from None
