"""WebRTC calls end to end: an aiortc peer calls a real server (tests/support/
webrtc_client.py), speaks real speech on an Opus track and hears the answer on its
own track, with the events on the `oai-events` data channel."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import websockets
from aiortc import RTCConfiguration, RTCPeerConnection

from bench.rtc_client import offer_sdp
from bench.speech import FIXTURES, load_wav
from bench.turns.scenarios import write_wav
from server.config import Settings
from server.webrtc import Call
from tests.support.audio import utterance
from tests.support.events import TIMEOUT_S, Events
from tests.support.servers import TEST_SETTINGS, RunningServer, ServerFactory
from tests.support.webrtc_client import rtc_call


async def test_a_spoken_turn_is_answered_on_the_track(server: RunningServer) -> None:
    async with rtc_call(server) as call:
        created = await call.events.until("session.created")
        assert created["session"]["type"] == "realtime"
        call.mic.say(utterance("weather"))
        done = await call.events.until("response.done")
        assert done["response"]["status"] == "completed"
        stopped = await call.events.until("output_audio_buffer.stopped")
        (started,) = call.events.of("output_audio_buffer.started")
        assert started["response_id"] == stopped["response_id"] == done["response"]["id"]
        types = call.events.types()
        # Audio goes on the track, never as events; the turn is the server VAD's.
        assert "response.output_audio.delta" not in types
        for kind in ("input_audio_buffer.speech_started", "input_audio_buffer.committed"):
            assert kind in types
        assert "error" not in types
        spoke = call.mic.spoke_at[0]
        assert len(call.audible_since(spoke + 0.5)) >= 5  # the answer, heard


@pytest.mark.parametrize(
    ("chunk_delay_s", "status"),
    # Generated in real time: the barge-in cancels the response. Generated fifty
    # times faster: the response is done (within the first second heard, with room
    # to spare on a loaded host) and the interruption only cuts its playout.
    [(0.1, "cancelled"), (0.002, "completed")],
)
async def test_barge_in_silences_the_track_and_truncates_to_what_was_played(
    serve: ServerFactory, tmp_path: Path, chunk_delay_s: float, status: str
) -> None:
    # An assistant that talks for ~12 s: every fixture, twice.
    long = np.concatenate([load_wav(name) for name in FIXTURES * 2])
    server = await serve(
        scripted_speech=write_wav(long, tmp_path / "answer.wav"),
        scripted_chunk_delay_s=chunk_delay_s,
    )
    async with rtc_call(server) as call:
        call.mic.say(utterance("weather"))
        started = await call.events.until("output_audio_buffer.started")
        played_from = time.monotonic()
        # A second of the answer heard, then the user talks over it.
        await call.until_heard(lambda: len(call.audible_since(played_from)) >= 50, TIMEOUT_S)
        call.mic.say(utterance("lights"))
        await call.events.until("input_audio_buffer.speech_started")
        heard_stop = time.monotonic()
        truncated = await call.events.until("conversation.item.truncated")
        (cleared,) = call.events.of("output_audio_buffer.cleared")
        # The barge-in's cancel and the playout's truncation race: either comes first.
        answer = {"id": started["response_id"]}
        if not any(d["response"]["id"] == answer["id"] for d in call.events.of("response.done")):
            await call.events.until("response.done", id=answer["id"])
        dones = call.events.of("response.done")
        (done,) = [d for d in dones if d["response"]["id"] == answer["id"]]
        await call.until_heard(lambda: call.heard[-1].at > heard_stop + 0.6, TIMEOUT_S)
    assert cleared["response_id"] == started["response_id"]
    assert done["response"]["status"] == status
    # Silent within 100 ms of speech_started (the next answer may follow later).
    after = [h for h in call.heard if heard_stop + 0.1 <= h.at <= heard_stop + 0.6]
    assert after and max(h.rms for h in after) < 200
    # The item keeps what was played: what this peer heard of it, within a few frames.
    heard_ms = 20 * len([h for h in call.audible_since(played_from) if h.at < heard_stop])
    item_id = truncated["item_id"]
    assert item_id == done["response"]["output"][0]["id"]
    assert abs(truncated["audio_end_ms"] - heard_ms) <= 400, (truncated, heard_ms)
    assert truncated["audio_end_ms"] < len(long) * 1000 // 24_000 - 2000


async def test_an_uninterruptible_answer_plays_on_the_track_while_the_user_talks(
    serve: ServerFactory, tmp_path: Path
) -> None:
    """`interruptible: false` over a call: the track plays the answer to its end under
    the user's speech (no speech_started, no clear, no truncation meanwhile), then the
    speech is the next turn and is answered."""
    long = np.concatenate([load_wav(name) for name in ("weather", "lights")])  # ~4 s
    server = await serve(
        scripted_speech=write_wav(long, tmp_path / "answer.wav"), scripted_chunk_delay_s=0.1
    )
    async with rtc_call(server) as call:
        await call.events.until("session.created")
        call.send({"type": "response.create", "response": {"interruptible": False}})
        started = await call.events.until("output_audio_buffer.started")
        played_from = time.monotonic()
        await call.until_heard(lambda: len(call.audible_since(played_from)) >= 25, TIMEOUT_S)
        call.mic.say(utterance("joke"))
        talked_at = time.monotonic()
        stopped = await call.events.until("output_audio_buffer.stopped")
        assert stopped["response_id"] == started["response_id"]
        assert call.events.of("input_audio_buffer.speech_started") == []
        (first,) = call.events.of("response.done")
        assert first["response"]["status"] == "completed"
        await call.events.until("input_audio_buffer.speech_started")
        second = await call.events.until("response.done")
        assert second["response"]["status"] == "completed"
        types = call.events.types()
    assert "output_audio_buffer.cleared" not in types
    assert "conversation.item.truncated" not in types
    assert "error" not in types
    # The answer was heard all through the user's speech, and to its end.
    audible = call.audible_since(talked_at + 0.2)
    assert len([h for h in audible if h.at <= talked_at + 1.2]) >= 25  # of 50 frames
    heard_ms = 20 * len(call.audible_since(played_from))
    assert heard_ms >= len(long) * 1000 // 24_000 - 1000


KEY = "sk-parley-test-key"


async def test_a_sideband_sees_the_call_and_answers_its_tool_call_unseen_by_the_browser(
    serve: ServerFactory,
) -> None:
    server = await serve(api_keys=[KEY])
    # The application's server mints the browser's ephemeral key with a tool in it.
    tool = {"type": "function", "name": "lookup_order", "parameters": {"type": "object"}}
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        minted = await http.post(
            "/v1/realtime/client_secrets",
            json={"session": {"type": "realtime", "tools": [tool]}},
            headers={"Authorization": f"Bearer {KEY}"},
        )
    ephemeral = minted.json()["value"]
    async with rtc_call(server, key=ephemeral) as call:
        await call.events.until("session.created")
        url = f"{server.ws_url}?call_id={call.call_id}"
        # An ephemeral key may not steer the call from aside.
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(
                url, additional_headers={"Authorization": f"Bearer {ephemeral}"}
            )
        assert refused.value.response.status_code == 403
        async with websockets.connect(
            url, additional_headers={"Authorization": f"Bearer {KEY}"}
        ) as ws:
            side = Events(ws.recv)
            # The sideband asks for a tool call; the browser asked for nothing.
            await ws.send(
                json.dumps(
                    {
                        "type": "response.create",
                        "response": {"tool_choice": {"type": "function", "name": "lookup_order"}},
                    }
                )
            )
            args = await side.until("response.function_call_arguments.done")
            await side.until("response.done")
            output = {
                "type": "function_call_output",
                "call_id": args["call_id"],
                "output": '{"status": "shipped"}',
            }
            await ws.send(json.dumps({"type": "conversation.item.create", "item": output}))
            added = await side.until("conversation.item.added")
            assert added["item"]["type"] == "function_call_output"
            # The browser sees the call's events (one session), and never sent these.
            item_id = added["item"]["id"]
            while not any(e["item"]["id"] == item_id for e in call.events.of(added["type"])):
                await call.events.next()
            assert call.sent == []
            # The application's server hangs up: both sides see the call end.
            async with httpx.AsyncClient(base_url=server.http_url) as http:
                hung = await http.post(
                    f"/v1/realtime/calls/{call.call_id}/hangup",
                    headers={"Authorization": f"Bearer {KEY}"},
                )
            assert hung.status_code == 200
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(ws.recv(), TIMEOUT_S)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
        await call.until_closed(TIMEOUT_S)
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        gone = await http.post(
            f"/v1/realtime/calls/{call.call_id}/hangup",
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "call_not_found"


@pytest.mark.parametrize(
    ("key", "body", "content_type", "status", "code"),
    [
        (None, "offer", "application/sdp", 401, "missing_api_key"),
        ("wrong", "offer", "application/sdp", 401, "invalid_api_key"),
        (KEY, "not an offer", "application/sdp", 400, "invalid_sdp"),
        (KEY, "offer", "image/png", 415, "unsupported_media_type"),
        (KEY, "v=0\r\nbroken", "application/sdp", 400, "invalid_sdp"),
    ],
)
async def test_refusals_come_before_any_media(
    serve: ServerFactory, key: str | None, body: str, content_type: str, status: int, code: str
) -> None:
    server = await serve(api_keys=[KEY])
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio")
    try:
        sdp = await offer_sdp(pc) if body == "offer" else body
        headers = {"Content-Type": content_type} | (
            {"Authorization": f"Bearer {key}"} if key else {}
        )
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            refused = await http.post("/v1/realtime/calls", content=sdp, headers=headers)
            health = (await http.get("/healthz")).json()
    finally:
        await pc.close()
    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["code"] == code
    assert health["sessions"] == 0  # nothing was opened


async def offer_with(*kinds: str) -> str:
    """An aiortc offer with a transceiver of each kind and the events channel."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    for kind in kinds:
        pc.addTransceiver(kind)
    pc.createDataChannel("oai-events")
    try:
        return await offer_sdp(pc)
    finally:
        await pc.close()


