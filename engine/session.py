"""One realtime session: a single task that owns all of its state.

Client events and the results of the session's own background tasks arrive in one
mailbox and are handled one at a time by `run()`, so no state is ever written by
two tasks. The session owns the configuration, the turn being spoken and the
conversation items, and composes owners that return decisions rather than call back:

- the input audio (engine/input_audio.py): decode, echo guard, noise, the buffer;
- turn detection: the VAD stream and detector (engine/turns.py,
  engine/semantic_turns.py), the end-of-turn model's scoring at pauses
  (engine/pause_scoring.py) and speculation during a pause (engine/speculation.py);
- held speech (engine/held_speech.py): speech while the assistant is audible, which
  must qualify before it interrupts; playback (engine/playback.py) says how
  long the assistant is audible;
- the prepare chain (engine/prepare_chain.py) hands committed turns to the model,
  in wire order, and the history bounds (engine/history_bounds.py) are kept after
  each commit;
- the Responder (engine/responder.py) owns the response lifecycle: epoch, active
  and deferred responses, cancel and finalize; each response task streams one
  response's chunks to the outbox and reports when the stream ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import numpy.typing as npt
from openai.types.realtime import (
    ConversationCreatedEvent,
    ConversationItemAdded,
    ConversationItemDone,
    InputAudioBufferClearedEvent,
    InputAudioBufferCommittedEvent,
    InputAudioBufferSpeechStartedEvent,
    InputAudioBufferSpeechStoppedEvent,
    InputAudioBufferTimeoutTriggered,
    SessionCreatedEvent,
    SessionUpdatedEvent,
)

from engine import protocol
from engine.conversation import Conversation, Item
from engine.emitter import Emitter, Flush, Ids, Outbox, OutboxOverflow
from engine.end_of_turn import END_OF_TURN_WINDOW_S, EndOfTurnModel
from engine.held_speech import Drop, HearingDone, HeldSpeech, Interrupt, OffLoopHearing
from engine.history_bounds import HistoryBounds
from engine.images import ImageRules
from engine.ingest_pace import IngestPace
from engine.input_audio import InputAudio
from engine.input_buffer import InputBuffer
from engine.interruption import HearingRecognizer, InterruptionParams, holds
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
from engine.postponed_speech import PostponedSpeech, protects
from engine.prepare_chain import PrepareChain, PrepareChainBroken
from engine.prompts import PromptLibrary
from engine.protocol.events import ValidatedEvent
from engine.responder import Responder, ResponseEnded
from engine.response import (
    ResponseFinished,
    ResponseRequest,
    request_from_create,
    speculative_prompt,
)
from engine.session_config import (
    apply_update,
    new_config,
    to_wire,
    unhonoured,
)
from engine.tracing import trace_label
from engine.transcription import InputTranscription, TranscriptionFinished
from engine.transcription_session import SessionType, opened_type
from engine.transcription_session import refusal as transcription_refusal
from engine.turn_detection import AnswerEarly, TurnDetection
from engine.turns import (
    PauseCandidate,
    SpeechStarted,
    SpeechStopped,
    TurnEvent,
)
from engine.vad import VadBackend
from models.base import PCM_RATE, Executor, PromptItem
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
        # Turn detection, with semantic_vad's end-of-turn model (shared by all
        # sessions; None: semantic_vad ends turns after a fixed silence).
        limits = self.limits
        pace = (
            IngestPace(limits.ingest_speed, limits.ingest_burst_s) if limits.ingest_speed else None
        )
        paced = partial(observer.audio_paced, session_id) if observer else lambda seconds: None
        self.turns = TurnDetection(
            vad_backend, end_of_turn, executor, self._post, session_id, pace, paced
        )
        self.turns.use(self.turns.new_detector(self.config.turn_detection, 0))
        # Speech while the assistant is audible; its recognizer (shared by all
        # sessions) hears it; None: duration alone qualifies it.
        self.held = HeldSpeech(
            None if hearing is None else OffLoopHearing(hearing, self._post, self.session_id)
        )
        # Speech over an answer that cannot be interrupted waits for it to be heard.
        self.postponed = PostponedSpeech()
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
        self._speech: tuple[str, int] | None = None  # (item id, start position) of a turn
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

    @property
    def buffer(self) -> InputBuffer:
        return self.input.buffer

    def _now_ms(self) -> int:
        return self.input.now_ms()

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
            and self.turns.scoring.idle()
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
                await self._on_append(m)
            case TrackAudio():
                await self._on_track_audio(m)
            case protocol.InputAudioBufferCommit():
                self._on_commit(m)
            case protocol.InputAudioBufferClear():
                self._on_clear()
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
                self.postponed.answer = None  # the client stopped playing it
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
                await self._on_end_of_turn_scored(m)
            case HearingDone():
                await self._on_hearing_done(m)
            case PlaybackReport():
                await self._on_playback(m)
            case McpListed():
                self.mcp.listed(m)

    def _error(self, exc: protocol.ProtocolError) -> None:
        self.emit.error(exc)
        if self.observer is not None:
            self.observer.error_sent(self.session_id, exc.code)

    # --- input audio ------------------------------------------------------------------

    async def _on_append(self, event: protocol.InputAudioBufferAppend) -> None:
        if self._no_room_for(self.config.input_format.ms_of(len(event.pcm))):
            # Refused before decoding, so the decoder's state holds nothing of it.
            raise protocol.ProtocolError(
                "input_audio_buffer_full",
                f"The input audio buffer holds at most {self.limits.max_buffer_ms} ms; "
                "commit or clear it first.",
                event_id=event.event_id,
            )
        await self._take_audio(self.input.decode(event), event.received_at)

    def _no_room_for(self, incoming_ms: float) -> bool:
        """Without turn detection the buffer only grows until the client commits or
        clears it: audio that would take it past `max_buffer_ms` is refused."""
        held_ms = self.input.held_ms()
        return self.turns.detector is None and held_ms + incoming_ms > self.limits.max_buffer_ms

    async def _on_track_audio(self, audio: TrackAudio) -> None:
        # A track cannot be refused an append at a time: past the bound its audio is
        # dropped, and the client told once.
        dropped = self._no_room_for(len(audio.pcm) * 1000 / PCM_RATE)
        if self.input.track_dropped(dropped):
            self._error(
                protocol.ProtocolError(
                    "input_audio_buffer_full",
                    f"The input audio buffer holds at most {self.limits.max_buffer_ms}"
                    " ms; commit or clear it. Track audio is dropped until then.",
                )
            )
        if not dropped:
            await self._take_audio(audio.pcm, audio.received_at)

    async def _take_audio(self, pcm: npt.NDArray[np.int16], received_at: float | None) -> None:
        """Decoded input, 24 kHz: echo and noise, the buffer, VAD and turns."""
        pcm = self.input.take(pcm, received_at)
        detector = self.turns.detector  # only this task replaces it, and not while here
        events = await self.turns.feed(pcm, offload=len(pcm) > self.limits.vad_offload_samples)
        if detector is None:
            return
        await self._release_postponed()
        for turn_event in events:
            await self._on_turn_event(turn_event, received_at)
        if self.turns.after_frames(self._turn_so_far, self._turn_ms()) is not None:
            self._answer_early()
        if self.config.input_transcription is not None and detector.pause_ms is None:
            self.transcription.partials.grew(self._turn_heard, self._turn_ms())
        if detector.in_speech:
            self.held.grew(self._now_ms() - (detector.pause_ms or 0))
        await self._advance_held()
        full = len(self.buffer) > self.buffer.ms_to_pos(self.limits.max_buffer_ms)
        if self.held.ended and full:
            await self._advance_held(final=True)  # no more waiting for the recognizer
        if self.postponed.ended and full:
            self._commit_postponed()  # no more room to wait in
        if self.held.ended or self.postponed.ended:
            pass  # its audio waits in the buffer for the verdict, or for the answer's end
        elif not detector.in_speech:
            self._check_idle_timeout()
            # Idle: keep only what a future turn's prefix padding can reach.
            keep_ms = (
                self.config.turn_detection.prefix_padding_ms if self.config.turn_detection else 0
            )
            self.buffer.discard_before(self.buffer.end - self.buffer.ms_to_pos(keep_ms + 500))
        elif len(self.buffer) > self.buffer.ms_to_pos(self.limits.max_buffer_ms):
            # A turn longer than the buffer holds (noise the VAD calls speech): end it.
            stop = detector.force_stop(self._now_ms())
            if stop is not None:
                await self._on_turn_event(stop, received_at)

    async def _on_turn_event(self, event: TurnEvent, frame_received: float | None) -> None:
        """A turn detection event found while handling an append whose frame reached
        the server at `frame_received` (stamped only for an observer)."""
        params = self.config.turn_detection
        assert params is not None
        if isinstance(event, SpeechStarted):
            if self.held.held is not None:  # the last held speech ended, unheard: decide now
                await self._advance_held(final=True)
            self.playback.user_spoke()
            if self.postponed.resumed():
                return  # more of the turn said over an uninterruptible answer
            item_id = self.ids.new("item")
            start = self.buffer.ms_to_pos(event.audio_start_ms)
            self._speech = (item_id, start)
            self.buffer.discard_before(start)
            if holds(self._interruption(), self._assistant_audible()):
                self.held.hold(item_id, start, event.audio_start_ms, event.onset_ms)
                return
            if self._protected():
                self.postponed.postpone(item_id, start, event.audio_start_ms)
                return
            await self._speech_started(item_id, event.audio_start_ms)
        elif isinstance(event, PauseCandidate):
            self._score_pause(event.pause_id)
        elif isinstance(event, SpeechStopped):
            if self.held.stopped(event, frame_received):
                await self._advance_held()
                return
            if self.postponed.stopped(event, frame_received):
                return
            if self._speech is not None and not self._assistant_audible():
                end = self.buffer.ms_to_pos(event.speech_end_ms or event.audio_end_ms)
                self.held.learn(self.buffer.copy(self._speech[1], end))  # the user's voice
            await self._speech_stopped(event, frame_received)

    async def _speech_started(self, item_id: str, audio_start_ms: int) -> None:
        params = self.config.turn_detection
        assert params is not None
        self.emit.flushing(
            InputAudioBufferSpeechStartedEvent,
            Flush.ALL if params.interrupt_response else Flush.CLIENT,
            audio_start_ms=audio_start_ms,
            item_id=item_id,
        )
        self.transcription.partials.announced(item_id)
        if self.observer is not None:
            self.observer.speech_started(self.session_id, item_id, audio_start_ms)
        await self.responder.barge_in(params.interrupt_response)

    async def _speech_stopped(self, event: SpeechStopped, frame_received: float | None) -> None:
        params = self.config.turn_detection
        assert params is not None
        item_id, start = self._speech or (self.ids.new("item"), self.buffer.start)
        self._speech = None
        self.emit.control(
            InputAudioBufferSpeechStoppedEvent, audio_end_ms=event.audio_end_ms, item_id=item_id
        )
        self._commit(item_id, start, self.buffer.ms_to_pos(event.audio_end_ms))
        if params.create_response:
            self.responder.request(ResponseRequest(from_client=False))
        if self.observer is not None:
            self.observer.speech_stopped(
                self.session_id, item_id, event.audio_end_ms, frame_received
            )

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
        self.playback.reported(played, self._now_ms())
        if played.item_id is not None:
            await self.items.truncate_played(played.item_id, played.played_ms)

    # --- qualified interruption (engine/held_speech.py) ------------------------------

    def _assistant_audible(self) -> bool:
        """A response is streaming, or its audio may still be playing at the client."""
        return self.responder.active is not None or self.playback.audible(self._now_ms())

    def _interruption(self) -> InterruptionParams | None:
        """Qualified interruption's settings: the session's; with it off but the echo
        guard on, the defaults (held speech is where the guard finds the assistant's
        own voice); None: every speech start interrupts."""
        params = self.config.turn_detection
        if params is None:
            return None
        off = params.interruption is None or not params.interruption.enabled
        if off and self.input.guards_echo:
            return InterruptionParams()
        return params.interruption

    async def _advance_held(self, *, final: bool = False) -> None:
        """Take held speech's next step and act on it; `final`: decide now with what
        is known (new speech needs the floor)."""
        params = self._interruption()
        if params is None or self.held.held is None:
            return
        detection = self.config.turn_detection
        padding_ms = detection.prefix_padding_ms if detection else 0
        decision = self.held.step(params, self.input, padding_ms, final=final)
        if isinstance(decision, Interrupt):
            if decision.moved:
                self._speech = (decision.item_id, decision.start)
                self.buffer.discard_before(decision.start)
            if self._protected():
                self.postponed.postpone(
                    decision.item_id,
                    decision.start,
                    decision.audio_start_ms,
                    decision.stop,
                    decision.frame_received,
                )
                return
            await self._speech_started(decision.item_id, decision.audio_start_ms)
            if decision.stop is not None:
                await self._speech_stopped(decision.stop, decision.frame_received)
        elif isinstance(decision, Drop):
            self.turns.speculation.discard()
            if decision.end_ms is not None:
                # No turn: its audio goes, the answer plays on.
                self._speech = None
                self.buffer.discard_before(self.buffer.ms_to_pos(decision.end_ms))

    # --- speech over an uninterruptible answer (engine/postponed_speech.py) --------------

    def _protected(self) -> bool:
        """Speech now would cut an answer that cannot be interrupted."""
        active = self.responder.active
        answer = self.postponed.answer
        audible = (
            answer is not None
            and self.playback.answer == answer
            and self.playback.audible(self._now_ms())
        )
        return protects(None if active is None else active.request.interruptible, audible)

    async def _release_postponed(self) -> None:
        """The answer was heard: the turn said over it goes out as any turn does, and
        is answered."""
        if self.postponed.turn is None or self._protected():
            return
        turn = self.postponed.take()
        assert turn is not None
        await self._speech_started(turn.item_id, turn.audio_start_ms)
        if turn.stop is not None:
            await self._speech_stopped(turn.stop, turn.frame_received)

    def _commit_postponed(self) -> None:
        """The input buffer is full while an ended turn waits: it is committed now
        without its speech events (a speech_started would stop the answer's playback)
        and answered after the answer, as `idle_timeout_ms` commits a turn."""
        turn = self.postponed.take()
        assert turn is not None and turn.stop is not None
        self._speech = None
        self._commit(turn.item_id, turn.start, self.buffer.ms_to_pos(turn.stop.audio_end_ms))
        params = self.config.turn_detection
        if params is not None and params.create_response:
            self.responder.request(ResponseRequest(from_client=False))

    async def _on_hearing_done(self, message: HearingDone) -> None:
        params = self._interruption()
        if params is not None and self.held.heard(message, params):
            await self._advance_held()

    # --- semantic_vad: the end-of-turn model ---------------------------------------------

    def _score_pause(self, pause_id: int) -> None:
        """Ask the end-of-turn model about the turn so far (answered by mailbox)."""
        if self._speech is None:
            return
        window = self.buffer.ms_to_pos(round(END_OF_TURN_WINDOW_S * 1000))
        start = max(self._speech[1], self.buffer.end - window)
        words = partial(self.executor.speculative_text, self._speech[0])
        self.turns.scoring.score(pause_id, self.buffer.copy(start, self.buffer.end), words)

    async def _on_end_of_turn_scored(self, message: EndOfTurnScored) -> None:
        decided = self.turns.scored(message)
        if isinstance(decided, SpeechStopped):
            await self._on_turn_event(decided, None)
        elif isinstance(decided, AnswerEarly):
            self._answer_early()

    # --- speculative work during a pause (engine/speculation.py) -------------------------

    def _turn_so_far(self) -> PromptItem | None:
        if self.config.type == "transcription":
            return None  # (a transcription session has no answer to begin early)
        return self._turn_heard()

    def _turn_heard(self) -> PromptItem | None:
        """The turn in progress so far (its partial transcripts, in either type)."""
        if self._speech is None:
            return None
        item_id, start = self._speech
        audio = self.buffer.copy(start, self.buffer.end)
        return PromptItem(item_id, "user", audio=audio, hint=self.config.speech_hint)

    def _turn_ms(self) -> int:
        """The turn in progress so far, in ms of audio (0: none)."""
        if self._speech is None:
            return 0
        return self._now_ms() - self.buffer.pos_to_ms(self._speech[1])

    def _answer_early(self) -> None:
        """Begin the answer the commit would ask for, if it would ask for one at once
        (see models/speculative_responses.py)."""
        params = self.config.turn_detection
        if params is None or not params.create_response or self.responder.active is not None:
            return
        turn = self._turn_so_far()
        if turn is None or self.turns.speculation.item_id != turn.id:
            return  # the turn itself is not being speculated on
        prompt = speculative_prompt(
            self.ids.new("resp"),
            self.conversation.items,
            turn,
            self.config,
            self.session_id,
            self.mcp.offered_tools({t.name for t in self.config.tools}),
        )
        fitted = self.responder.fit(prompt)  # cut as the response's will be
        if fitted is not None:
            self.executor.answer_early(fitted)

    def _check_idle_timeout(self) -> None:
        """server_vad `idle_timeout_ms`: silence for that long after an answer has
        finished playing commits the (silent) input and asks for a response, so the
        assistant can prompt the user. Measured on the input audio clock, which
        keeps running while the client streams its microphone."""
        params = self.config.turn_detection
        if params is None or params.idle_timeout_ms is None or self.responder.active is not None:
            return
        now_ms = self._now_ms()
        since = self.playback.idle_since(now_ms, params.idle_timeout_ms)
        if since is None:
            return
        item_id = self.ids.new("item")
        start_ms = max(self.buffer.pos_to_ms(self.buffer.start), since)
        self.emit.control(
            InputAudioBufferTimeoutTriggered,
            audio_start_ms=start_ms,
            audio_end_ms=now_ms,
            item_id=item_id,
        )
        self._commit(item_id, self.buffer.ms_to_pos(start_ms), self.buffer.end)
        self.responder.request(ResponseRequest(from_client=False))

    def _on_commit(self, event: protocol.InputAudioBufferCommit) -> None:
        have_ms = self.input.held_ms()
        if have_ms < self.limits.min_commit_ms:
            raise protocol.ProtocolError(
                "input_audio_buffer_commit_empty",
                f"Error committing input audio buffer: expected at least "
                f"{self.limits.min_commit_ms}ms of audio, but the buffer has {have_ms}ms.",
                event_id=event.event_id,
            )
        item_id = self._speech[0] if self._speech else self.ids.new("item")
        self._speech = None
        self._reset_turn_detection()
        # What the resampler (and the noise suppressor) still hold belongs to this turn too.
        self.input.flush()
        self._commit(item_id, self.buffer.start, self.buffer.end)

    def _commit(self, item_id: str, begin: int, end: int) -> None:
        """Move [begin, end) of the input buffer into a user item and hand it to the
        model. Audio after `end` stays in the buffer for the next turn."""
        audio = self.buffer.take(begin, end)
        item = Item(id=item_id, role="user", audio=audio, rate=PCM_RATE)
        previous = self.conversation.append(item)
        self.emit.control(
            InputAudioBufferCommittedEvent, item_id=item_id, previous_item_id=previous
        )
        if self.observer is not None:
            self.observer.committed(self.session_id, item_id)
        self.emit.control(ConversationItemAdded, item=item.wire(), previous_item_id=previous)
        self.emit.control(ConversationItemDone, item=item.wire(), previous_item_id=previous)
        turn = PromptItem(item_id, "user", audio=audio, rate=PCM_RATE, hint=self.config.speech_hint)
        self.turns.speculation.committed(item_id)
        # Closing a committed turn makes this preparation response-bound: no response
        # may start before the model has the turn (a transcription session has none).
        if self.config.type == "realtime":
            self.prepares.submit(
                lambda: self.executor.prepare(turn),
                epoch=self.responder.epoch,
                response_bound=True,
                label=item_id,
            )
        if self.config.input_transcription is not None:
            self.transcription.start(turn)
        self.history.enforce()

    def _on_clear(self) -> None:
        self.input.clear()
        self._speech = None
        self._reset_turn_detection()
        self.emit.control(InputAudioBufferClearedEvent)

    def _stop_turn_work(self) -> None:
        """Stop what turn detection has in flight: the end-of-turn scoring, speculation
        and held speech with its hearing."""
        self.turns.stop_work()
        self.held.reset()
        self.postponed.reset()

    def _reset_turn_detection(self) -> None:
        self.held.reset()
        self.postponed.reset()
        self.turns.reset(self._now_ms())

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
        detector = (
            self.turns.new_detector(new.turn_detection, self._now_ms()) if vad_changed else None
        )
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
            self.held.reset()
            self.postponed.reset()
            self.turns.use(detector)
            self._speech = None
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
        self.playback.answer_ended(ended.response_id, self._now_ms(), ended.audio_ms, ended.spoke)
        self.postponed.answer_ended(ended.response_id, ended.protects)
        self.history.enforce()

    # --- shutdown -------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """The connection is gone: stop the model and every task, bounded."""
        await self.responder.shutdown()
        await self.mcp.close()
        self._stop_turn_work()
        self.transcription.cancel_all()
        await self.prepares.cancel_all(self.limits.abort_timeout_s)
        self.outbox.close()
        if self.observer is not None:
            self.observer.session_closed(self.session_id)
