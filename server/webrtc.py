"""A WebRTC call: an aiortc peer connection (`Peer`) around one session (`Call`:
the session-level part, its playout and sidebands). A call that is not resumable has
one peer connection for its life; a resumable one (server/resumable_call.py) gets a
new one each time its client comes back.

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
closes (a resumable call's is detached instead), when the session ends (drain), when
the peer never connects, or at its maximum length (`max_call_s`: the client gets
OpenAI's `session_expired` error).
Before aiortc reads the offer its remote candidates are screened
(server/sdp_policy.py): Parley checks only the addresses it may reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Coroutine
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


class Peer:
    """One peer connection of a call: the client's track in, the track that plays the
    call's playout, and the `oai-events` data channel. A call has one at a time; a
    resumable call (server/resumable_call.py) gets a new one each time it resumes,
    around the same session, playout and sidebands."""

    def __init__(
        self,
        call_id: str,
        session: Session,
        playout: PlayoutQueue,
        settings: Settings,
        hang_up: Callable[[str], None],
    ) -> None:
        self.call_id = call_id
        self.session = session
        self.settings = settings
        self.pc = RTCPeerConnection(ice_configuration(settings))
        self.track = PlayoutTrack(playout)
        self.channel: RTCDataChannel | None = None
        # The peer connection failed or closed, or its data channel closed: whether
        # that ends the call is the call's to decide.
        self.lost = asyncio.Event()
        self.lost_reason = ""
        self._hang_up = hang_up  # a client that floods ends the call, resumable or not
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

    def lose(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()

    def cut_off(self) -> None:
        """A newer peer connection took the call over: silent at once (both tracks
        would take frames of the one playout), closed by whoever served this one."""
        self.track.stop()
        self.lose("taken over by a new peer connection")

    def _on_state(self) -> None:
        state = self.pc.connectionState
        log.debug("call %s: connection %s", self.call_id, state)
        if state in ("failed", "closed"):
            self.lose(f"peer connection {state}")

    async def connected_in_time(self) -> None:
        await asyncio.sleep(CONNECT_TIMEOUT_S)
        if self.pc.connectionState != "connected":
            raise CallEnded(f"the peer did not connect within {CONNECT_TIMEOUT_S:g} s")
        await asyncio.Event().wait()  # connected: this task has nothing more to do

    async def close(self) -> None:
        """Stop its media and close it (bounded: a peer that vanished must not hold
        the call, or a shutdown, open)."""
        for task in self._tasks:
            task.cancel()
        self.track.stop()
        closing = asyncio.create_task(self.pc.close())
        await asyncio.wait({closing}, timeout=CLOSE_TIMEOUT_S)

    # --- media in -----------------------------------------------------------------------

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._spawn(self._read_track(track), "track-in")

    async def _read_track(self, track: MediaStreamTrack) -> None:
        async for received, pcm in track_pcm(track):
            await self.session.feed(pcm, received)

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coroutine, name=f"{name}:{self.call_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- events in ------------------------------------------------------------------

    def _on_channel(self, channel: RTCDataChannel) -> None:
        if channel.label != EVENTS_CHANNEL or self.channel is not None:
            log.info("call %s: ignoring data channel %r", self.call_id, channel.label)
            return
        self.channel = channel
        channel.on("message", self._on_message)
        channel.on("close", lambda: self.lose("data channel closed"))
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
            self._hang_up("the client floods the data channel")
            return
        self._pending_chars += len(message)
        self._messages.put_nowait(message)

    async def read_events(self) -> None:
        limit = self.settings.max_message_bytes
        while True:
            text = await self._messages.get()
            self._pending_chars -= len(text)
            await submit_text(self.session, text, limit, on_call=True)

    # --- events out -------------------------------------------------------------------

    async def send(self, text: str) -> bool:
        """One event on the data channel (none negotiated: nothing to send); False
        when the channel closed, CallEnded when it never opened or the client does
        not read it."""
        if not self._wants_channel:
            return True
        deadline = self.settings.write_timeout_s
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await self._channel_open.wait()
        except TimeoutError:
            raise CallEnded("the data channel never opened") from None
        channel = self.channel
        assert channel is not None
        if channel.readyState != "open":
            return False
        if channel.bufferedAmount > CHANNEL_HIGH_WATER:
            low = asyncio.Event()
            channel.bufferedAmountLowThreshold = CHANNEL_HIGH_WATER // 2
            channel.once("bufferedamountlow", low.set)
            try:
                async with asyncio.timeout(deadline):
                    await low.wait()
            except TimeoutError:
                raise CallEnded(f"the client read no event for {deadline:g} s") from None
        limit = self._max_message_bytes()
        fitted = text if len(text.encode()) <= limit else fit_for_channel(_kind(text), text, limit)
        if fitted is None:
            kind = _kind(text)
            log.warning("call %s: a %s too large for the data channel", self.call_id, kind)
            fitted = too_large_error(self.session.ids.new("event"), kind, len(text))
        channel.send(fitted)
        return True

    def _max_message_bytes(self) -> int:
        # What the peer's SDP allows (Chrome: 256 KiB); aiortc refuses larger messages.
        sctp = self.pc.sctp
        limit = getattr(sctp, "_remote_max_message_size", None) if sctp is not None else None
        return int(limit) if limit else DEFAULT_MAX_MESSAGE_BYTES


class Call:
    """A call's session-level part: its id, session, playout and sidebands, and its
    current peer connection (`peer`)."""

    def __init__(self, call_id: str, session: Session, settings: Settings) -> None:
        self.call_id = call_id
        self.session = session
        self.settings = settings
        self.playout = PlayoutQueue(session.report_playback)
        self.sidebands: set[Sideband] = set()
        self.ended = asyncio.Event()  # hung up (or, not resumable: its peer is lost)
        self.end_reason = ""
        self.peer = self.new_peer()

    @property
    def pc(self) -> RTCPeerConnection:
        return self.peer.pc

    def new_peer(self) -> Peer:
        return Peer(self.call_id, self.session, self.playout, self.settings, self.hang_up)

    async def answer(self, offer_sdp: str) -> str:
        return await self.peer.answer(offer_sdp)

    def hang_up(self, reason: str) -> None:
        if not self.ended.is_set():
            self.end_reason = reason
            self.ended.set()

    # --- events and audio out ---------------------------------------------------------

    def route(self, event: OutEvent) -> str | None:
        """One event of the session's outbox: audio to the playout; any other event
        drives the playout (barge-in clears it), goes to every sideband, and is the
        text for the data channel (returned). Never awaits."""
        if event.type == AUDIO_DELTA:
            if event.pcm is not None and event.response_id is not None:
                self.playout.push(event.response_id, event.item_id, event.pcm)
            return None
        self._steer_playout(event)
        for sideband in list(self.sidebands):
            try:
                sideband.queue.put_nowait(event.text)
            except asyncio.QueueFull:
                log.info("call %s: a sideband is not reading; detached", self.call_id)
                self.detach(sideband)
        return event.text

    async def _write(self) -> None:
        while (event := await self.session.outbox.get()) is not None:
            text = self.route(event)
            if text is not None and not await self.peer.send(text):
                raise CallEnded("the data channel closed")

    def _steer_playout(self, event: OutEvent) -> None:
        if event.flush is Flush.ALL:  # the session decided: speech interrupts the answer
            self.playout.clear()  # barge-in: silent at once, the item truncated
        elif event.type == "output_audio_buffer.cleared":
            self.playout.clear(announce=False)  # the client's clear; its event is this
        elif event.type == "response.done" and event.response_id is not None:
            self.playout.finish(event.response_id)

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

    def close_sidebands(self) -> None:
        """The call ended: each sideband closes (1000)."""
        for sideband in list(self.sidebands):
            self.detach(sideband)

    # --- the call's life ------------------------------------------------------------

    async def run(self, hub: SessionHub) -> str:
        """Serve a call that is not resumable until it ends; why it ended."""
        peer = self.peer
        watch = (
            self.ended.wait(),
            self._hang_up_when_lost(),
            peer.connected_in_time(),
            self.expire(),
        )
        write, read = self._write(), peer.read_events()
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
            self.close_sidebands()
            await peer.close()

    async def _hang_up_when_lost(self) -> None:
        await self.peer.lost.wait()
        self.hang_up(self.peer.lost_reason)

    async def expire(self) -> None:
        """At the call's maximum length the client is told, as OpenAI tells it, and
        the session ends (its responses cancelled, their last events sent); a
        session that does not end within END_GRACE_S is cut off (CallEnded)."""
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


def _kind(text: str) -> str:
    """An event's type, read from its text (only for one too large to send as is)."""
    kind = json.loads(text).get("type")
    return kind if isinstance(kind, str) else "event"


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
    is on the track, and seconds of it in base64 outgrow Chrome's 256 KiB) and its
    images' data (the client sent them; an image is up to megabytes of base64), as
    `conversation.item.added` shows them; None when it does not fit even so."""
    if len(text.encode()) <= limit:
        return text
    if kind == "conversation.item.retrieved":
        event = json.loads(text)
        for part in event.get("item", {}).get("content") or []:
            part.pop("audio", None)
            part.pop("image_url", None)
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