@pytest.mark.parametrize("shape", ["application/sdp", "json", "multipart"])
async def test_an_offer_with_video_is_refused_before_any_media(
    serve: ServerFactory, shape: str
) -> None:
    server = await serve(api_keys=[KEY])
    sdp = await offer_with("audio", "video")
    session = {"type": "realtime", "instructions": "Be brief."}  # as the SDKs send one
    auth = {"Authorization": f"Bearer {KEY}"}
    post: dict[str, Any] = {
        "application/sdp": {"content": sdp, "headers": auth | {"Content-Type": shape}},
        "json": {"json": {"sdp": sdp, "session": session}, "headers": auth},
        "multipart": {
            "files": {"sdp": (None, sdp), "session": (None, json.dumps(session))},
            "headers": auth,
        },
    }[shape]
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        refused = await http.post("/v1/realtime/calls", **post)
        health = (await http.get("/healthz")).json()
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_sdp", "sdp")
    assert error["message"].endswith("media sections: 1 audio, 1 video, 1 data.")
    assert health["sessions"] == 0


class NoSession:
    """All a call needs of its session to answer an offer."""

    def report_playback(self, played: object) -> None:
        pass


async def remote_addresses(sdp: str, **settings: Any) -> set[tuple[str, int]]:
    """The addresses a call answering `sdp` sends ICE checks to (closed at once)."""
    call = Call("rtc_test", NoSession(), Settings(**TEST_SETTINGS, **settings))  # type: ignore[arg-type]
    try:
        await call.answer(sdp)
        transport = call.pc.getTransceivers()[0].receiver.transport.transport
        return {(c.ip, c.port) for c in transport.getRemoteCandidates()}
    finally:
        await call.pc.close()


