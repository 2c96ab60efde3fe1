"""docs/protocol.md stays true to the code and to the SDK."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

from openai.types.realtime import RealtimeClientEvent, RealtimeServerEvent

from engine.protocol import SUPPORTED_TYPES

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "protocol.md").read_text()


def sdk_types(union: Any) -> dict[str, type]:
    members = get_args(union)
    if members and not hasattr(members[0], "model_fields"):
        members = get_args(members[0])  # Annotated[Union[...], ...]
    return {get_args(m.model_fields["type"].annotation)[0]: m for m in members}


def table(heading: str) -> dict[str, tuple[str, list[str]]]:
    section = DOC.split(f"## {heading}")[1].split("\n## ")[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = (cells[1], re.findall(r"`(test_\w+)`", cells[2]))
    return rows


CLIENT = table("Client events")
SERVER = table("Server events")
SOURCE = "\n".join(p.read_text() for d in ("engine", "server") for p in (ROOT / d).rglob("*.py"))
TESTS = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))


def test_every_sdk_event_has_a_row() -> None:
    assert set(CLIENT) == set(sdk_types(RealtimeClientEvent))
    assert set(SERVER) == set(sdk_types(RealtimeServerEvent))


def test_client_events_marked_supported_are_exactly_those_parsed() -> None:
    supported = {name for name, (status, _) in CLIENT.items() if status.startswith("supported")}
    assert supported == set(SUPPORTED_TYPES)


def test_server_events_marked_supported_are_built_by_the_server() -> None:
    for name, cls in sdk_types(RealtimeServerEvent).items():
        status, _ = SERVER[name]
        built = re.search(rf"\b{cls.__name__}\b", SOURCE) is not None
        if status.startswith("supported"):
            assert built, f"{name} is marked supported but {cls.__name__} is never built"
        elif status.startswith("beta"):
            assert f'"{name}"' in (ROOT / "engine" / "protocol" / "beta.py").read_text()
        else:
            assert not built, f"{name} is built but marked '{status}'"


def test_named_tests_exist_and_supported_rows_name_one() -> None:
    for name, (status, tests) in {**CLIENT, **SERVER}.items():
        if status.startswith(("supported", "beta")):
            assert tests, f"{name}: no test named"
        for test in tests:
            assert re.search(rf"def {test}\(", TESTS), f"{name}: no test {test}"


def test_the_resume_tables_rows_name_tests_that_exist() -> None:
    heading = "## Resume after a dropped connection (Parley's extension)"
    section = DOC.split(heading)[1].split("\n## ")[0]
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("|") and not line.startswith(("| what", "|---"))
    ]
    assert len(rows) == 9
    for what, _, tests in rows:
        named = re.findall(r"`(test_\w+)`", tests)
        assert named, f"{what}: no test named"
        for test in named:
            assert re.search(rf"def {test}\(", TESTS), f"{what}: no test {test}"
