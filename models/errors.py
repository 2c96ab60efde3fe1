"""Errors a user can act on: what is missing and how to fix it."""

from __future__ import annotations


class ModelMissing(RuntimeError):
    """A model file or package is missing or unreadable."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem} Fix: {fix}.")
        self.problem = problem
        self.fix = fix
