"""Defaults that are safe to deploy: no keyless server beyond loopback unless the
operator says so (server/exposure.py), a session limit sized from the host
(server/capacity.py), and no API description at /docs, /redoc or /openapi.json."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

import server.app
import server.config
from server import cli
from server.app import create_app
from server.capacity import cgroup_cores, default_max_sessions, usable_cores
from server.config import Settings
from server.exposure import UnsafeExposure, exposure, is_loopback, refuse_unsafe_exposure
from tests.support.events import TIMEOUT_S, read_event
from tests.support.servers import TEST_SETTINGS, RunningServer, ServerFactory

KEY = "sk-safe-defaults-key"


# --- serving beyond loopback without keys ------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_keyless_server_beyond_loopback_is_refused_unless_allowed() -> None:
    assert exposure("127.0.0.1", []) is None
    assert exposure("0.0.0.0", [KEY]) is None
    with pytest.raises(UnsafeExposure, match="PARLEY_API_KEYS"):
        refuse_unsafe_exposure("0.0.0.0", [], allow_no_keys=False)
    warning = refuse_unsafe_exposure("0.0.0.0", [], allow_no_keys=True)
    assert warning is not None and "--allow-no-keys" in warning
    assert refuse_unsafe_exposure("127.0.0.1", [], allow_no_keys=False) is None


class _FakeUvicornServer:
    def __init__(self, config: object) -> None:
        self.started = True

    def run(self) -> None:
        pass


@pytest.fixture
def cli_built(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """`parley serve` without serving: the settings of every app it builds."""
    built: list[Settings] = []

    def config(settings: Settings, **_: Any) -> object:
        built.append(settings)
        return object()

    monkeypatch.delenv("PARLEY_API_KEYS", raising=False)
    monkeypatch.delenv("PARLEY_ALLOW_NO_KEYS", raising=False)
    monkeypatch.setattr(cli, "uvicorn_config", config)
    monkeypatch.setattr(cli, "DrainingServer", _FakeUvicornServer)
    monkeypatch.setattr(cli, "prepare_to_serve", lambda: None)
    return built


def test_serve_refuses_to_start_keyless_beyond_loopback(
    cli_built: list[Settings], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["serve", "--host", "0.0.0.0", "--executor", "scripted"]) == 2
    stderr = capsys.readouterr().err
    assert "refusing to start" in stderr and "0.0.0.0 with no API keys" in stderr
    assert "PARLEY_API_KEYS" in stderr and "--allow-no-keys" in stderr
    assert cli_built == []  # nothing was built, no model loaded


def test_serve_starts_keyless_beyond_loopback_when_told_to(
    cli_built: list[Settings], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["serve", "--host", "0.0.0.0", "--executor", "scripted"]
    assert cli.main([*argv, "--allow-no-keys"]) == 0
    assert "WARNING" in capsys.readouterr().err
    monkeypatch.setenv("PARLEY_ALLOW_NO_KEYS", "true")
    assert cli.main(argv) == 0
    monkeypatch.delenv("PARLEY_ALLOW_NO_KEYS")
    monkeypatch.setenv("PARLEY_API_KEYS", KEY)
    assert cli.main(argv) == 0
    assert cli.main(["serve", "--executor", "scripted"]) == 0  # 127.0.0.1
    assert len(cli_built) == 4


def test_create_app_refuses_before_loading_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers (`--workers`), the Docker image and embedders build the app themselves."""

    def no_executor(_: Settings) -> None:
        raise AssertionError("the executor was built")

    monkeypatch.setattr(server.app, "make_executor", no_executor)
    with pytest.raises(UnsafeExposure, match="no API keys"):
        create_app(Settings(**TEST_SETTINGS, host="0.0.0.0"))


def test_a_worker_refuses_as_a_startup_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PARLEY_HOST", "0.0.0.0")
    monkeypatch.delenv("PARLEY_API_KEYS", raising=False)
    monkeypatch.delenv("PARLEY_ALLOW_NO_KEYS", raising=False)
    with pytest.raises(SystemExit) as exited:
        cli.worker_app()
    assert exited.value.code == cli.STARTUP_FAILURE
    assert "refusing to start" in capsys.readouterr().err


async def test_an_allowed_keyless_server_logs_a_warning_at_startup(
    serve: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="server.app"):
        await serve(host="0.0.0.0", allow_no_keys=True)
    assert any("--allow-no-keys" in r.getMessage() for r in caplog.records)


# --- the session limit ------------------------------------------------------------


def test_cgroup_quota() -> None:
    assert cgroup_cores("200000 100000\n") == 2.0
    assert cgroup_cores("50000 100000") == 0.5
    assert cgroup_cores("max 100000") is None
    assert cgroup_cores("") is None
    assert cgroup_cores("x y") is None
    assert 0 < usable_cores()


@pytest.mark.parametrize(
    ("executor", "cores", "limit"),
    [
        ("scripted", 2, 100),  # one event loop holds 100-175 (docs/performance.md)
        ("scripted", 64, 100),  # more cores do not raise what one loop holds
        ("openai_compat", 1, 50),
        ("vllm", 0.5, 25),
        ("cascade", 2, 8),  # the models run here, one call per stage at a time
        ("cascade", 1, 4),
        ("cascade", 0.1, 1),
    ],
)
def test_default_max_sessions(executor: str, cores: float, limit: int) -> None:
    assert default_max_sessions(executor, cores) == limit


def test_max_sessions_is_sized_from_the_host_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARLEY_MAX_SESSIONS", raising=False)
    monkeypatch.setattr(server.config, "usable_cores", lambda: 2.0)
    assert Settings(executor="scripted").max_sessions == 100
    assert Settings(executor="cascade").max_sessions == 8
    assert Settings(executor="cascade", max_sessions=30).max_sessions == 30
    assert Settings(max_sessions=0).max_sessions is None  # asked for: no limit
    monkeypatch.setenv("PARLEY_MAX_SESSIONS", "0")
    assert Settings().max_sessions is None
    with pytest.raises(ValueError):
        Settings(max_sessions=-1)


async def test_the_default_limit_closes_one_session_too_many(
    serve: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server.config, "usable_cores", lambda: 0.02)  # 1 session
    running = await serve()
    async with connect(running.ws_url, open_timeout=TIMEOUT_S) as first:
        assert (await read_event(first.recv))["type"] == "session.created"
        async with connect(running.ws_url, open_timeout=TIMEOUT_S) as second:
            with pytest.raises(ConnectionClosedError) as closed:
                await read_event(second.recv)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013


# --- no API description --------------------------------------------------------------


async def test_no_api_description_is_served(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
            assert (await http.get(path)).status_code == 404, path
        assert (await http.get("/healthz")).status_code == 200
