"""`parley serve --workers N`: several processes on one port, each with its own app
(run from this checkout: tests/support/processes.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from server import cli
from server.config import Settings
from tests.support.processes import PARLEY, ROOT, children, parley_serve
from tests.support.servers import free_port

KEY = "sk-workers-test-key"


def parley_env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    return {**env, "PYTHONPATH": str(ROOT), **variables}


def test_two_workers_serve_sessions_and_stop() -> None:
    port = free_port()
    env = parley_env(PARLEY_SCRIPTED_CHUNK_DELAY_S="0")
    flags = ["--workers", "2", "--executor", "scripted", "--model", "from-the-flag"]
    with parley_serve(port, [*flags, "--log-level", "warning"], env) as proc:
        # The supervisor's children: two workers (plus multiprocessing's helper, if any).
        assert len(children(proc.pid)) >= 2
        url = f"ws://127.0.0.1:{port}/v1/realtime"
        for _ in range(4):
            with connect(url, proxy=None, open_timeout=10) as ws:
                event = json.loads(ws.recv(timeout=10))
                assert event["type"] == "session.created"
                assert event["session"]["model"] == "from-the-flag"  # flags reach the workers
    assert proc.returncode is not None


def test_keys_minted_by_any_worker_open_one_session_on_any_worker() -> None:
    """Without PARLEY_KEY_SECRET the workers share the one `serve` made, so whichever
    worker mints a key and whichever takes its connection, the session opens with
    the key's preset; and they share one record of used keys, so a second
    connection with the key is refused, whichever worker takes it."""
    port = free_port()
    env = parley_env(PARLEY_API_KEYS=KEY)
    flags = ["--workers", "2", "--executor", "scripted", "--log-level", "warning"]
    with parley_serve(port, flags, env):
        values = []
        for n in range(10):
            # A connection per request, so that the workers share the minting.
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as http:
                body = {"session": {"type": "realtime", "instructions": f"Preset {n}."}}
                minted = http.post(
                    "/v1/realtime/client_secrets",
                    json=body,
                    headers={"Authorization": f"Bearer {KEY}"},
                )
            assert minted.status_code == 200, minted.text
            values.append(minted.json()["value"])
        url = f"ws://127.0.0.1:{port}/v1/realtime"
        opened, refused = [], []
        for value in values:
            offered = ["realtime", f"openai-insecure-api-key.{value}"]
            with connect(url, proxy=None, open_timeout=10, subprotocols=offered) as ws:  # type: ignore[arg-type]
                event = json.loads(ws.recv(timeout=10))
            opened.append((event["type"], event["session"]["instructions"]))
            for _ in range(2):  # a new connection each: either worker may take it
                with pytest.raises(InvalidStatus) as info:
                    connect(url, proxy=None, open_timeout=10, subprotocols=offered)  # type: ignore[arg-type]
                refused.append(info.value.response.status_code)
        assert opened == [("session.created", f"Preset {n}.") for n in range(10)]
        assert refused == [401] * 20


def test_serve_shares_one_key_secret_with_its_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str | None] = []

    def run(*args: Any, **kwargs: Any) -> None:
        seen.append(os.environ.get("PARLEY_KEY_SECRET"))

    monkeypatch.setattr(cli, "run_workers", run)
    monkeypatch.delenv("PARLEY_KEY_SECRET", raising=False)
    # serve_workers names its metrics directory in the environment: undone after.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")
    cli.serve_workers(Settings(), {}, 2)
    made = seen[-1]
    assert made is not None and len(made) >= 32
    assert Settings().key_secret is not None  # what each worker reads
    given = "g" * 32
    monkeypatch.setenv("PARLEY_KEY_SECRET", given)
    cli.serve_workers(Settings(), {}, 2)
    assert seen[-1] == given  # a configured secret is kept, for replicas to share


def test_serve_gives_its_workers_one_record_of_used_keys(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A fresh SQLite file, made before the workers start and removed at exit; one the
    operator named is kept."""
    seen: list[tuple[str, bool]] = []

    def run(*args: Any, **kwargs: Any) -> None:
        path = Settings().key_uses_db  # what each worker reads
        assert path is not None
        seen.append((str(path), path.exists()))

    monkeypatch.setattr(cli, "run_workers", run)
    monkeypatch.delenv("PARLEY_KEY_USES_DB", raising=False)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")
    cli.serve_workers(Settings(), {}, 2)
    made, existed = seen[-1]
    assert existed and not Path(made).exists()
    cli.serve_workers(Settings(), {}, 2)
    assert seen[-1][0] != made  # each run its own
    given = tmp_path / "uses.sqlite3"
    monkeypatch.setenv("PARLEY_KEY_USES_DB", str(given))
    cli.serve_workers(Settings(), {}, 2)
    assert seen[-1] == (str(given), False)


def test_a_missing_model_stops_every_worker(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    env = parley_env(PARLEY_CACHE_DIR=str(tmp_path / "cache"))
    argv = [*PARLEY, "serve", "--workers", "2", "--port", str(free_port())]
    # A startup failure ends the supervisor, not a loop of restarted workers.
    done = subprocess.run(
        [*argv, "--llm-model", str(missing)], env=env, capture_output=True, text=True, timeout=120
    )
    assert "cannot start" in done.stderr and str(missing) in done.stderr
