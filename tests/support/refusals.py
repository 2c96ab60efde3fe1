"""Refused WebSocket handshakes: an HTTP status before the upgrade (the `websockets`
client raises InvalidStatus) with OpenAI's error envelope as the body."""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus


async def handshake_refusal(connecting: Any) -> tuple[int, dict[str, Any]]:
    """Open `connecting` (websockets' `connect(...)`), which must be refused: the HTTP
    status and the error object, checked for OpenAI's shape."""
    with pytest.raises(InvalidStatus) as info:
        async with connecting:
            pass
    response = info.value.response
    body = json.loads(response.body or b"")
    assert set(body) == {"error"}
    assert set(body["error"]) == {"type", "code", "message", "param"}
    if response.status_code == 401:
        assert response.headers["WWW-Authenticate"] == "Bearer"
    error: dict[str, Any] = body["error"]
    return response.status_code, error
