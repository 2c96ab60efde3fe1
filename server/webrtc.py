"""A WebRTC call: one aiortc peer connection around one session.

track in:  Opus 48 kHz -> 24 kHz mono pcm16 -> `Session.feed` (server VAD makes turns)
events:    the `oai-events` data channel, JSON both ways, the WebSocket's protocol
           (no `input_audio_buffer.append`: audio comes from the track)
track out: the session's audio deltas are played by `PlayoutTrack` in real time, not
           sent as events; the playout reports started/stopped/cleared and, when it
           cuts an answer, what was played (the session truncates the item to it)
sideband:  server-side WebSockets (`/v1/realtime?call_id=`) attached to the call get
           its events and may send client events (server/realtime.py, which finds
           the call through the hub, server/sessions.py)

The call ends on hang-up (DELETE, `/hangup`), when the peer connection fails or
closes, when the session ends (drain), when the peer never connects, or at its
maximum length (`max_call_s`: the client gets OpenAI's `session_expired` error).
Before aiortc reads the offer its remote candidates are screened
(server/sdp_policy.py): Parley checks only the addresses it may reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Coroutine
from typing import Any

from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import MediaStreamTrack
from aiortc.rtcdatachannel import RTCDataChannel
from aiortc.rtcrtpreceiver import RTCRtpReceiver
from openai.types.realtime import RealtimeErrorEvent

from engine.emitter import Flush, OutEvent, build
from engine.protocol import ProtocolError
from engine.session import Session
from server.config import Settings
from server.playout import PlayoutQueue, PlayoutTrack
from server.rtc_audio import track_pcm
from server.sdp_policy import CandidateRules, screen_candidates
from server.sessions import END_GRACE_S, SessionHub, Sideband, submit_text

log = logging.getLogger(__name__)

EVENTS_CHANNEL = "oai-events"
# A peer that has not connected this long after the answer never will.
CONNECT_TIMEOUT_S = 30.0
# Data channel messages waiting for the session: past this the client is flooding.
MAX_PENDING_MESSAGES = 1024
# Events queued on the data channel (bytes) before the writer waits for the peer.
CHANNEL_HIGH_WATER = 1 << 20
# Incoming audio frames held before decoding (aiortc's default is 4: 80 ms).
JITTER_FRAMES = 2
# A data channel message the peer takes, when its SDP says nothing (RFC 8841's default).
DEFAULT_MAX_MESSAGE_BYTES = 65536
# How long closing the peer connection may take when the call ends.
CLOSE_TIMEOUT_S = 5.0
AUDIO_DELTA = "response.output_audio.delta"


class CallError(Exception):
    """The offer cannot be answered (no audio, bad SDP): HTTP 400."""


class CallEnded(Exception):
    """The peer stopped reading or flooded: the call is over."""


def ice_configuration(settings: Settings) -> RTCConfiguration:
    """The configured ICE servers; none means host candidates only (aiortc would
    otherwise ask Google's STUN server, a network call nobody configured)."""
    servers = [
        RTCIceServer(
            urls=url,
            username=settings.ice_username if url.startswith("turn") else None,
            credential=(
                settings.ice_credential.get_secret_value()
                if settings.ice_credential is not None and url.startswith("turn")
                else None
            ),
        )
        for url in settings.ice_servers
    ]
    return RTCConfiguration(iceServers=servers)


class Call:
    def __init__(self, call_id: str, session: Session, settings: Settings) -> None:
        self.call_id = call_id
        self.session = session
        self.settings = settings
        self.pc = RTCPeerConnection(ice_configuration(settings))
        self.playout = PlayoutQueue(session.report_playback)
        self.track = PlayoutTrack(self.playout)
        self.channel: RTCDataChannel | None = None
        self.sidebands: set[Sideband] = set()
        self.ended = asyncio.Event()  # hang-up, or the peer connection failed or closed
        self.end_reason = ""
        self._channel_open = asyncio.Event()
        self._wants_channel = False
        self._messages: asyncio.Queue[str] = asyncio.Queue()
        self._pending_chars = 0  # of the messages waiting for the session
        self._tasks: set[asyncio.Task[None]] = set()
        self.pc.on("datachannel", self._on_channel)
        self.pc.on("track", self._on_track)
        self.pc.on("connectionstatechange", self._on_state)

    # --- signalling -------------------------------------------------------------------

    async def answer(self, offer_sdp: str) -> str:
        """The SDP answer to the client's offer (ICE candidates gathered in it)."""
        rules = CandidateRules(
            self.settings.rtc_max_candidates, tuple(self.settings.rtc_candidate_networks)
        )
        screened = screen_candidates(offer_sdp, rules)
        if screened.dropped:
            log.info("call %s: remote candidates dropped: %s", self.call_id, screened.dropped)
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(screened.sdp, "offer"))
        except Exception as exc:  # aiortc raises ValueError and friends for bad SDP
            raise CallError(f"The SDP offer cannot be used: {exc}") from None
        kinds = [t.kind for t in self.pc.getTransceivers()]
        if "audio" not in kinds:
            raise CallError("The SDP offer has no audio media section.")
        self._wants_channel = self.pc.sctp is not None
        for transceiver in self.pc.getTransceivers():
            shorten_jitter_buffer(transceiver.receiver)
        self.pc.addTrack(self.track)
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        return self.pc.localDescription.sdp

    def hang_up(self, reason: str) -> None:
        if not self.ended.is_set():
            self.end_reason = reason
            self.ended.set()

    def _on_state(self) -> None:
        state = self.pc.connectionState
        log.debug("call %s: connection %s", self.call_id, state)
        if state in ("failed", "closed"):
            self.hang_up(f"peer connection {state}")

    # --- media in -----------------------------------------------------------------------

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._spawn(self._read_track(track), "track-in")

    async def _read_track(self, track: MediaStreamTrack) -> None:
        async for received, pcm in track_pcm(track):
            await self.session.feed(pcm, received)

    # --- events in ------------------------------------------------------------------

    def _on_channel(self, channel: RTCDataChannel) -> None:
        if channel.label != EVENTS_CHANNEL or self.channel is not None:
            log.info("call %s: ignoring data channel %r", self.call_id, channel.label)
            return
        self.channel = channel
        channel.on("message", self._on_message)
        channel.on("close", lambda: self.hang_up("data channel closed"))
        if channel.readyState == "open":
            self._channel_open.set()
        channel.on("open", self._channel_open.set)

    def _on_message(self, message: str | bytes) -> None:
        # aiortc hands messages over as they come, with no backpressure of its own:
        # bounded here, in messages and in characters.
        if isinstance(message, bytes):
            message = message.decode("utf-8", errors="replace")
        if (
            self._messages.qsize() >= MAX_PENDING_MESSAGES
            or self._pending_chars + len(message) > self.settings.max_message_bytes
        ):
            self.hang_up("the client floods the data channel")
            return
        self._pending_chars += len(message)
        self._messages.put_nowait(message)

    async def _read_events(self) -> None:
        limit = self.settings.max_message_bytes
        while True:
            text = await self._messages.get()
            self._pending_chars -= len(text)
            await submit_text(self.session, text, limit, on_call=True)

    # --- events and audio out ---------------------------------------------------------

    async def _write(self) -> None:
        """The session's outbox: audio to the playout, events to the data channel and
        every sideband; what passes drives the playout (barge-in clears it)."""
        while True:
            event = await self.session.outbox.get()
            if event is None:
                return
            if event.type == AUDIO_DELTA:
                if event.pcm is not None and event.response_id is not None:
                    self.playout.push(event.response_id, event.item_id, event.pcm)
                continue
            self._steer_playout(event)
            for sideband in list(self.sidebands):
                try:
                    sideband.queue.put_nowait(event.text)
                except asyncio.QueueFull:
                    log.info("call %s: a sideband is not reading; detached", self.call_id)
                    self.detach(sideband)
            if self._wants_channel:
                await self._send(event)

    def _steer_playout(self, event: OutEvent) -> None:
        if event.flush is Flush.ALL:  # the session decided: speech interrupts the answer
            self.playout.clear()  # barge-in: silent at once, the item truncated
        elif event.type == "output_audio_buffer.cleared":
            self.playout.clear(announce=False)  # the client's clear; its event is this
        elif event.type == "response.done" and event.response_id is not None:
            self.playout.finish(event.response_id)

    async def _send(self, event: OutEvent) -> None:
        deadline = self.settings.write_timeout_s
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await self._channel_open.wait()
        except TimeoutError:
            raise CallEnded("the data channel never opened") from None
        channel = self.channel
        assert channel is not None
        if channel.readyState != "open":
            raise CallEnded("the data channel closed")
        if channel.bufferedAmount > CHANNEL_HIGH_WATER:
            low = asyncio.Event()
            channel.bufferedAmountLowThreshold = CHANNEL_HIGH_WATER // 2
            channel.once("bufferedamountlow", low.set)
            try:
                async with asyncio.timeout(deadline):
                    await low.wait()
            except TimeoutError:
                raise CallEnded(f"the client read no event for {deadline:g} s") from None
        text = fit_for_channel(event.type, event.text, self._max_message_bytes())
        if text is None:
            log.warning("call %s: a %s too large for the data channel", self.call_id, event.type)
            text = too_large_error(self.session.ids.new("event"), event.type, len(event.text))
        channel.send(text)

    def _max_message_bytes(self) -> int:
        # What the peer's SDP allows (Chrome: 256 KiB); aiortc refuses larger messages.
        sctp = self.pc.sctp
        limit = getattr(sctp, "_remote_max_message_size", None) if sctp is not None else None
        return int(limit) if limit else DEFAULT_MAX_MESSAGE_BYTES

    # --- sidebands --------------------------------------------------------------------

    def attach(self) -> Sideband:
        sideband = Sideband()
        self.sidebands.add(sideband)
        return sideband

    def detach(self, sideband: Sideband) -> None:
        if sideband in self.sidebands:
            self.sidebands.discard(sideband)
            with contextlib.suppress(asyncio.QueueFull):
                sideband.queue.put_nowait(None)

    # --- the call's life ------------------------------------------------------------

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coroutine, name=f"{name}:{self.call_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self, hub: SessionHub) -> str:
        """Serve the call until it ends; why it ended."""
        watch = (self.ended.wait(), self._connected_in_time(), self._expire())
        write, read = self._write(), self._read_events()
        try:
            async with hub.serving(
                self.session, write, read, label=self.call_id, watch=watch
            ) as served:
                for name, error in served.failures():
                    if isinstance(error, CallEnded):
                        self.hang_up(str(error))
                    else:
                        log.error("call %s: %s failed", self.call_id, name, exc_info=error)
                        self.hang_up("internal error")
                if served.runner in served.done:
                    self.end_reason = self.end_reason or "the session ended"
                    await served.last_events(self.settings.write_timeout_s)
                return self.end_reason or "hung up"
        finally:
            for task in self._tasks:
                task.cancel()
            for sideband in list(self.sidebands):
                self.detach(sideband)
            self.track.stop()
            # Bounded: a peer that vanished must not hold the call (or a shutdown) open.
            closing = asyncio.create_task(self.pc.close())
            await asyncio.wait({closing}, timeout=CLOSE_TIMEOUT_S)

    async def _connected_in_time(self) -> None:
        await asyncio.sleep(CONNECT_TIMEOUT_S)
        if self.pc.connectionState != "connected":
            raise CallEnded(f"the peer did not connect within {CONNECT_TIMEOUT_S:g} s")
        await asyncio.Event().wait()  # connected: this task has nothing more to do

    async def _expire(self) -> None:
        """At the call's maximum length the client is told, as OpenAI tells it, and
        the session ends (its responses cancelled, their last events sent); a
        session that does not end within END_GRACE_S is cut off."""
        limit = self.settings.max_call_s
        if not limit:
            await asyncio.Event().wait()  # no limit
        await asyncio.sleep(limit)
        error = session_expired(limit)
        log.info("call %s: %s", self.call_id, error.message)
        self.end_reason = f"maximum length of {limit:g} s"
        with contextlib.suppress(TimeoutError):  # a mailbox kept full must not hold the call
            async with asyncio.timeout(END_GRACE_S):
                await self.session.submit(error)
        self.session.end()
        await asyncio.sleep(END_GRACE_S)
        raise CallEnded(self.end_reason)


