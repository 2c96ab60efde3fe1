"""A server made with `create_app(observer=…)`: the transport reports every parsed
frame and stamps each append's arrival, which reaches the turn it ends."""

from __future__ import annotations

import json
import time

import numpy as np
from websockets.asyncio.client import connect

from bench.speech import load_wav, silence
from server.app import create_app
from server.config import Settings
from tests.support.audio import ws_append_chunked
from tests.support.events import Events
from tests.support.recorder import Recorder
from tests.support.servers import TEST_SETTINGS, serving_app


async def test_frames_are_reported_and_an_append_carries_its_arrival() -> None:
    recorder = Recorder()
    settings = Settings(**TEST_SETTINGS)
    app = create_app(settings, observer=recorder)
    pcm = np.concatenate([silence(300), load_wav("timer"), silence(900)])
    before = time.monotonic()
    async with serving_app(app, settings, name="observed") as server:
        async with connect(server.ws_url) as ws:
            events = Events(ws.recv)
            await events.until("session.created")
            update = {
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "server_vad"}}},
            }
            await ws.send(json.dumps({"type": "session.update", "session": update}))
            appends = await ws_append_chunked(ws, pcm)
            await events.until("response.done")
            await ws.send("not json")
            await events.until("error")
    parsed = [c[1] for c in recorder.calls if c[0] == "frame_parsed"]
    assert parsed == ["session.update"] + ["input_audio_buffer.append"] * appends
    assert [c[1] for c in recorder.calls if c[0] == "error_sent"] == ["invalid_json"]
    (stopped,) = [c for c in recorder.calls if c[0] == "speech_stopped"]
    assert stopped[3] is not None and before < stopped[3] < time.monotonic()
    # The session ends, then its connection, with the code the client closed with.
    assert recorder.names()[-2:] == ["session_closed", "connection_closed"]
    assert recorder.calls[-1] == ("connection_closed", 1000)
