"""Several engine observers as one (engine/observer.py takes one per session).

`FanOut` hands each hook to the observers that override it, in order, and keeps the
observer contract for all of them: a hook that raises is logged (once per observer
and hook) and the session it watches carries on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from engine.observer import Observer

log = logging.getLogger(__name__)

HOOKS = tuple(name for name in vars(Observer) if not name.startswith("_"))


def overrides(observer: Observer, hook: str) -> bool:
    """Whether `observer` does anything on `hook` (an instance attribute counts)."""
    return hook in vars(observer) or getattr(type(observer), hook) is not getattr(Observer, hook)


class FanOut(Observer):
    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)
        self._failed: set[tuple[int, str]] = set()
        for hook in HOOKS:
            targets = [o for o in self.observers if overrides(o, hook)]
            setattr(self, hook, self._fan(hook, targets))

    def _fan(self, hook: str, targets: list[Observer]) -> Callable[..., None]:
        calls = [(id(o), getattr(o, hook)) for o in targets]

        def call(*args: Any) -> None:
            for key, method in calls:
                try:
                    method(*args)
                except Exception:
                    if (key, hook) not in self._failed:
                        self._failed.add((key, hook))
                        log.exception("observer hook %s failed (reported once)", hook)

        return call


def compose(observers: Sequence[Observer | None]) -> Observer | None:
    """One observer for the given ones (None for none)."""
    present = [o for o in observers if o is not None]
    return FanOut(present) if present else None