def session_expired(limit_s: float) -> ProtocolError:
    """OpenAI's error for a session past its maximum duration."""
    minutes = limit_s / 60
    span = (
        f"{minutes:g} minutes" if minutes.is_integer() and minutes > 1 else f"{limit_s:g} seconds"
    )
    return ProtocolError("session_expired", f"Your session hit the maximum duration of {span}.")


def shorten_jitter_buffer(receiver: RTCRtpReceiver) -> bool:
    """aiortc holds 4 frames (80 ms) of incoming audio before it decodes the first,
    for reordering; a server VAD waits that much longer for every end of speech.
    Two frames (40 ms) still absorb a swapped pair of packets. aiortc has no setting
    for it: its receiver's buffer is replaced (aiortc is pinned, and a test checks
    the attribute is there). False when the receiver is not audio."""
    attribute = "_RTCRtpReceiver__jitter_buffer"
    if getattr(receiver, "_RTCRtpReceiver__kind", None) != "audio":
        return False
    if not isinstance(getattr(receiver, attribute, None), JitterBuffer):
        raise RuntimeError("aiortc's RTCRtpReceiver changed: no audio jitter buffer to shorten")
    setattr(receiver, attribute, JitterBuffer(capacity=16, prefetch=JITTER_FRAMES))
    return True


def fit_for_channel(kind: str, text: str, limit: int) -> str | None:
    """`text` as it can go on a data channel whose peer takes messages up to `limit`
    bytes: as is; a `conversation.item.retrieved` without its audio (a call's audio
    is on the track, and seconds of it in base64 outgrow Chrome's 256 KiB); None when
    it does not fit even so."""
    if len(text.encode()) <= limit:
        return text
    if kind == "conversation.item.retrieved":
        event = json.loads(text)
        for part in event.get("item", {}).get("content") or []:
            part.pop("audio", None)
        slim = json.dumps(event, separators=(",", ":"))
        if len(slim.encode()) <= limit:
            return slim
    return None


def too_large_error(event_id: str, kind: str, size: int) -> str:
    """The `error` event that stands in for a server event the data channel cannot
    carry: the client learns what it missed."""
    message = f"A {kind} event of {size} bytes is larger than this call's data channel carries."
    error = {"type": "server_error", "code": "event_too_large", "message": message}
    event = build(RealtimeErrorEvent, event_id, error=error | {"param": None, "event_id": None})
    return event.model_dump_json(exclude_unset=True)
