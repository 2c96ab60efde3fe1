"""What a served session leaves in the log at DEBUG (server/logs.py): its ids, its
close code, its responses' statuses and its errors' codes; never a key (at any
level, TRACE included) or audio; and no traceback for a client's bad input."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys

import httpx
import numpy as np
import pytest
from uvicorn.logging import TRACE_LOG_LEVEL
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

from bench.speech import load_wav, silence
from models.stage_timing import StageTiming
from server.logs import (
    REDACTED,
    LogObserver,
    RedactFilter,
    SessionFilter,
    session_var,
    trace_labels,
)
from tests.support.audio import CHUNK, b64_pcm
from tests.support.events import TIMEOUT_S, Events
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


async def test_no_key_in_any_line_at_trace_level(
    serve: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """At TRACE uvicorn logs every connection's ASGI scope, the subprotocols (where a
    browser's key travels) among it; the websockets library logs the headers."""
    caplog.set_level(TRACE_LOG_LEVEL)
    # The ephemeral key opens two sessions here (by subprotocol, then by header).
    server = await serve(api_keys=[KEY], log_level="trace", ephemeral_key_uses=0)
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        minted = await http.post(
            "/v1/realtime/client_secrets", json={}, headers={"Authorization": f"Bearer {KEY}"}
        )
    ephemeral = minted.json()["value"]
    client_log = logging.getLogger(CLIENT_LOGGER)
    for key in (KEY, ephemeral):  # as a browser offers them, and as an SDK sends them
        for options in (
            {"subprotocols": ["realtime", f"openai-insecure-api-key.{key}"]},
            {"additional_headers": {"Authorization": f"Bearer {key}"}},
        ):
            async with connect(server.ws_url, logger=client_log, **options) as ws:  # type: ignore[arg-type]
                await Events(ws.recv).until("session.created")
    records = [r for r in caplog.records if r.name != CLIENT_LOGGER]
    text = "\n".join(r.getMessage() for r in records) + caplog.text.split(CLIENT_LOGGER)[0]
    assert any("scope=" in r.getMessage() for r in records)  # TRACE was on
    assert "openai-insecure-api-key." + REDACTED in text
    assert KEY not in text
    assert ephemeral not in text and ephemeral.split(".")[-1] not in text


def test_keys_are_hidden_in_any_line_and_traceback() -> None:
    redact = RedactFilter()
    redact.secrets.add("sk-configured")
    try:
        raise ValueError("bad key sk-configured")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "%s %s", ("Bearer abc.def", "ek_AbC-1.x_Y"), True
        )
        record.exc_info = sys.exc_info()
    assert redact.filter(record)
    assert record.getMessage() == f"Bearer {REDACTED} {REDACTED}"
    assert record.exc_text is not None and "sk-configured" not in record.exc_text
    assert "ValueError" in record.exc_text


async def test_invalid_utf8_closes_with_1007_and_no_traceback(
    serve: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A client's bad input is not a server fault: no ERROR line, no traceback."""
    caplog.set_level(logging.DEBUG)
    server = await serve(log_level="debug")
    # The client logs its frames at DEBUG, and cannot print this one: not at DEBUG.
    client_log = logging.getLogger(CLIENT_LOGGER + ".quiet")
    client_log.setLevel(logging.INFO)
    async with connect(server.ws_url, logger=client_log) as ws:
        await Events(ws.recv).until("session.created")
        await ws.send(b"\xff\xfe not utf-8", text=True)
        with pytest.raises(ConnectionClosedError) as closed:
            while True:
                await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
    # The server closes the session after the client has gone: wait for its line.
    for _ in range(200):
        if any("close code 1007" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.05)
    records = [r for r in caplog.records if not r.name.startswith(CLIENT_LOGGER)]
    assert any("not UTF-8" in r.getMessage() for r in records)
    assert not [r for r in records if r.levelno >= logging.WARNING or r.exc_info]
    assert "Traceback" not in caplog.text and "UnicodeDecodeError" not in caplog.text


def test_each_model_stage_time_is_a_debug_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="parley.sessions")
    timing = StageTiming("asr", "remote", "transcript", 0.4123, "resp_1", speculative=True)
    LogObserver().stage_timed("sess_1", "resp_1", timing)
    assert caplog.messages == [
        "session sess_1: response resp_1: asr (remote) transcript 0.412 s, speculative"
    ]


def test_a_sessions_tracing_names_it_beside_its_id_until_it_closes() -> None:
    observer = LogObserver()
    record = logging.LogRecord("engine.x", logging.INFO, __file__, 1, "hello", None, None)
    token = session_var.set("sess_tr")
    try:
        observer.tracing_set("sess_tr", "workflow=desk group=g1")
        SessionFilter().filter(record)
        assert record.session_tag == " [sess_tr workflow=desk group=g1]"  # type: ignore[attr-defined]
        observer.session_closed("sess_tr")
        SessionFilter().filter(record)
        assert record.session_tag == " [sess_tr]"  # type: ignore[attr-defined]
        assert "sess_tr" not in trace_labels
    finally:
        session_var.reset(token)


async def test_a_served_sessions_lines_carry_its_tracing_made_safe(
    serve: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    caplog.handler.addFilter(SessionFilter())
    server = await serve()
    tracing = {"workflow_name": "desk\nINFO forged", "group_id": "g1"}
    async with connect(server.ws_url) as ws:
        events = Events(ws.recv)
        await events.until("session.created")
        await ws.send(json.dumps({"type": "session.update", "session": {"tracing": tracing}}))
        assert (await events.until("session.updated"))["session"]["tracing"] == tracing
        await ws.send("not json")
        await events.until("error")
    (line,) = [r for r in caplog.records if r.getMessage().endswith(": error invalid_json")]
    session_id = line.getMessage().split()[1].rstrip(":")
    tag = f" [{session_id} workflow=desk?INFO forged group=g1]"
    assert line.session_tag == tag  # type: ignore[attr-defined]
