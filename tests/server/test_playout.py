"""The playout ledger of a WebRTC call (server/playout.py), frame by frame, and what
fits on its data channel (server/webrtc.py)."""

from __future__ import annotations

import json

import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection
from openai.types.realtime import RealtimeErrorEvent

from engine.emitter import Flush, OutEvent
from engine.playback import PlaybackReport
from server.config import Settings
from server.playout import FRAME, PlayoutQueue
from server.webrtc import (
    JITTER_FRAMES,
    Call,
    fit_for_channel,
    shorten_jitter_buffer,
    too_large_error,
)


def tone(frames: int) -> np.ndarray:
    return np.full(frames * FRAME, 1000, np.int16)


def queue() -> tuple[PlayoutQueue, list[PlaybackReport]]:
    reports: list[PlaybackReport] = []
    return PlayoutQueue(reports.append), reports


def test_started_at_the_first_frame_and_stopped_once_done_and_played() -> None:
    q, reports = queue()
    assert not q.next_frame().any() and reports == []  # silence before any audio
    q.push("resp_1", "item_1", tone(3))
    assert q.next_frame().all() and reports == [PlaybackReport("started", "resp_1")]
    q.next_frame()
    q.next_frame()
    assert q.queued_samples == 0 and reports[-1].kind == "started"  # not done yet
    q.finish("resp_1")
    assert reports[-1] == PlaybackReport("stopped", "resp_1")
    assert q.played == {"item_1": 3 * FRAME}


def test_done_before_played_stops_when_the_last_frame_is_played() -> None:
    q, reports = queue()
    q.push("resp_1", "item_1", tone(2))
    q.finish("resp_1")
    q.next_frame()
    assert [r.kind for r in reports] == ["started"]
    q.next_frame()
    assert [r.kind for r in reports] == ["started", "stopped"]


def test_clear_reports_what_was_played_of_the_item_and_drops_the_rest() -> None:
    q, reports = queue()
    q.push("resp_1", "item_1", tone(10))
    for _ in range(4):
        q.next_frame()
    assert q.clear()
    assert reports[-1] == PlaybackReport("cleared", "resp_1", "item_1", 4 * FRAME * 1000 // 24_000)
    assert q.queued_samples == 0 and not q.next_frame().any()
    assert not q.clear()  # nothing left: no second report
    assert len(reports) == 2


def test_a_clear_the_client_asked_for_truncates_without_a_second_event() -> None:
    q, reports = queue()
    q.push("resp_1", "item_1", tone(5))
    q.next_frame()
    q.clear(announce=False)
    assert reports[-1] == PlaybackReport("dropped", "resp_1", "item_1", FRAME * 1000 // 24_000)


def test_a_partial_frame_is_padded_and_counted_exactly() -> None:
    q, _ = queue()
    q.push("resp_1", "item_1", np.full(FRAME // 2, 7, np.int16))
    frame = q.next_frame()
    assert (frame[: FRAME // 2] == 7).all() and not frame[FRAME // 2 :].any()
    assert q.played == {"item_1": FRAME // 2}


def test_an_event_the_data_channel_cannot_carry_is_slimmed_or_replaced() -> None:
    audio = "A" * 300_000
    retrieved = {
        "type": "conversation.item.retrieved",
        "event_id": "event_1",
        "item": {
            "id": "item_1",
            "content": [{"type": "output_audio", "audio": audio, "transcript": "Hi."}],
        },
    }
    text = json.dumps(retrieved)
    assert fit_for_channel("conversation.item.retrieved", text, 1 << 20) == text
    slim = fit_for_channel("conversation.item.retrieved", text, 256 * 1024)
    assert slim is not None
    assert json.loads(slim)["item"]["content"] == [{"type": "output_audio", "transcript": "Hi."}]
    image = "data:image/png;base64," + "B" * 300_000
    shown = {"type": "input_image", "image_url": image, "detail": "auto"}
    retrieved["item"] = {"id": "item_2", "content": [shown]}
    slim = fit_for_channel("conversation.item.retrieved", json.dumps(retrieved), 256 * 1024)
    assert slim is not None  # the client sent the image: it is shown as added shows it
    assert json.loads(slim)["item"]["content"] == [{"type": "input_image", "detail": "auto"}]
    assert fit_for_channel("session.updated", "x" * 300_000, 256 * 1024) is None
    error = json.loads(too_large_error("event_2", "session.updated", 300_000))
    RealtimeErrorEvent.model_validate(error)  # the SDK's own shape
    assert error["error"]["code"] == "event_too_large"


async def test_an_audio_receiver_gets_the_shorter_jitter_buffer() -> None:
    # aiortc is pinned; this fails loudly if its receiver stops having the buffer.
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        audio = pc.addTransceiver("audio").receiver
        assert shorten_jitter_buffer(audio)
        buffer = audio._RTCRtpReceiver__jitter_buffer  # type: ignore[attr-defined]
        assert buffer._prefetch == JITTER_FRAMES == 2
        assert not shorten_jitter_buffer(pc.addTransceiver("video").receiver)
    finally:
        await pc.close()


class _Reports:
    """What a Call needs of its session to build its playout."""

    def __init__(self) -> None:
        self.played: list[PlaybackReport] = []

    def report_playback(self, played: PlaybackReport) -> None:
        self.played.append(played)


async def test_a_call_s_playout_clears_where_the_session_marked_an_interruption() -> None:
    # The session decides (interrupt_response): the call reads the mark, no config.
    session = _Reports()
    call = Call("rtc_test", session, Settings(executor="scripted"))  # type: ignore[arg-type]
    try:
        started = "input_audio_buffer.speech_started"
        for flush, cleared in ((None, False), (Flush.CLIENT, False), (Flush.ALL, True)):
            call.playout.push("resp_1", "item_1", tone(2))
            call._steer_playout(OutEvent("{}", started, flush=flush))
            assert (call.playout.queued_samples == 0) is cleared
        assert [p.kind for p in session.played] == ["cleared"]
        call.playout.push("resp_2", "item_2", tone(1))
        call.playout.next_frame()
        call._steer_playout(OutEvent("{}", "response.done", response_id="resp_2"))
        assert session.played[-1] == PlaybackReport("stopped", "resp_2")
    finally:
        await call.pc.close()
