"""parse_client_event refuses what no client event can be."""

from __future__ import annotations

import json

import pytest

from engine.protocol import ProtocolError, parse_client_event


@pytest.mark.parametrize(
    "frame",
    [
        "[" * 100_000 + "]" * 100_000,  # nesting deeper than the parser's recursion
        '{"type": "input_audio_buffer.commit", "n": ' + "1" * 5000 + "}",  # int too long
        b"\xff\xfe not utf-8",
        # Python's extensions to JSON: taken in, a session would echo them as null.
        '{"type": "session.update", "session": {"type": "realtime", "tools": [{"type":'
        ' "function", "name": "f", "parameters": {"x": NaN}}]}}',
        '{"type": "input_audio_buffer.commit", "n": -Infinity}',
    ],
)
def test_pathological_json_is_invalid_json(frame: str | bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_client_event(frame, 1 << 24)
    assert info.value.code == "invalid_json"


def test_size_limit_counts_bytes_not_characters() -> None:
    frame = json.dumps({"type": "response.create", "pad": "é" * 40}, ensure_ascii=False)
    assert len(frame) < 100 < len(frame.encode())
    with pytest.raises(ProtocolError) as info:
        parse_client_event(frame, 100)
    assert info.value.code == "message_too_large"
