"""What a served session leaves in the log at DEBUG (server/logs.py): its ids, its
close code, its responses' statuses and its errors' codes; never the key or audio."""

from __future__ import annotations

import asyncio
import json
import logging
import re

import numpy as np
import pytest
from websockets.asyncio.client import connect

from bench.speech import load_wav, silence
from server.logs import REDACTED, SessionFilter, session_var
from tests.support.audio import CHUNK, b64_pcm
from tests.support.events import Events
from tests.support.servers import ServerFactory

KEY = "sk-log-test-0123456789abcdef"
VAD = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
CLIENT_LOGGER = "test.client"  # the test's own WebSocket client logs frames too


async def test_logs_carry_ids_and_codes_but_no_key_or_audio(
    serve: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.handler.addFilter(SessionFilter())  # as `parley serve` sets up its handler
    server = await serve(api_keys=[KEY], log_level="debug")
    pcm = np.concatenate([silence(300), load_wav("timer"), silence(900)])
    audio = [b64_pcm(pcm[i : i + CHUNK]) for i in range(0, len(pcm), CHUNK)]
    headers = {"Authorization": f"Bearer {KEY}"}
    client_log = logging.getLogger(CLIENT_LOGGER)
    async with connect(server.ws_url, additional_headers=headers, logger=client_log) as ws:
        events = Events(ws.recv)
        await events.until("session.created")
        await ws.send(json.dumps({"type": "session.update", "session": VAD}))
        for chunk in audio:
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
        response_id = (await events.until("response.done"))["response"]["id"]
        await ws.send("not json")
        await events.until("error")
    # The server finishes the session after the client has gone: wait for its line.
    for _ in range(200):
        lines = [r.getMessage() for r in caplog.records if r.name != CLIENT_LOGGER]
        if any(" closed: close code " in line for line in lines):
            break
        await asyncio.sleep(0.05)
    (session_id,) = [m[1] for line in lines if (m := re.fullmatch(r"session (\S+) opened", line))]
    server_records = [r for r in caplog.records if r.name != CLIENT_LOGGER]

    assert f"session {session_id} opened" in lines
    # Lines written while serving the session name it, whoever writes them.
    tags = {r.session_tag for r in server_records if r.name == "parley.sessions"}
    assert tags == {f" [{session_id}]"}
    assert f"session {session_id} closed: close code 1000" in lines
    assert f"session {session_id}: response {response_id} done: completed" in lines
    assert f"session {session_id}: error invalid_json" in lines
    # The handshake's headers are logged at DEBUG, the key's hidden.
    assert any(REDACTED in line for line in lines)
    text = "\n".join(lines)
    assert KEY not in text
    for chunk in audio:
        # Any 16 characters of any append's audio (silence is all "A"s: skipped).
        for start in range(0, len(chunk) - 16, 64):
            piece = chunk[start : start + 16]
            if piece.strip("A"):
                assert piece not in text


def test_every_line_of_a_sessions_tasks_names_its_session() -> None:
    record = logging.LogRecord("engine.x", logging.INFO, __file__, 1, "hello", None, None)
    SessionFilter().filter(record)
    assert record.session_tag == ""  # type: ignore[attr-defined]
    token = session_var.set("sess_abc")
    try:
        SessionFilter().filter(record)
    finally:
        session_var.reset(token)
    assert record.session_tag == " [sess_abc]"  # type: ignore[attr-defined]
