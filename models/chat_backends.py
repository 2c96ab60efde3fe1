"""What the clients of an OpenAI-compatible chat server share (`openai_compat`, the
cascade's remote language model), over models/remote_http.py: the key a session's
requests stick to a replica by, the pooled HTTP client, and reading a streamed
answer: its events and its tool-call deltas.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from models.base import FunctionCall
from models.remote_http import (
    RemoteError,
    RemoteOptions,
    Replicas,
    broken,
    status_error,
    transport_error,
)


def session_key(request_id: str) -> str:
    """What all responses of one session share: Parley's ids are a per-session
    random prefix and a counter (engine/emitter.py), so the id less its counter."""
    return re.sub(r"\d{6}$", "", request_id) or request_id


@dataclass(frozen=True)
class ServerOptions(RemoteOptions):
    read_timeout_s: float = 60.0  # a model may think a while before its first token


class Server:
    """A backend's replicas and one pooled HTTP client for them all, made on first
    use (inside the event loop that uses it)."""

    def __init__(self, options: RemoteOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.replicas = Replicas(options, clock)
        self._client: httpx.AsyncClient | None = None

    def open_client(self) -> None:
        self.http()

    def http(self) -> httpx.AsyncClient:
        if self._client is None:
            o = self.options
            self._client = httpx.AsyncClient(
                timeout=o.timeout(), headers=o.headers(), limits=o.limits()
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def parse_event(who: str, data: str) -> dict[str, Any]:
    """One `data:` payload of a streamed answer, or a RemoteError saying what was
    wrong with it (`who` names the replica)."""
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        raise RemoteError(f"{who} sent a malformed event: {data[:200]}") from None
    if not isinstance(event, dict):
        raise RemoteError(f"{who} sent a malformed event: {data[:200]}")
    if error := event.get("error"):
        message = error.get("message") if isinstance(error, dict) else error
        raise RemoteError(f"{who} reported an error: {message}")
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


@dataclass
class Attempt:
    """One streamed request to one replica, and whether any of its answer was heard
    yet (after which it is not retried)."""

    options: RemoteOptions
    url: str
    heard: bool = False

    @property
    def who(self) -> str:
        return self.options.server(self.url)

    def broken(self, what: str) -> RemoteError:
        return broken(self.options, self.url, self.heard, what)

    async def check_status(self, response: httpx.Response) -> None:
        """A refusal as a RemoteError (retryable for 5xx and 429)."""
        if response.status_code >= 400:
            body = await response.aread()
            raise status_error(self.options, self.url, response.status_code, body)

    @contextlib.contextmanager
    def failures(self) -> Iterator[None]:
        """httpx's failures during the attempt as RemoteErrors naming the replica."""
        try:
            yield
        except httpx.HTTPError as exc:
            raise transport_error(self.options, self.url, exc, heard=self.heard) from None


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