async def test_an_offer_names_few_addresses_to_check_and_none_on_this_host(
    serve: ServerFactory,
) -> None:
    sdp = await offer_with("audio")
    own = next(line for line in sdp.splitlines() if line.startswith("a=candidate:"))
    address = own.split()[4]  # the caller's own host candidate: checks stay on this host
    listed = ["a=candidate:8 1 udp 200 127.0.0.1 6379 typ host"]
    listed += ["a=candidate:7 1 udp 200 169.254.169.254 80 typ host"]
    listed += [f"a=candidate:9 1 udp 100 {address} {40000 + i} typ host" for i in range(40)]
    crafted = sdp.replace(own + "\r\n", own + "\r\n" + "\r\n".join(listed) + "\r\n")
    checked = await remote_addresses(crafted)
    assert len(checked) == 16
    assert {ip for ip, _ in checked} == {address}
    # Only the operator opens a refused range (a caller on this host).
    opened = await remote_addresses(crafted, rtc_candidate_networks=["127.0.0.0/8"])
    assert ("127.0.0.1", 6379) in opened
    assert not any(ip == "169.254.169.254" for ip, _ in opened)


async def test_a_call_is_hung_up_at_its_maximum_length_telling_the_client(
    serve: ServerFactory,
) -> None:
    server = await serve(max_call_s=0.5)
    async with rtc_call(server) as call:
        await call.events.until("session.created")
        error = await call.events.until("error")
        await call.until_closed(TIMEOUT_S)
    assert error["error"] == {
        "type": "invalid_request_error",
        "code": "session_expired",
        "message": "Your session hit the maximum duration of 0.5 seconds.",
        "param": None,
        "event_id": None,
    }
