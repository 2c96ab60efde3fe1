"""What every client of an OpenAI-compatible server shares (`openai_compat`, the
cascade's remote language model): its replicas and which one a session uses, the
HTTP client, the errors, and reading a streamed answer's events.

Several replica URLs: each session sticks to one (rendezvous hashing of the session
over the URLs), so a vLLM replica keeps that conversation's prefix in its cache; a
replica that failed is passed over for `down_for_s` and its sessions move to their
next choice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from models.base import FunctionCall


class BackendError(RuntimeError):
    """The model backend failed; the message says which and how."""


class Retryable(BackendError):
    """Failed before any answer was heard: another attempt may succeed."""


def api_base(url: str) -> str:
    """`http://host:8000`, `http://host:8000/` and `http://host:8000/v1` alike."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def session_key(request_id: str) -> str:
    """What all responses of one session share: Parley's ids are a per-session
    random prefix and a counter (engine/emitter.py), so the id less its counter."""
    return re.sub(r"\d{6}$", "", request_id) or request_id


def rendezvous(key: str, urls: tuple[str, ...]) -> list[str]:
    """`urls` in this key's order of preference: stable per key, spread over keys,
    and removing one URL moves only the keys that preferred it."""

    def weight(url: str) -> bytes:
        return hashlib.sha256(f"{key}|{url}".encode()).digest()

    return sorted(urls, key=weight, reverse=True)


@dataclass
class Cooldown:
    """Replicas that failed lately, each passed over for `down_for_s` after its last
    failure (every remote client's: the chat backends here, the speech stages of
    models/remote_http.py). Its state is one dict, each entry read or written whole."""

    down_for_s: float
    clock: Callable[[], float] = time.monotonic
    _until: dict[str, float] = field(default_factory=dict)

    def mark(self, url: str) -> None:
        self._until[url] = self.clock() + self.down_for_s

    def down(self) -> set[str]:
        now = self.clock()
        return {u for u, until in self._until.items() if until > now}


class Replicas:
    """The replicas of one backend, each session's preferred first, those that
    failed lately last."""

    def __init__(
        self, urls: tuple[str, ...], down_for_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.urls = urls
        self._cooldown = Cooldown(down_for_s, clock)

    def order(self, key: str) -> list[str]:
        preferred = rendezvous(key, self.urls)
        down = self._cooldown.down()
        healthy = [u for u in preferred if u not in down]
        return healthy + [u for u in preferred if u in down]

    def pick(self, key: str, tried: list[str]) -> str:
        """The replica for the next attempt: one not tried yet while there is one,
        then round again in order."""
        order = self.order(key)
        untried = [u for u in order if u not in tried]
        return untried[0] if untried else order[len(tried) % len(order)]

    def mark_down(self, url: str) -> None:
        self._cooldown.mark(url)


@dataclass(frozen=True)
class ServerOptions:
    urls: tuple[str, ...]  # base URLs, e.g. http://vllm:8000 (with or without /v1)
    model: str | None = None  # None: the first model the backend lists
    api_key: str | None = None
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0  # for the answer to start, and between its chunks
    retries: int = 2  # further attempts before any answer is heard
    down_for_s: float = 10.0  # a failed backend is passed over this long


class Server:
    """A backend's replicas and one pooled HTTP client for them all, made on first
    use (inside the event loop that uses it)."""

    def __init__(self, options: ServerOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.replicas = Replicas(options.urls, options.down_for_s, clock)
        self._client: httpx.AsyncClient | None = None

    def http(self) -> httpx.AsyncClient:
        if self._client is None:
            o = self.options
            timeout = httpx.Timeout(o.read_timeout_s, connect=o.connect_timeout_s)
            self._client = httpx.AsyncClient(timeout=timeout, headers=auth_headers(o.api_key))
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def parse_event(url: str, data: str) -> dict[str, Any]:
    """One `data:` payload of a streamed answer, or a BackendError saying what was
    wrong with it."""
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        raise BackendError(f"backend {url} sent a malformed event: {data[:200]}") from None
    if not isinstance(event, dict):
        raise BackendError(f"backend {url} sent a malformed event: {data[:200]}")
    if error := event.get("error"):
        message = error.get("message") if isinstance(error, dict) else error
        raise BackendError(f"backend {url} reported an error: {message}")
    return event


async def event_data(response: httpx.Response) -> AsyncIterator[str | None]:
    """The `data:` payloads of a server-sent event stream; None for `[DONE]`, the
    end of the answer, after which nothing more is read."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            yield None
            return
        yield data


def broken(url: str, heard: bool, what: str) -> BackendError:
    """A failed stream: retryable while nothing of the answer was heard."""
    if heard:
        return BackendError(f"backend {url} {what}, in the middle of the answer")
    return Retryable(f"backend {url} {what}")


@dataclass
class Attempt:
    """One request to one replica, and whether any of its answer was heard yet
    (after which it is not retried)."""

    url: str
    heard: bool = False


async def check_status(url: str, response: httpx.Response) -> None:
    """A refusal as a BackendError: retryable for an overloaded or failing replica
    (5xx, 429), final for a request it cannot serve (4xx)."""
    if response.status_code < 400:
        return
    text = (await response.aread())[:500].decode(errors="replace")
    message = f"backend {url} answered HTTP {response.status_code}: {text}"
    if response.status_code >= 500 or response.status_code == 429:
        raise Retryable(message)
    raise BackendError(message)


@contextlib.contextmanager
def http_failures(attempt: Attempt, read_timeout_s: float) -> Iterator[None]:
    """httpx's failures during `attempt` as BackendErrors that name the replica."""
    url = attempt.url
    try:
        yield
    except httpx.ConnectError as exc:
        raise Retryable(f"backend {url} refused the connection ({exc})") from None
    except httpx.TimeoutException:
        what = "stopped answering" if attempt.heard else "did not answer"
        raise broken(url, attempt.heard, f"{what} within {read_timeout_s:g} s") from None
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise broken(url, attempt.heard, f"broke the connection ({exc})") from None


@dataclass
class CallParts:
    """A streamed tool call's pieces, as `delta.tool_calls[i]` brings them."""

    call_id: str = ""
    name: str = ""
    arguments: str = ""


def merge_tool_call_deltas(parts: dict[int, CallParts], deltas: list[dict[str, Any]]) -> None:
    """Fold one chunk's `tool_calls` into `parts` by index: the id and name come
    once, the arguments in pieces (as vLLM's and OpenAI's servers stream them)."""
    for delta in deltas:
        part = parts.setdefault(int(delta.get("index", 0)), CallParts())
        part.call_id = delta.get("id") or part.call_id
        function = delta.get("function") or {}
        part.name = function.get("name") or part.name
        part.arguments += function.get("arguments") or ""


def function_calls(parts: dict[int, CallParts], request_id: str) -> list[FunctionCall]:
    """The finished calls in index order; a call the backend gave no id gets one."""
    return [
        FunctionCall(p.name, p.arguments or "{}", p.call_id or f"call_{request_id}_{i}")
        for i, p in sorted(parts.items())
        if p.name
    ]
