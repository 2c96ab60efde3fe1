"""`parley bench` runs the checkout's benchmarks the way `make bench` does."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from server import bench_cli
from server.cli import main


class Calls:
    def __init__(self, codes: list[int] | None = None) -> None:
        self.argvs: list[list[str]] = []
        self.cwds: list[Path] = []
        self._codes = codes or []

    def __call__(self, argv: list[str], cwd: Path, **_: Any) -> int:
        self.argvs.append(argv)
        self.cwds.append(cwd)
        return self._codes.pop(0) if self._codes else 0


@pytest.fixture(autouse=True)
def bench_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dev environment need not have matplotlib: these tests run no benchmark."""
    monkeypatch.setattr(bench_cli, "extra_installed", lambda: True)


def test_this_checkout_is_found() -> None:
    root = bench_cli.checkout_root()
    assert root is not None
    assert (root / "bench" / "voice_to_voice.py").is_file()


def test_all_runs_the_three_benchmarks_in_make_bench_order(tmp_path: Path) -> None:
    calls = Calls()
    assert bench_cli.run("all", [], root=tmp_path, call=calls) == 0
    assert calls.argvs == [
        [sys.executable, "-m", "bench.voice_to_voice"],
        [sys.executable, "-m", "bench.vad_backends"],
        [sys.executable, "-m", "bench.load"],
    ]
    assert calls.cwds == [tmp_path] * 3


def test_one_benchmark_gets_its_own_options(tmp_path: Path) -> None:
    calls = Calls()
    code = bench_cli.run("load", ["--sweep", "1", "25", "--barge", "0"], root=tmp_path, call=calls)
    assert code == 0
    assert calls.argvs == [
        [sys.executable, "-m", "bench.load", "--sweep", "1", "25", "--barge", "0"]
    ]


def test_a_failing_benchmark_stops_the_run_with_its_code(tmp_path: Path) -> None:
    calls = Calls(codes=[0, 3])
    assert bench_cli.run("all", [], root=tmp_path, call=calls) == 3
    assert len(calls.argvs) == 2  # load did not start


def test_options_for_all_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calls = Calls()
    assert bench_cli.run("all", ["--window", "2"], root=tmp_path, call=calls) == 2
    assert calls.argvs == []
    assert "arguments go to one benchmark" in capsys.readouterr().err


def test_without_a_checkout_it_says_where_the_benchmarks_are(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_cli, "checkout_root", lambda: None)
    assert main(["bench"]) == 2
    assert "source checkout" in capsys.readouterr().err


def test_without_the_bench_extra_it_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_cli, "extra_installed", lambda: False)
    calls = Calls()
    assert bench_cli.run("load", [], root=tmp_path, call=calls) == 2
    assert calls.argvs == []
    assert "pip install -e '.[bench]'" in capsys.readouterr().err


def test_the_command_line_reaches_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(bench_cli, "run", lambda which, extra: seen.append((which, extra)) or 0)
    assert main(["bench", "load", "--sweep", "1", "--name", "x"]) == 0
    assert main(["bench"]) == 0
    assert seen == [("load", ["--sweep", "1", "--name", "x"]), ("all", [])]
