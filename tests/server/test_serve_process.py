"""What `parley serve` does to its process before serving: the start-up heap is frozen
and the GIL switch interval shortened, in the one process and in every worker."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

import server.app
from server import cli


@pytest.fixture(autouse=True)
def switch_interval() -> Iterator[None]:
    """The tests change the process's switch interval: put Python's back."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(before)


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records freezes instead of freezing this test process's heap."""
    calls: list[str] = []
    monkeypatch.setattr(cli, "freeze_startup_heap", lambda: calls.append("freeze"))
    return calls


def test_serve_shortens_the_switch_interval_before_serving(
    monkeypatch: pytest.MonkeyPatch, frozen: list[str]
) -> None:
    seen: list[float] = []

    def run(self: uvicorn.Server, *_: Any, **__: Any) -> None:
        seen.append(sys.getswitchinterval())
        self.started = True

    monkeypatch.setattr(uvicorn.Server, "run", run)
    code = cli.main(["serve", "--executor", "scripted", "--port", "0"])
    assert code == 0
    assert seen == [pytest.approx(cli.GIL_SWITCH_INTERVAL_S)]
    assert frozen == ["freeze"]


def test_each_worker_shortens_it_too(monkeypatch: pytest.MonkeyPatch, frozen: list[str]) -> None:
    app = object()
    monkeypatch.setattr(server.app, "create_app", lambda *_: app)
    assert cli.worker_app() is app
    assert sys.getswitchinterval() == pytest.approx(cli.GIL_SWITCH_INTERVAL_S)
    assert frozen == ["freeze"]
