"""Each remote model stage's health: what requests and probes found
(models/remote_http.py `Replicas.health`, `probe`) and how /healthz shows it
(server/remote_stages.py), without the replicas' URLs."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from bench.fakes.openai import FakeOpenAI, running_fake_openai
from models.remote_http import (
    RemoteError,
    RemoteOptions,
    Replicas,
    Retryable,
    failure_class,
    probe,
)
from tests.support.clock import FakeClock
from tests.support.servers import ServerFactory


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with running_fake_openai() as server:
        yield server


@pytest.fixture
def dead() -> Iterator[str]:
    """A URL whose port is bound but not listening: connections are refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_a_stage_is_ok_degraded_then_down_as_its_replicas_fail_and_recover() -> None:
    clock = FakeClock()
    replicas = Replicas(RemoteOptions("llm", ("http://a", "http://b")), clock)
    health = replicas.health()
    assert health.status == "ok" and all(r.up and r.last_failure is None for r in health.replicas)

    clock.t += 1.0
    replicas.failed("http://b", Retryable("llm server http://b refused", "refused"))
    clock.t += 2.0
    health = replicas.health()
    assert health.status == "degraded"
    assert [r.up for r in health.replicas] == [True, False]
    assert (health.replicas[1].last_failure, health.replicas[1].last_failure_s) == ("refused", 2.0)

    replicas.failed("http://a", Retryable("llm server http://a answered HTTP 503", "http_503"))
    assert replicas.health().status == "down"

    clock.t += 1.0
    replicas.answered("http://a")
    health = replicas.health()
    assert health.status == "degraded" and health.replicas[0].up
    assert health.replicas[0].last_ok_s == 0.0 and health.replicas[0].last_failure == "http_503"


def test_only_a_replica_that_was_up_logs_its_failure(caplog: pytest.LogCaptureFixture) -> None:
    replicas = Replicas(RemoteOptions("tts", ("http://a",)), FakeClock())
    for _ in range(3):  # a probe every few seconds must not fill the log
        replicas.failed("http://a", Retryable("tts server http://a refused", "refused"))
    assert len([r for r in caplog.records if "refused" in r.getMessage()]) == 1


async def test_a_probe_notes_each_replica_and_passes_over_the_dead_one(
    fake: FakeOpenAI, dead: str
) -> None:
    options = RemoteOptions("llm", (fake.url("a"), dead, fake.url("e", "error")))
    replicas = Replicas(options)
    async with httpx.AsyncClient() as client:
        await probe(replicas, client)
    health = replicas.health()
    assert [r.up for r in health.replicas] == [True, False, True]  # /v1/models of "e" answers
    assert health.replicas[1].last_failure == "refused"
    # Requests try the replica the probe found down last.
    assert replicas.order()[-1] == dead and replicas.order("session")[-1] == dead


async def test_a_request_notes_how_the_replica_answered(fake: FakeOpenAI) -> None:
    replicas = Replicas(RemoteOptions("asr", (fake.url("a"), fake.url("b"))))
    tries = replicas.attempts()
    first, second = list(tries)[:2]
    with tries.retrying(first):
        raise Retryable(f"asr server {first} answered HTTP 500", "http_500")
    with tries.retrying(second):
        pass  # it answered
    up = {
        url: r.up for url, r in zip(replicas.options.urls, replicas.health().replicas, strict=True)
    }
    assert up == {first: False, second: True}
    with pytest.raises(RemoteError), tries.retrying(second):
        raise RemoteError("asr server sent no transcription", "error")  # not retryable
    assert replicas.health().replicas[replicas.options.urls.index(second)].up


async def test_healthz_reports_each_remote_stage_without_its_urls(
    serve: ServerFactory, fake: FakeOpenAI, dead: str
) -> None:
    server = await serve(
        executor="openai_compat",
        backend_url=[fake.url("a"), dead],
        backend_model="model-a",
        stage_probe_s=0.01,
    )
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        for _ in range(500):  # until the first probe has run (each probe is ~1 ms)
            body = (await http.get("/healthz")).json()
            stages = body.get("remote_stages")
            if stages and stages[0]["status"] != "ok":
                break
            await asyncio.sleep(0.01)
        text = (await http.get("/healthz")).text
        scrape = (await http.get("/metrics")).text
    assert body["status"] == "ok"  # liveness does not hang on the model servers
    ((stage,),) = [stages]
    assert stage["stage"] == "model" and stage["status"] == "degraded"
    assert [r["up"] for r in stage["replicas"]] == [True, False]
    assert stage["replicas"][1]["last_failure"] == "refused"
    assert "127.0.0.1" not in text and fake.url("a") not in text
    # Each failed probe counts, by stage and how it failed.
    [line] = [x for x in scrape.splitlines() if x.startswith("parley_remote_failures_total{")]
    assert 'kind="refused"' in line and 'stage="model"' in line and float(line.split()[-1]) >= 1


def test_failures_count_in_a_few_fixed_classes() -> None:
    assert [failure_class(k) for k in ("http_503", "http_500", "http_404", "http_429")] == [
        "http_5xx",
        "http_5xx",
        "http_4xx",
        "http_429",
    ]
    assert [failure_class(k) for k in ("refused", "timeout", "broken", "weird")] == [
        "refused",
        "timeout",
        "broken",
        "error",
    ]


async def test_healthz_of_an_embedded_pipeline_lists_no_remote_stages(
    serve: ServerFactory,
) -> None:
    server = await serve()
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        body = (await http.get("/healthz")).json()
    assert "remote_stages" not in body and body["status"] == "ok"
