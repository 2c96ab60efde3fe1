"""An engine observer that records every report, for tests (engine/observer.py)."""

from __future__ import annotations

import functools
from typing import Any

from engine.observer import Observer

# Every hook of the interface, so a hook added there is recorded here too.
HOOKS = [name for name in vars(Observer) if not name.startswith("_")]


class Recorder(Observer):
    """Every hook, as (name, its arguments after the session id)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.session_ids: set[str] = set()
        for name in HOOKS:
            setattr(self, name, functools.partial(self._add, name))

    def _add(self, name: str, session_id: str, *args: Any) -> None:
        self.session_ids.add(session_id)
        self.calls.append((name, *args))

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]
