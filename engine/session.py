"""One realtime session: a single task that owns all of its state.

Client events and the results of the session's own background tasks arrive in one
mailbox and are handled one at a time by `run()`, so no state is ever written by
two tasks. The session owns the configuration (`session.update`) and its own
lifecycle, and routes each message to the owner that acts on it; the owners return
decisions rather than call back:

- the user's turns (engine/user_turns.py): input audio through turn detection, held
  and postponed speech into `speech_started` / `speech_stopped`, early answers, the
  idle timeout and commits;
- the input audio (engine/input_audio.py): decode, echo guard, noise, the buffer;
- playback (engine/playback.py): what the client was sent, and until when it hears it;
- the prepare chain (engine/prepare_chain.py) hands committed turns to the model,
  in wire order;
- the Responder (engine/responder.py) owns the response lifecycle: epoch, active
  and deferred responses, cancel and finalize; each response task streams one
  response's chunks to the outbox and reports when the stream ends;
- the conversation's client events (engine/item_events.py), input transcription
  (engine/transcription.py), the history bounds (engine/history_bounds.py) and the
  session's MCP servers (engine/mcp/tools.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import numpy.typing as npt
from openai.types.realtime import ConversationCreatedEvent, SessionCreatedEvent, SessionUpdatedEvent

from engine import protocol
from engine.conversation import Conversation
from engine.emitter import Emitter, Ids, Outbox, OutboxOverflow
from engine.end_of_turn import EndOfTurnModel
from engine.held_speech import HearingDone
from engine.history_bounds import HistoryBounds
from engine.images import ImageRules
from engine.input_audio import InputAudio
from engine.input_buffer import InputBuffer
from engine.interruption import HearingRecognizer
from engine.item_events import ItemEvents
from engine.limits import EngineLimits
from engine.mailbox import Close, Drain, End, Mailbox, Message, PreparationFinished, Reject
from engine.mcp.client import McpClient, NoMcp
from engine.mcp.egress import tools_refusal
from engine.mcp.tools import McpListed, McpTools
from engine.observer import Observer
from engine.partials import PartialHeard
from engine.pause_scoring import EndOfTurnScored
from engine.playback import PLAYBACK_EVENTS, Playback, PlaybackReport, TrackAudio
from engine.prepare_chain import PrepareChain, PrepareChainBroken
from engine.prompts import PromptLibrary
from engine.protocol.events import ValidatedEvent
from engine.responder import Responder, ResponseEnded
from engine.response import ResponseFinished, request_from_create
from engine.session_config import apply_update, new_config, to_wire, unhonoured
from engine.tracing import trace_label
from engine.transcription import InputTranscription, TranscriptionFinished
from engine.transcription_session import SessionType, opened_type
from engine.transcription_session import refusal as transcription_refusal
from engine.user_turns import UserTurns
from engine.vad import VadBackend
from models.base import Executor
from models.listening.fair_pool import CALLER

log = logging.getLogger(__name__)


class Session:
    def __init__(
        self,
        executor: Executor,
        vad_backend: VadBackend,
        *,
        model: str,
        limits: EngineLimits | None = None,
        preset: protocol.SessionIn | tuple[protocol.SessionIn, ...] | None = None,
        observer: Observer | None = None,
        end_of_turn: EndOfTurnModel | None = None,
        hearing: HearingRecognizer | None = None,
        clock: Callable[[], float] = time.monotonic,
        mcp_client: McpClient | None = None,
        prompts: PromptLibrary | None = None,
        intent: SessionType | None = None,  # `?intent=transcription` when it opened
    ) -> None:
        self.limits = limits or EngineLimits()
        self.prompts = prompts  # the operator's, for `session.prompt`
        self.mailbox = Mailbox(self.limits.mailbox_slots)
        self.executor = executor
        self.ids = Ids()
        self.session_id = self.ids.new("sess")
        # `preset`: a configuration fixed before the client connected (an ephemeral
        # key's session); validated when it was made, so it applies cleanly here.
        presets = preset if isinstance(preset, tuple) else (preset,) if preset else ()
        config = new_config(model, opened_type(executor, presets, intent))
        mcp_client = mcp_client or NoMcp()
        # A WebRTC call may bring its own on top of its key's, applied in that order.
        for each in presets:
            config = apply_update(config, each, audio_started=False, prompts=prompts)
            if (refused := tools_refusal(each.tools, mcp_client.policy)) is not None:
                raise refused  # a key's was checked when made; a call's own part is new
        self.config = config
        self.observer = observer  # None: nothing is reported, at no cost
        self.input = InputAudio(self.config, clock)
        session_id = self.session_id
        self.outbox = Outbox(
            self.limits.outbox_limit,
            self.limits.outbox_reserve,
            self.limits.outbox_limit_chars,
            self.limits.outbox_reserve_chars,
            current_epoch=lambda lane: self.responder.lane_epoch(lane),
            on_taken=lambda event: self.playback.taken(event),
        )
        # What the client hears: what was sent, and until when an answer is audible.
        first_audio = None if observer is None else partial(observer.first_audio_sent, session_id)
        self.playback = Playback(
            lambda: self.input.far_end, first_audio, queued=self.outbox.holds_audio_of
        )
        self.emit = Emitter(self.outbox, self.ids)
        self.conversation = Conversation(self.ids.new("conv"))
        self.prepares = PrepareChain(
            notify=lambda preparation, error: self._post(PreparationFinished(preparation, error))
        )
        # The session's MCP servers (engine/mcp/tools.py), listed from `run` on.
        self.mcp = McpTools(
            mcp_client,
            emit=self.emit,
            conversation=self.conversation,
            new_id=self.ids.new,
            post=self._post,
        )
        self.responder = Responder(
            executor=executor,
            config=lambda: self.config,
            conversation=self.conversation,
            prepares=self.prepares,
            emit=self.emit,
            outbox=self.outbox,
            playback=self.playback,
            ids=self.ids,
            limits=self.limits,
            session_id=self.session_id,
            post=self._post,
            on_ended=self._on_response_ended,
            observer=observer,
            mcp=self.mcp,
        )
        self._busy = False
        images = ImageRules.of(executor.sees_images, self.limits)
        self.items = ItemEvents(
            self.conversation, self.emit, self.ids, self.responder, self.playback, images
        )
        self.transcription = InputTranscription(
            executor, self.emit, self.conversation, self._post, self.limits.partial_transcript_ms
        )
        self.history = HistoryBounds(
            config=lambda: self.config,
            conversation=self.conversation,
            limits=self.limits,
            responder=self.responder,
            transcription=self.transcription,
            playback=self.playback,
            emit=self.emit,
        )
        # The input side: audio into turns, turns into items (engine/user_turns.py).
        self.user_turns = UserTurns(
            config=lambda: self.config,
            input_audio=self.input,
            executor=executor,
            vad_backend=vad_backend,
            end_of_turn=end_of_turn,
            hearing=hearing,
            conversation=self.conversation,
            prepares=self.prepares,
            responder=self.responder,
            playback=self.playback,
            transcription=self.transcription,
            emit=self.emit,
            ids=self.ids,
            limits=self.limits,
            session_id=self.session_id,
            post=self._post,
            history=self.history,
            observer=observer,
        )

    @property
    def buffer(self) -> InputBuffer:
        return self.input.buffer

    # --- the mailbox ----------------------------------------------------------------

    async def submit(self, event: protocol.ClientEvent | protocol.ProtocolError) -> None:
        """Queue a client event (or its parse error); waits while the mailbox is full,
        which stops the reader and so pushes back on the client without losing data."""
        await self.mailbox.submit(event)

    async def feed(self, pcm: npt.NDArray[np.int16], received_at: float | None = None) -> None:
        """Queue audio from a media track (24 kHz pcm16); waits as `submit` does."""
        await self.mailbox.feed(pcm, received_at)

    def report_playback(self, played: PlaybackReport) -> None:
        """The transport's playout moved on (WebRTC: the server plays the audio)."""
        self._post(played)

    def _post(self, message: Message) -> None:
        self.mailbox.post(message)

    def close(self) -> None:
        """The connection is gone: end now, telling nobody."""
        self._post(Close())

    def drain(self) -> None:
        """The server is shutting down: `run` returns as soon as the session is idle
        (at once if it is now), so answers in flight finish first."""
        self._post(Drain())

    def end(self) -> None:
        """The server's drain deadline: every response is cancelled with its
        `response.done` (in the outbox, for the connection to send), then `run`
        returns."""
        self._post(End())

    def handled(self) -> bool:
        """Every message so far is handled (work they started may still run)."""
        return self.mailbox.empty() and not self._busy

    def idle(self) -> bool:
        """Nothing queued or running: no response active, deferred or out of band,
        no turn being prepared or transcribed (for tests and graceful shutdown)."""
        return (
            self.handled()
            and not self.responder.responding
            and all(r.task.done() for r in self.prepares.tracked())
            and self.transcription.idle()
            and self.user_turns.idle()
        )

    async def run(self) -> None:
        # The shared listening models serve sessions in fair shares by this id; the
        # tasks the session starts (its pause scoring, its hearings) inherit it.
        CALLER.set(self.session_id)
        self.emit.control(SessionCreatedEvent, session=to_wire(self.config))
        self.emit.control(
            ConversationCreatedEvent,
            conversation={"id": self.conversation.id, "object": "realtime.conversation"},
        )
        if self.observer is not None:
            self.observer.session_opened(self.session_id)
            if (label := trace_label(self.config.tracing)) is not None:
                self.observer.tracing_set(self.session_id, label)
        self.mcp.sync(self.config.mcp)  # an ephemeral key's preset may name servers
        try:
            draining = False
            while True:
                message = await self.mailbox.get()
                if isinstance(message, Close):
                    break
                if isinstance(message, End):
                    await self.responder.cancel_all()
                    break
                draining = draining or isinstance(message, Drain)
                self._busy = True
                try:
                    if not isinstance(message, Drain):
                        await self._dispatch(message)
                    self.responder.start_deferred()
                finally:
                    self._busy = False
                if self.outbox.full():
                    # Queued messages are taken without a pause: let the writer run
                    # before the next, or a burst of client events could fill the
                    # control reserve and a client that reads would look stalled.
                    await asyncio.sleep(0)
                # Checked after every message: whatever ends the last piece of work
                # (a response's end, a preparation's) arrives as one.
                if draining and self.idle():
                    break
        except OutboxOverflow:
            log.warning("session %s: client is not reading; closing", self.session_id)
            raise
        finally:
            await self._shutdown()

    async def _dispatch(self, message: Message) -> None:
        try:
            await self._handle(message)
        except protocol.ProtocolError as exc:
            self._error(exc)
        except OutboxOverflow:
            raise
        except Exception:
            # A bug must not end the session: report it and carry on.
            log.exception("session %s: error handling %s", self.session_id, type(message))
            self._error(
                protocol.ProtocolError(
                    "internal_error",
                    "The server failed to handle this event.",
                    event_id=getattr(message, "event_id", None),
                    type="server_error",
                )
            )
        finally:
            self.mailbox.taken(message)

    async def _handle(self, m: Message) -> None:
        if self.config.type == "transcription" and isinstance(m, ValidatedEvent):
            if (refused := transcription_refusal(m)) is not None:
                raise refused  # no responses, no conversation to edit
        match m:
            case protocol.InputAudioBufferAppend():
                await self.user_turns.append(m)
            case TrackAudio():
                await self.user_turns.track_audio(m)
            case protocol.InputAudioBufferCommit():
                self.user_turns.commit(m)
            case protocol.InputAudioBufferClear():
                self.user_turns.clear()
            case protocol.SessionUpdate():
                self._on_session_update(m)
            case protocol.ResponseCreate():
                self.responder.request(
                    request_from_create(m, self.conversation, self.ids.new, self.items.images)
                )
            case protocol.ResponseCancel():
                await self.responder.cancel(m)
            case protocol.ConversationItemTruncate():
                await self.items.truncate(m)
            case protocol.ConversationItemCreate():
                self.items.create(m)
                self.history.enforce()
            case protocol.ConversationItemRetrieve():
                self.items.retrieve(m)
            case protocol.ConversationItemDelete():
                self.items.delete(m)
            case protocol.OutputAudioBufferClear():
                await self.responder.clear_output(m)
                self.user_turns.output_cleared()
            case Reject():
                self._error(m.error)
            case PreparationFinished():
                self._on_preparation_finished(m)
            case ResponseFinished():
                self.responder.finished(m)
            case TranscriptionFinished():
                self.transcription.finished(m)
                self.history.enforce()  # a transcript is text the bounds count
            case PartialHeard():
                self.transcription.partial_heard(m)
            case EndOfTurnScored():
                await self.user_turns.end_of_turn_scored(m)
            case HearingDone():
                await self.user_turns.hearing_done(m)
            case PlaybackReport():
                await self._on_playback(m)
            case McpListed():
                self.mcp.listed(m)

    def _error(self, exc: protocol.ProtocolError) -> None:
        self.emit.error(exc)
        if self.observer is not None:
            self.observer.error_sent(self.session_id, exc.code)

    # --- playout by the transport (WebRTC) ---------------------------------------------

    async def _on_playback(self, played: PlaybackReport) -> None:
        """Tell the client what the server's playout did; when it dropped the rest of
        an item's audio, the item keeps only what was played (as OpenAI truncates an
        interrupted answer over WebRTC by itself)."""
        announced = PLAYBACK_EVENTS.get(played.kind)
        if announced is not None:
            self.emit.control(announced, response_id=played.response_id)
        # The server played it: its playback ended now, not at the estimate made when
        # the answer ended (held speech and idle_timeout_ms count from here).
        self.playback.reported(played, self.input.now_ms())
        if played.item_id is not None:
            await self.items.truncate_played(played.item_id, played.played_ms)

    def _on_preparation_finished(self, message: PreparationFinished) -> None:
        error = message.error
        if error is None or isinstance(error, asyncio.CancelledError | PrepareChainBroken):
            return  # a broken chain was reported at its first failure
        # A response waiting on this turn fails by itself (see `ResponseGate.wait`).
        self._error(
            protocol.ProtocolError(
                "input_failed",
                f"The model could not take input item {message.preparation.label}: {error}",
                type="server_error",
            )
        )

    # --- session configuration ----------------------------------------------------------

    def _on_session_update(self, event: protocol.SessionUpdate) -> None:
        """Validate, then apply: the new config, its input path and detector and the
        `session.updated` event are all built first; only when every step succeeded
        does anything change, so a refused update leaves the session as it was."""
        old = self.config
        new = apply_update(
            old,
            event.session,
            audio_started=self.playback.spoke,
            event_id=event.event_id,
            prompts=self.prompts,
        )
        # Refused before anything is sent to them (engine/mcp/egress.py).
        refused = tools_refusal(event.session.tools, self.mcp.client.policy, event.event_id)
        if refused is not None:
            raise refused
        change = self.input.prepare(old, new, event.event_id)
        vad_changed = new.turn_detection != old.turn_detection
        detector = self.user_turns.new_detector(new.turn_detection) if vad_changed else None
        try:
            updated = self.emit.build(SessionUpdatedEvent, session=to_wire(new))
        except Exception:  # building has no side effects: refuse, keep the session
            log.warning(
                "session %s: session.update not serializable", self.session_id, exc_info=True
            )
            raise protocol.ProtocolError(
                "invalid_value",
                "The session configuration cannot be represented; the session is unchanged.",
                "session",
                event.event_id,
            ) from None
        self.config = new
        self.input.apply(change)
        if vad_changed:
            self.user_turns.use(detector)
        self.emit.send(updated)
        if self.observer is not None and new.tracing != old.tracing:
            self.observer.tracing_set(self.session_id, trace_label(new.tracing))
        if new.mcp != old.mcp:
            self.mcp.sync(new.mcp)
        for unsupported in unhonoured(event.session, event.event_id):
            self._error(unsupported)

    # --- responses ------------------------------------------------------------------------

    def _on_response_ended(self, ended: ResponseEnded) -> None:
        """What an ended response changes here (the Responder calls this once per
        response, before its `response.done`)."""
        now_ms = self.input.now_ms()
        self.playback.answer_ended(ended.response_id, now_ms, ended.audio_ms, ended.spoke)
        self.user_turns.answer_ended(ended.response_id, ended.protects)
        self.history.enforce()

    # --- shutdown -------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """The connection is gone: stop the model and every task, bounded."""
        await self.responder.shutdown()
        await self.mcp.close()
        self.user_turns.stop()
        self.transcription.cancel_all()
        await self.prepares.cancel_all(self.limits.abort_timeout_s)
        self.outbox.close()
        if self.observer is not None:
            self.observer.session_closed(self.session_id)
