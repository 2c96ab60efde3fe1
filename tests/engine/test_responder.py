"""The pure decisions of the response lifecycle (engine/response.py,
engine/response_stream.py)."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from engine.response import ending_of
from engine.response_stream import kept_samples


@pytest.mark.parametrize(
    ("error", "finish", "status", "details"),
    [
        (None, None, "completed", None),
        (None, "length", "incomplete", {"type": "incomplete", "reason": "max_output_tokens"}),
        (
            RuntimeError("boom"),
            "length",
            "failed",
            {
                "type": "failed",
                "error": {"type": "server_error", "code": "model_error", "message": "boom"},
            },
        ),
    ],
)
def test_how_a_response_that_ended_by_itself_is_reported(
    error: BaseException | None,
    finish: Literal["length"] | None,
    status: str,
    details: dict[str, Any] | None,
) -> None:
    assert ending_of(error, finish) == (status, details)


@pytest.mark.parametrize(
    ("status", "generated", "sent", "kept"),
    [
        ("completed", 480, 0, 480),  # finished: all of it, sent or still queued
        ("incomplete", 480, 100, 480),
        ("cancelled", 480, 100, 100),  # cancelled: only what reached the writer
        ("cancelled", 100, 480, 100),
    ],
)
def test_audio_an_ended_message_keeps(status: str, generated: int, sent: int, kept: int) -> None:
    assert kept_samples(status, generated, sent) == kept
