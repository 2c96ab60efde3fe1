"""vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`) as a
subprocess on a free loopback port, and its own counters (its Prometheus /metrics),
which say whether a request Parley closed was stopped at the server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.support.scrape import Samples, parse
from tests.support.servers import free_port
from tests.vllm.conftest import FIGURES, GPU_MEMORY_UTILIZATION, MAX_MODEL_LEN

START_TIMEOUT_S = 300
# A named tool_choice is forced with structured outputs; without whitespace between
# the JSON's tokens the random model cannot pad the call forever. vLLM 0.32 wants a
# tool parser for it, which it loads only with auto tool choice on; pythonic needs no
# special tokens in the tiny tokenizer.
NAMED_TOOL_CHOICE = (
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "pythonic",
)


@contextlib.contextmanager
def vllm_server(
    model: Path, log: Path, *options: str, label: str, max_model_len: int = MAX_MODEL_LEN
) -> Iterator[str]:
    """The server's URL once /health answers; on exit it and its engine processes
    are stopped. `options` go on its command line; `label` names the model in the
    figures."""
    port = free_port()
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model),
        "--host", "127.0.0.1", "--port", str(port),
        "--gpu-memory-utilization", str(GPU_MEMORY_UTILIZATION),
        "--max-model-len", str(max_model_len),
        # No torch.compile: inductor builds C++ kernels with gcc, at start and again
        # for shapes it has not seen (a second request in flight), in bursts that take
        # every core of a small runner for tens of seconds and starve the test's own
        # process (its WebSocket keepalive timed out). Tiny models need no kernels.
        "--enforce-eager",
        *options,
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    start = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        while True:
            if process.poll() is not None:
                raise AssertionError(f"api_server exited: {log.read_text()[-3000:]}")
            if time.monotonic() - start > START_TIMEOUT_S:
                raise AssertionError(f"api_server not healthy: {log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            time.sleep(1)
        FIGURES[f"engine start ({label}, api_server, to /health)"] = time.monotonic() - start
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # the server and its engine processes
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of a metric's series that carry `labels` (vLLM labels each series
    with its engine and model)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))


def in_flight(samples: Samples) -> int:
    """Requests the server is running or holding (its gauges)."""
    running = total(samples, "vllm:num_requests_running")
    return int(running + total(samples, "vllm:num_requests_waiting"))


class Counters:
    """The server's /metrics, read over one kept-alive connection.

    vLLM's CPU workers busy-wait on both cores of a small runner, and its HTTP server
    once took over 30 s to accept a connection there. A scrape that timed out after
    5 s (httpx's default) and opened a new connection each try could then use up the
    caller's deadline without an answer: here one scrape may take all the time left,
    and once connected the following scrapes need no new connection."""

    def __init__(self, url: str) -> None:
        self.client = httpx.AsyncClient(base_url=url)

    async def read(self, timeout_s: float = 30.0) -> Samples:
        response = await self.client.get("/metrics", timeout=timeout_s)
        response.raise_for_status()
        return parse(response.text)

    async def until_idle(self, deadline_s: float) -> float:
        """Seconds until the server runs no request; AssertionError at the deadline
        (keep it inside any wait_for around the call, so the message is this one)."""
        start = time.monotonic()
        while True:
            left = deadline_s - (time.monotonic() - start)
            assert left > 0, "the server still runs the request"
            try:
                if in_flight(await self.read(timeout_s=left)) == 0:
                    return time.monotonic() - start
            except httpx.TransportError:
                pass  # slow to answer: tried again within the deadline
            await asyncio.sleep(0.05)

    async def aclose(self) -> None:
        await self.client.aclose()
