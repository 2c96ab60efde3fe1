"""One realtime session: a single task that owns all of its state.

Client events and the results of the session's own background tasks arrive in one
mailbox and are handled one at a time by `run()`, so no state is ever written by
two tasks. The session owns the input audio, turns, configuration and conversation
items; slow work runs elsewhere and reports back:

- the prepare chain (engine/prepare_chain.py) hands committed turns to the model,
  in wire order;
- the Responder (engine/responder.py) owns the response lifecycle: epoch, active
  and deferred responses, cancel and finalize; each response task streams one
  response's chunks to the outbox and reports when the stream ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from openai.types.realtime import (
    ConversationCreatedEvent,
    ConversationItemAdded,
    ConversationItemDeletedEvent,
    ConversationItemDone,
    InputAudioBufferClearedEvent,
    InputAudioBufferCommittedEvent,
    InputAudioBufferSpeechStartedEvent,
    InputAudioBufferSpeechStoppedEvent,
    InputAudioBufferTimeoutTriggered,
    RealtimeErrorEvent,
    SessionCreatedEvent,
    SessionUpdatedEvent,
)

from engine import protocol
from engine.audio_format import InputDecoder
from engine.conversation import Conversation, Item
from engine.emitter import Emitter, Flush, Ids, Outbox, OutboxOverflow
from engine.end_of_turn import END_OF_TURN_WINDOW_S, EndOfTurnModel
from engine.history import audio_to_release, items_to_drop
from engine.input_buffer import InputBuffer
from engine.interruption import (
    HEAR_EVERY_MS,
    Heard,
    InterruptionParams,
    SnippetRecognizer,
    Verdict,
    Voices,
    counted,
    held_verdict,
    holds,
    voices_decide,
    voices_of,
    weigh,
)
from engine.item_events import ItemEvents
from engine.items import prompt_item
from engine.limits import EngineLimits
from engine.mcp_client import McpClient, StreamableHttpMcp
from engine.mcp_session import McpListed, McpTools
from engine.observer import Observer
from engine.playback import PLAYBACK_EVENTS, Playback, TrackAudio
from engine.prepare_chain import Preparation, PrepareChain, PrepareChainBroken
from engine.responder import Responder, ResponseEnded
from engine.response import (
    ResponseFinished,
    ResponseRequest,
    request_from_create,
    speculative_prompt,
)
from engine.semantic_turns import (
    SemanticTurnDetector,
    SemanticVadParams,
    looks_final,
    silence_needed_ms,
    turn_audio,
)
from engine.session_config import (
    SessionConfig,
    apply_update,
    to_wire,
    unhonoured,
)
from engine.speculation import SPECULATE_AFTER_MS, Speculation, Step, speculation_step
from engine.transcription import InputTranscription, TranscriptionFinished
from engine.turns import (
    PauseCandidate,
    ServerVadParams,
    SpeechStarted,
    SpeechStopped,
    TurnDetector,
    TurnEvent,
)
from engine.vad import VadBackend, VadStream
from models.base import PCM_RATE, Executor, PromptItem
from models.errors import ModelMissing
from models.speech.crowd import kurtosis
from models.speech.denoise import Denoiser
from models.speech.echo import MAX_LAG_S, EchoCanceller, FarEnd, own_voice_score
from models.speech.frame_stage import RATE
from models.speech.snippets import Hearing

# The own-voice score (models/speech/echo.py) above which held speech is the
# assistant's echo: the echo alone scores ~0.85-1.0, the user alone or talking over a
# -10 dB echo ~0.35 (tests/models/test_echo.py).
OWN_VOICE = 0.6
OWN_VOICE_WINDOW = RATE  # the latest second of held speech is scored
# How many voices held speech has is judged over its last seconds at most (the measure
# is cheap, but held speech can grow without bound on a noisy line).
CROWD_WINDOW = 10 * PCM_RATE
CROWD_LEAST = PCM_RATE // 10  # less held speech than this tells nothing

log = logging.getLogger(__name__)


# --- mailbox messages from the session's own tasks ----------------------------------


@dataclass(frozen=True)
class PreparationFinished:
    preparation: Preparation
    error: BaseException | None


@dataclass(frozen=True)
class SnippetHeard:
    """The snippet recognizer's hearing of held speech (None: it could not)."""

    request: int
    hearing: Hearing | None


@dataclass
class HeldSpeech:
    """Speech that started while the assistant was audible and has not qualified as
    an interruption yet (engine/interruption.py): nothing of it is on the wire."""

    item_id: str
    start: int  # buffer position of audio_start_ms
    audio_start_ms: int
    onset_ms: int
    last_speech_ms: int  # the latest audio the VAD called speech
    request: int = 0  # the snippet request under way (0: none)
    asked_ms: int = 0  # how much of its speech that request hears
    heard: Heard | None = None  # the latest hearing's answer
    heard_ms: int = 0  # of this much of its speech
    stop: SpeechStopped | None = None  # it ended; the verdict is still to come
    frame_received: float | None = None
    own_voice_ms: int | None = None  # the echo guard last heard the assistant's voice here
    echo_end: int | None = None  # the buffer position up to which it was the echo
    words: frozenset[str] = frozenset()  # the latest hearing's strong words
    agreed: bool = False  # they share a strong word with the hearing before
    unheard: bool = False  # the latest hearing failed


@dataclass(frozen=True)
class EndOfTurnScored:
    """The end-of-turn model's probability for a semantic_vad pause (None: the
    model could not score it)."""

    request: int  # which scoring request of the session this answers
    pause_id: int
    probability: float | None


@dataclass(frozen=True)
class Reject:
    """A client frame that did not parse, reported in wire order."""

    error: protocol.ProtocolError


@dataclass(frozen=True)
class _Close:
    pass


@dataclass(frozen=True)
class _Drain:
    """End the session once it has nothing left to answer."""


@dataclass(frozen=True)
class _End:
    """End the session now, every response closed with its `response.done`."""


Message = (
    protocol.ClientEvent
    | TrackAudio
    | Reject
    | PreparationFinished
    | ResponseFinished
    | TranscriptionFinished
    | EndOfTurnScored
    | SnippetHeard
    | Playback
    | McpListed
    | _Close
    | _Drain
    | _End
)
InternalMessage = (
    PreparationFinished
    | ResponseFinished
    | TranscriptionFinished
    | EndOfTurnScored
    | SnippetHeard
    | Playback
    | McpListed
)

# semantic_vad without an end-of-turn model is told once per process.
_warned_no_end_of_turn = False


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
        snippets: SnippetRecognizer | None = None,
        clock: Callable[[], float] = time.monotonic,
        mcp_client: McpClient | None = None,
    ) -> None:
        self.limits = limits or EngineLimits()
        # The echo guard's wall clock (when audio was sent, when input arrived);
        # injectable so tests are deterministic.
        self.clock = clock
        # semantic_vad's end-of-turn model (shared by all sessions); None: semantic_vad
        # ends turns after a fixed silence.
        self.end_of_turn = end_of_turn
        # Hears held speech (engine/interruption.py); None: duration alone qualifies it.
        self.snippets = snippets
        self._held: HeldSpeech | None = None
        self._snippet_requests = 0
        self._snippet_task: asyncio.Task[None] | None = None
        self._playback_end_ms: int | None = None  # the last answer's audio, at the client
        self._track_overflow_told = False  # a track's audio past the buffer's bound
        self._last_answer: str | None = None  # the response _playback_end_ms is for
        # The one end-of-turn scoring in flight: (request number, pause id, task). A
        # result is used only if it answers this request: a cancelled one may have
        # posted already, and pause ids restart with a new detector.
        self._scoring: tuple[int, int, asyncio.Task[None]] | None = None
        self.speculation = Speculation(executor)
        self._score_requests = 0
        self.executor = executor
        self.ids = Ids()
        self.session_id = self.ids.new("sess")
        # `preset`: a configuration fixed before the client connected (an ephemeral
        # key's session); validated when it was made, so it applies cleanly here.
        config = SessionConfig(model=model)
        # A WebRTC call may bring its own on top of its key's, applied in that order.
        for each in preset if isinstance(preset, tuple) else (preset,) if preset else ():
            config = apply_update(config, each, audio_started=False)
        self.config = config
        self.observer = observer  # None: nothing is reported, at no cost
        self.outbox = Outbox(
            self.limits.outbox_limit,
            self.limits.outbox_reserve,
            self.limits.outbox_limit_chars,
            self.limits.outbox_reserve_chars,
        )
        if observer is not None:
            session_id = self.session_id
            self.outbox.on_first_audio = lambda item: observer.first_audio_sent(session_id, item)
        self.emit = Emitter(self.outbox, self.ids)
        self.conversation = Conversation(self.ids.new("conv"))
        self.buffer = InputBuffer(PCM_RATE)
        self.decoder = InputDecoder(self.config.input_format)
        # audio.input.noise_reduction (an ephemeral key's preset may ask for it too)
        self.denoiser: Denoiser | None = (
            Denoiser(self.config.noise_reduction) if self.config.noise_reduction else None
        )
        # audio.input.echo_cancellation (an ephemeral key's preset may ask for it)
        self.echo = (
            EchoCanceller(FarEnd(clock), cancel=self.config.echo_cancel_input)
            if self.config.echo_cancellation
            else None
        )
        self._echo_base = 0  # the buffer position of the canceller's first input sample
        self.outbox.far_end = None if self.echo is None else self.echo.far
        self.vad = VadStream(vad_backend, input_rate=PCM_RATE)
        self.detector: TurnDetector | None = self._new_detector(self.config.turn_detection)
        self.prepares = PrepareChain(
            notify=lambda preparation, error: self._post(PreparationFinished(preparation, error))
        )
        # The session's MCP servers (engine/mcp_session.py), listed from `run` on.
        self.mcp = McpTools(
            mcp_client or StreamableHttpMcp(),
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
            ids=self.ids,
            limits=self.limits,
            session_id=self.session_id,
            post=self._post,
            on_ended=self._on_response_ended,
            observer=observer,
            mcp=self.mcp,
        )
        self.outbox.current_epoch = self.responder.lane_epoch
        # server_vad idle_timeout_ms: input-clock time after which silence triggers
        # a response (set when an answer ends, cleared by speech).
        self._idle_deadline_ms: int | None = None
        self._busy = False
        self._speech: tuple[str, int] | None = None  # (item id, start position) of a turn
        # The assistant was heard: the voice can no longer change.
        self._assistant_spoke = False
        self.items = ItemEvents(self.conversation, self.emit, self.ids, self.responder, self.outbox)
        self.transcription = InputTranscription(executor, self.emit, self.conversation, self._post)
        self._mailbox: asyncio.Queue[Message] = asyncio.Queue()
        self._slots = asyncio.Semaphore(self.limits.mailbox_slots)

    # --- the mailbox ----------------------------------------------------------------

    async def submit(self, event: protocol.ClientEvent | protocol.ProtocolError) -> None:
        """Queue a client event (or its parse error); waits while the mailbox is full,
        which stops the reader and so pushes back on the client without losing data."""
        await self._slots.acquire()
        self._mailbox.put_nowait(
            Reject(event) if isinstance(event, protocol.ProtocolError) else event
        )

    async def feed(self, pcm: npt.NDArray[np.int16], received_at: float | None = None) -> None:
        """Queue audio from a media track (24 kHz pcm16); waits as `submit` does."""
        await self._slots.acquire()
        self._mailbox.put_nowait(TrackAudio(pcm, received_at))

    def playback(self, played: Playback) -> None:
        """The transport's playout moved on (WebRTC: the server plays the audio)."""
        self._post(played)

    def _post(self, message: Message) -> None:
        self._mailbox.put_nowait(message)

    def close(self) -> None:
        """The connection is gone: end now, telling nobody."""
        self._post(_Close())

    def drain(self) -> None:
        """The server is shutting down: `run` returns as soon as the session is idle
        (at once if it is now), so answers in flight finish first."""
        self._post(_Drain())

    def end(self) -> None:
        """The server's drain deadline: every response is cancelled with its
        `response.done` (in the outbox, for the connection to send), then `run`
        returns."""
        self._post(_End())

    def idle(self) -> bool:
        """Nothing queued or running: no response active, deferred or out of band,
        no turn being prepared or transcribed (for tests and graceful shutdown)."""
        return (
            self._mailbox.empty()
            and not self._busy
            and not self.responder.responding
            and all(r.task.done() for r in self.prepares.tracked())
            and self.transcription.idle()
            and (self._scoring is None or self._scoring[2].done())
        )

    async def run(self) -> None:
        self.emit.control(SessionCreatedEvent, session=to_wire(self.config))
        self.emit.control(
            ConversationCreatedEvent,
            conversation={"id": self.conversation.id, "object": "realtime.conversation"},
        )
        if self.observer is not None:
            self.observer.session_opened(self.session_id)
        self.mcp.sync(self.config.mcp)  # an ephemeral key's preset may name servers
        try:
            draining = False
            while True:
                message = await self._mailbox.get()
                if isinstance(message, _Close):
                    break
                if isinstance(message, _End):
                    await self.responder.cancel_all()
                    break
                draining = draining or isinstance(message, _Drain)
                self._busy = True
                try:
                    if not isinstance(message, _Drain):
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
        is_client = not isinstance(message, InternalMessage)
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
            if is_client:
                self._slots.release()

    async def _handle(self, m: Message) -> None:
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
                self.responder.request(request_from_create(m, self.conversation, self.ids.new))
            case protocol.ResponseCancel():
                await self.responder.cancel(m)
            case protocol.ConversationItemTruncate():
                await self.items.truncate(m)
            case protocol.ConversationItemCreate():
                self.items.create(m)
                self._bound_history()
            case protocol.ConversationItemRetrieve():
                self.items.retrieve(m)
            case protocol.ConversationItemDelete():
                self.items.delete(m)
            case protocol.OutputAudioBufferClear():
                await self.responder.clear_output(m)
            case Reject():
                self._error(m.error)
            case PreparationFinished():
                self._on_preparation_finished(m)
            case ResponseFinished():
                self.responder.finished(m)
            case TranscriptionFinished():
                self.transcription.finished(m)
                self._bound_history()  # a transcript is text the bounds count
            case EndOfTurnScored():
                await self._on_end_of_turn_scored(m)
            case SnippetHeard():
                await self._on_snippet_heard(m)
            case Playback():
                await self._on_playback(m)
            case McpListed():
                self.mcp.listed(m)

    def _error(self, exc: protocol.ProtocolError) -> None:
        self.emit.control(
            RealtimeErrorEvent,
            error={
                "type": exc.type,
                "code": exc.code,
                "message": exc.message,
                "param": exc.param,
                "event_id": exc.event_id,
            },
        )
        if self.observer is not None:
            self.observer.error_sent(self.session_id, exc.code)

    # --- input audio ------------------------------------------------------------------

    def _new_detector(self, params: ServerVadParams | None) -> TurnDetector | None:
        if params is None:
            return None
        detector: TurnDetector
        if isinstance(params, SemanticVadParams):
            if self.end_of_turn is None:
                _warn_no_end_of_turn()
            detector = SemanticTurnDetector(params, scoring=self.end_of_turn is not None)
        else:
            detector = TurnDetector(params)
        detector.reset(self.buffer.pos_to_ms(self.buffer.end))
        return detector

    async def _on_append(self, event: protocol.InputAudioBufferAppend) -> None:
        if self._no_room_for(self.config.input_format.ms_of(len(event.pcm))):
            # Refused before decoding, so the decoder's state holds nothing of it.
            raise protocol.ProtocolError(
                "input_audio_buffer_full",
                f"The input audio buffer holds at most {self.limits.max_buffer_ms} ms; "
                "commit or clear it first.",
                event_id=event.event_id,
            )
        try:
            pcm = self.decoder.decode(event.pcm)
        except ValueError as exc:  # e.g. an odd byte count for 16-bit PCM
            raise protocol.ProtocolError(
                "invalid_value", f"Invalid value for 'audio': {exc}", "audio", event.event_id
            ) from None
        await self._take_audio(pcm, event.received_at)

    def _no_room_for(self, incoming_ms: float) -> bool:
        """Without turn detection the buffer only grows until the client commits or
        clears it: audio that would take it past `max_buffer_ms` is refused."""
        held_ms = self.buffer.pos_to_ms(len(self.buffer))
        return self.detector is None and held_ms + incoming_ms > self.limits.max_buffer_ms

    async def _on_track_audio(self, audio: TrackAudio) -> None:
        # A track cannot be refused an append at a time: past the bound its audio is
        # dropped, and the client told once.
        if self._no_room_for(len(audio.pcm) * 1000 / PCM_RATE):
            if not self._track_overflow_told:
                self._track_overflow_told = True
                self._error(
                    protocol.ProtocolError(
                        "input_audio_buffer_full",
                        f"The input audio buffer holds at most {self.limits.max_buffer_ms}"
                        " ms; commit or clear it. Track audio is dropped until then.",
                    )
                )
            return
        self._track_overflow_told = False
        await self._take_audio(audio.pcm, audio.received_at)

    async def _take_audio(self, pcm: npt.NDArray[np.int16], received_at: float | None) -> None:
        """Decoded input, 24 kHz: echo and noise, the buffer, VAD and turns."""
        if self.echo is not None:  # before the suppressor: it needs the echo linear
            pcm = self.echo.process(pcm, received_at)
        if self.denoiser is not None:
            pcm = self.denoiser.process(pcm)
        self.buffer.append(pcm)
        detector = self.detector  # only this task replaces it, and not while here
        if detector is None:
            self.vad.skip(len(pcm))  # the VAD clock stays on the input clock
            return
        frames = await self.vad.score(pcm, offload=len(pcm) > self.limits.vad_offload_samples)
        for turn_event in detector.feed(frames):
            await self._on_turn_event(turn_event, received_at)
        self._drop_stale_score()
        self._speculate()
        if self._held is not None:
            self._track_held(detector)
            await self._advance_held()
        full = len(self.buffer) > self.buffer.ms_to_pos(self.limits.max_buffer_ms)
        if self._held is not None and self._held.stop is not None and full:
            await self._advance_held(final=True)  # no more waiting for the recognizer
        if self._held is not None and self._held.stop is not None:
            pass  # its audio waits in the buffer for the verdict
        elif not detector.in_speech:
            self._check_idle_timeout()
            # Idle: keep only what a future turn's prefix padding can reach.
            keep_ms = (
                self.config.turn_detection.prefix_padding_ms if self.config.turn_detection else 0
            )
            self.buffer.discard_before(self.buffer.end - self.buffer.ms_to_pos(keep_ms + 500))
        elif len(self.buffer) > self.buffer.ms_to_pos(self.limits.max_buffer_ms):
            # A turn longer than the buffer holds (noise the VAD calls speech): end it.
            stop = detector.force_stop(self.buffer.pos_to_ms(self.buffer.end))
            if stop is not None:
                await self._on_turn_event(stop, received_at)

    async def _on_turn_event(self, event: TurnEvent, frame_received: float | None) -> None:
        """A turn detection event found while handling an append whose frame reached
        the server at `frame_received` (stamped only for an observer)."""
        params = self.config.turn_detection
        assert params is not None
        if isinstance(event, SpeechStarted):
            if self._held is not None:  # the last held speech ended, unheard: decide now
                await self._advance_held(final=True)
            self._idle_deadline_ms = None  # the user spoke: no idle timeout
            item_id = self.ids.new("item")
            start = self.buffer.ms_to_pos(event.audio_start_ms)
            self._speech = (item_id, start)
            self.buffer.discard_before(start)
            if holds(self._interruption(), self._assistant_audible()):
                self._held = HeldSpeech(
                    item_id, start, event.audio_start_ms, event.onset_ms, event.onset_ms
                )
                return
            await self._speech_started(item_id, event.audio_start_ms)
        elif isinstance(event, PauseCandidate):
            self._score_pause(event.pause_id)
        elif isinstance(event, SpeechStopped):
            held = self._held
            if held is not None and held.stop is None:
                held.stop, held.frame_received = event, frame_received
                if event.speech_end_ms is not None:
                    held.last_speech_ms = max(held.last_speech_ms, event.speech_end_ms)
                await self._advance_held()
                return
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

    async def _on_playback(self, played: Playback) -> None:
        """Tell the client what the server's playout did; when it dropped the rest of
        an item's audio, the item keeps only what was played (as OpenAI truncates an
        interrupted answer over WebRTC by itself)."""
        announced = PLAYBACK_EVENTS.get(played.kind)
        if announced is not None:
            self.emit.control(announced, response_id=played.response_id)
        if played.kind != "started" and played.response_id == self._last_answer:
            # The server played it: its playback ended now, not at the estimate made
            # when the answer ended (held speech and idle_timeout_ms count from here).
            now_ms = self.buffer.pos_to_ms(self.buffer.end)
            if self._playback_end_ms is not None:
                self._playback_end_ms = min(self._playback_end_ms, now_ms)
            if self._idle_deadline_ms is not None:
                self._idle_deadline_ms = min(self._idle_deadline_ms, now_ms)
        if played.item_id is None:
            return
        truncate = protocol.ConversationItemTruncate(
            type="conversation.item.truncate",
            item_id=played.item_id,
            content_index=0,
            audio_end_ms=played.played_ms,
        )
        try:
            await self.items.truncate(truncate)
        except protocol.ProtocolError as exc:  # the client deleted it meanwhile
            log.debug("session %s: no truncation after playout: %s", self.session_id, exc)

    # --- qualified interruption (engine/interruption.py) ------------------------------

    def _assistant_audible(self) -> bool:
        """A response is streaming, or its audio may still be playing at the client."""
        if self.responder.active is not None:
            return True
        now_ms = self.buffer.pos_to_ms(self.buffer.end)
        return self._playback_end_ms is not None and now_ms < self._playback_end_ms

    def _interruption(self) -> InterruptionParams | None:
        """Qualified interruption's settings: the session's; with it off but the echo
        guard on, the defaults (held speech is where the guard finds the assistant's
        own voice); None: every speech start interrupts."""
        params = self.config.turn_detection
        if params is None:
            return None
        off = params.interruption is None or not params.interruption.enabled
        if off and self.echo is not None:
            return InterruptionParams()
        return params.interruption

    async def _advance_held(self, *, final: bool = False) -> None:
        """Take the next step for held speech (engine/interruption.py's verdict);
        `final`: decide now with what is known (new speech needs the floor)."""
        held = self._held
        params = self._interruption()
        if held is None or params is None:
            return
        speech_ms = held.last_speech_ms - held.onset_ms
        heard = held.heard
        if heard is not None and voices_decide(heard, speech_ms, params) and not held.unheard:
            # Words count by what the held speech sounds like now: it may have grown
            # from sounding like several voices to one since it was heard.
            heard = counted(heard, held.agreed, self._voices(held, params))
        verdict = held_verdict(
            params,
            speech_ms,
            ended=held.stop is not None,
            heard=heard,
            heard_ms=held.heard_ms,
            pending=held.request != 0,
            can_classify=self.snippets is not None and not final,
        )
        # The echo guard: speech about to interrupt whose latest second is the
        # assistant's own voice stays held (or is dropped once it ends); it is checked
        # again every HEAR_EVERY_MS, so a user who starts talking over the echo still
        # interrupts.
        if verdict is Verdict.INTERRUPT and self._held_own_voice(held, speech_ms):
            verdict = Verdict.DROP if held.stop is not None else Verdict.WAIT
        if verdict is Verdict.CLASSIFY:
            self._ask_snippet(held, speech_ms)
        elif verdict is Verdict.INTERRUPT:
            self._held = None
            self._cancel_snippet()
            if held.echo_end is not None:
                self._start_after_echo(held)
            await self._speech_started(held.item_id, held.audio_start_ms)
            if held.stop is not None:
                await self._speech_stopped(held.stop, held.frame_received)
        elif verdict is Verdict.DROP or final:
            self._held = None
            self._cancel_snippet()
            self.speculation.discard()
            if held.stop is not None:
                # No turn: its audio goes, the answer plays on.
                self._speech = None
                self.buffer.discard_before(self.buffer.ms_to_pos(held.stop.audio_end_ms))

    def _held_own_voice(self, held: HeldSpeech, speech_ms: int) -> bool:
        if self.echo is None:
            return False
        recent = held.own_voice_ms is not None and speech_ms - held.own_voice_ms < HEAR_EVERY_MS
        if recent and held.stop is None:
            return True  # checked moments ago
        end = self._held_end(held)
        own = self.heard_own_voice(held.start, end)
        held.own_voice_ms = speech_ms if own else None
        if own:
            held.echo_end = end
        return own

    def _held_end(self, held: HeldSpeech) -> int:
        """The buffer position where held speech ends so far: its end once it ended."""
        return (
            self.buffer.end if held.stop is None else self.buffer.ms_to_pos(held.stop.audio_end_ms)
        )

    def _start_after_echo(self, held: HeldSpeech) -> None:
        """The user talked over held echo: their turn starts where the echo was last
        heard alone, less the prefix padding, not where the echo began."""
        assert held.echo_end is not None
        params = self.config.turn_detection
        padding = self.buffer.ms_to_pos(params.prefix_padding_ms if params else 0)
        start = max(held.start, held.echo_end - padding)
        held.start, held.audio_start_ms = start, self.buffer.pos_to_ms(start)
        self._speech = (held.item_id, start)
        self.buffer.discard_before(start)

    def heard_own_voice(self, start_sample: int, end_sample: int) -> bool:
        """Whether input buffer positions [start_sample, end_sample) are the assistant's
        own voice: the raw microphone of their latest second correlates with what was
        playing then, 0-500 ms earlier (models/speech/echo.py). False without the echo
        guard."""
        if self.echo is None or end_sample <= start_sample:
            return False
        end = end_sample - self._echo_base
        start = max(start_sample - self._echo_base, end - OWN_VOICE_WINDOW * PCM_RATE // RATE)
        near, wall = self.echo.raw_near(max(start, 0), max(end, 0))
        if not len(near) or not np.any(near):
            return False
        lag = round(MAX_LAG_S * RATE)
        far = self.echo.far.read(wall - lag, len(near) + lag)
        return own_voice_score(near, far, lag) >= OWN_VOICE

    def _ask_snippet(self, held: HeldSpeech, speech_ms: int) -> None:
        """Hear the held speech so far (`speech_ms` of it)."""
        recognizer = self.snippets
        assert recognizer is not None
        end = self._held_end(held)
        audio = self.buffer.copy(held.start, end)
        self._snippet_requests += 1
        request = held.request = self._snippet_requests
        held.asked_ms = speech_ms
        session_id = self.session_id

        async def hear() -> None:
            try:
                hearing = await recognizer.transcribe(audio)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("session %s: hearing held speech failed", session_id)
                hearing = None
            self._post(SnippetHeard(request, hearing))

        self._cancel_snippet()
        self._snippet_task = asyncio.create_task(hear())

    def _voices(self, held: HeldSpeech, params: InterruptionParams) -> Voices:
        """What held speech sounds like so far, one voice or several: from its onset to
        its latest speech (silence around it would raise the kurtosis: the prefix
        padding, the silence that ended it), over its last CROWD_WINDOW at most."""
        end = min(self._held_end(held), self.buffer.ms_to_pos(held.last_speech_ms))
        start = max(held.start, self.buffer.ms_to_pos(held.onset_ms), end - CROWD_WINDOW)
        if end - start < CROWD_LEAST:
            return Voices.ONE  # too little to tell: words count as they were heard
        return voices_of(kurtosis(self.buffer.copy(start, end)), params)

    async def _on_snippet_heard(self, message: SnippetHeard) -> None:
        held = self._held
        interruption = self._interruption()
        if held is None or held.request != message.request or interruption is None:
            return  # stale: decided meanwhile
        self._snippet_task = None
        held.request, held.heard_ms = 0, held.asked_ms
        hearing = message.hearing
        held.unheard = hearing is None
        if hearing is None:
            held.heard = Heard.WORDS  # cannot tell: do not swallow an interruption
        else:
            weighed = weigh(
                hearing.text,
                hearing.sure,
                held.words,
                held.asked_ms,
                interruption.backchannels,
            )
            held.heard, held.words, held.agreed = weighed.heard, weighed.words, weighed.agreed
        await self._advance_held()

    def _cancel_snippet(self) -> None:
        if self._snippet_task is not None:
            self._snippet_task.cancel()
            self._snippet_task = None

    def _track_held(self, detector: TurnDetector) -> None:
        """After a batch of frames: how long the held speech has lasted."""
        held = self._held
        if held is None or held.stop is not None or not detector.in_speech:
            return
        now_ms = self.buffer.pos_to_ms(self.buffer.end)
        held.last_speech_ms = max(held.last_speech_ms, now_ms - (detector.pause_ms or 0))

    # --- semantic_vad: the end-of-turn model ---------------------------------------------

    def _score_pause(self, pause_id: int) -> None:
        """Ask the end-of-turn model about the turn so far, off this task; the answer
        comes back through the mailbox as `EndOfTurnScored`."""
        model = self.end_of_turn
        if model is None or self._speech is None:
            return
        self._cancel_score()
        window = self.buffer.ms_to_pos(round(END_OF_TURN_WINDOW_S * 1000))
        audio = self.buffer.copy(max(self._speech[1], self.buffer.end - window), self.buffer.end)
        session_id = self.session_id
        self._score_requests += 1
        request = self._score_requests

        async def score() -> None:
            try:
                pcm = await asyncio.to_thread(turn_audio, audio, PCM_RATE)
                probability = await model.probability(pcm)
            except asyncio.CancelledError:
                raise
            except Exception:
                # The model's own failures are its to report; this one is a bug.
                log.exception("session %s: end-of-turn scoring failed", session_id)
                probability = None
            self._post(EndOfTurnScored(request, pause_id, probability))

        self._scoring = (request, pause_id, asyncio.create_task(score()))

    async def _on_end_of_turn_scored(self, message: EndOfTurnScored) -> None:
        if self._scoring is None or self._scoring[0] != message.request:
            return  # cancelled after it answered: stale
        self._scoring = None
        detector = self.detector
        if not isinstance(detector, SemanticTurnDetector):
            return  # turn detection changed since
        stop = detector.decide(message.pause_id, message.probability)  # stale: None
        if stop is not None:
            await self._on_turn_event(stop, None)
        elif looks_final(message.probability, detector.curve) and detector.in_speech:
            self._speculate_response()

    def _drop_stale_score(self) -> None:
        """Cancel scoring for a pause the detector no longer waits on (speech resumed,
        or the turn ended)."""
        if self._scoring is None:
            return
        detector = self.detector
        pending = detector.pending_pause if isinstance(detector, SemanticTurnDetector) else None
        if pending != self._scoring[1]:
            self._cancel_score()

    # --- speculative work during a pause (engine/speculation.py) -------------------------

    def _speculate(self) -> None:
        detector = self.detector
        pause_ms = detector.pause_ms if detector is not None else None
        after_ms = (
            detector.curve.candidate_pause_ms
            if isinstance(detector, SemanticTurnDetector)
            else SPECULATE_AFTER_MS
        )
        step = speculation_step(pause_ms, self.speculation.item_id is not None, after_ms)
        if step is Step.DISCARD:
            self.speculation.discard()
        elif step is Step.BEGIN and self._speech is not None:
            item_id, start = self._speech
            audio = self.buffer.copy(start, self.buffer.end)
            self.speculation.begin(PromptItem(item_id, "user", audio=audio, rate=PCM_RATE))

    def _speculate_response(self) -> None:
        """The pause looks final but must grow before the turn ends: begin the answer
        the commit would ask for, if it would ask for one at once (see
        models/speculative_responses.py)."""
        params = self.config.turn_detection
        if params is None or not params.create_response or self.responder.active is not None:
            return
        if self._speech is None or self.speculation.item_id != self._speech[0]:
            return  # the turn itself is not being speculated on
        item_id, start = self._speech
        turn = PromptItem(item_id, "user", audio=self.buffer.copy(start, self.buffer.end))
        prompt = speculative_prompt(
            self.ids.new("resp"),
            self.conversation.items,
            turn,
            self.config,
            self.session_id,
            self.mcp.offered_tools({t.name for t in self.config.tools}),
        )
        self.executor.speculate_response(prompt)

    def _cancel_score(self) -> None:
        if self._scoring is not None:
            self._scoring[2].cancel()
            self._scoring = None

    def _check_idle_timeout(self) -> None:
        """server_vad `idle_timeout_ms`: silence for that long after an answer has
        finished playing commits the (silent) input and asks for a response, so the
        assistant can prompt the user. Measured on the input audio clock, which
        keeps running while the client streams its microphone."""
        params = self.config.turn_detection
        deadline = self._idle_deadline_ms
        if params is None or params.idle_timeout_ms is None or deadline is None:
            return
        now_ms = self.buffer.pos_to_ms(self.buffer.end)
        if self.responder.active is not None or now_ms < deadline + params.idle_timeout_ms:
            return
        self._idle_deadline_ms = None
        item_id = self.ids.new("item")
        start_ms = max(self.buffer.pos_to_ms(self.buffer.start), deadline)
        self.emit.control(
            InputAudioBufferTimeoutTriggered,
            audio_start_ms=start_ms,
            audio_end_ms=now_ms,
            item_id=item_id,
        )
        self._commit(item_id, self.buffer.ms_to_pos(start_ms), self.buffer.end)
        self.responder.request(ResponseRequest(from_client=False))

    def _on_commit(self, event: protocol.InputAudioBufferCommit) -> None:
        have_ms = self.buffer.pos_to_ms(len(self.buffer))
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
        self.buffer.append(self._flush_input())
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
        turn = PromptItem(item_id, "user", audio=audio, rate=PCM_RATE)
        self.speculation.committed(item_id)
        # Closing a committed turn makes this preparation response-bound: no response
        # may start before the model has the turn.
        self.prepares.submit(
            lambda: self.executor.prepare(turn),
            epoch=self.responder.epoch,
            response_bound=True,
            label=item_id,
        )
        if self.config.input_transcription is not None:
            self.transcription.start(turn)
        self._bound_history()

    def _flush_input(self) -> npt.NDArray[np.int16]:
        tail = self.decoder.flush()
        if self.echo is not None:
            tail = np.concatenate([self.echo.process(tail), self.echo.flush()])
        if self.denoiser is None:
            return tail
        return np.concatenate([self.denoiser.process(tail), self.denoiser.flush()])

    def _on_clear(self) -> None:
        self.decoder.reset()
        if self.echo is not None:
            self.echo.reset()
        if self.denoiser is not None:
            self.denoiser.reset()
        self.buffer.clear()
        self._speech = None
        self._reset_turn_detection()
        self.emit.control(InputAudioBufferClearedEvent)

    def _reset_turn_detection(self) -> None:
        self._cancel_score()
        self.speculation.discard()
        self._held = None
        self._cancel_snippet()
        if self.detector is not None:
            self.vad.reset()
            self.detector.reset(self.buffer.pos_to_ms(self.buffer.end))

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
        """Validate, then apply: the new config, its decoder and detector and the
        `session.updated` event are all built first; only when every step succeeded
        does anything change, so a refused update leaves the session as it was."""
        old = self.config
        new = apply_update(
            old, event.session, audio_started=self._assistant_spoke, event_id=event.event_id
        )
        decoder = InputDecoder(new.input_format) if new.input_format != old.input_format else None
        denoiser_changed = new.noise_reduction != old.noise_reduction
        denoiser = (
            self._new_denoiser(new.noise_reduction, event.event_id) if denoiser_changed else None
        )
        echo_changed = (new.echo_cancellation, new.echo_cancel_input) != (
            old.echo_cancellation,
            old.echo_cancel_input,
        )
        echo = (
            self._new_echo(new.echo_cancel_input, event.event_id)
            if echo_changed and new.echo_cancellation
            else None
        )
        vad_changed = new.turn_detection != old.turn_detection
        detector = self._new_detector(new.turn_detection) if vad_changed else None
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
        if decoder is not None:
            self.decoder = decoder
        if denoiser_changed:
            self.denoiser = denoiser
        if echo_changed:
            self.echo, self._echo_base = echo, self.buffer.end
            self.outbox.far_end = None if echo is None else echo.far
        if vad_changed:
            self._cancel_score()
            self.speculation.discard()
            self._held = None
            self._cancel_snippet()
            self._speech = None
            self.vad.reset()
            self.detector = detector
        self.emit.send(updated)
        if new.mcp != old.mcp:
            self.mcp.sync(new.mcp)
        for unsupported in unhonoured(event.session, event.event_id):
            self._error(unsupported)

    @staticmethod
    def _new_denoiser(kind: str | None, event_id: str | None) -> Denoiser | None:
        if kind is None:
            return None
        try:
            return Denoiser(kind)  # type: ignore[arg-type]
        except ModelMissing as exc:
            raise protocol.ProtocolError(
                "unsupported_value",
                f"Noise reduction is not available here: {exc.problem}",
                "session.audio.input.noise_reduction",
                event_id,
            ) from None

    def _new_echo(self, cancel: bool, event_id: str | None) -> EchoCanceller:
        try:
            return EchoCanceller(FarEnd(self.clock), cancel=cancel)
        except ModelMissing as exc:
            raise protocol.ProtocolError(
                "unsupported_value",
                f"Echo cancellation is not available here: {exc.problem}",
                "session.audio.input.echo_cancellation",
                event_id,
            ) from None

    # --- responses ------------------------------------------------------------------------

    def _on_response_ended(self, ended: ResponseEnded) -> None:
        """What an ended response changes here (the Responder calls this once per
        response, before its `response.done`)."""
        if ended.audio_ms is not None:
            # idle_timeout_ms counts from the end of playback of this answer, and held
            # speech is held until then (counted from now: Parley does not know when
            # the client began playing it, so this is an upper bound).
            self._idle_deadline_ms = self.buffer.pos_to_ms(self.buffer.end) + ended.audio_ms
            self._playback_end_ms = self._idle_deadline_ms
            self._last_answer = ended.response_id
        self._assistant_spoke = self._assistant_spoke or ended.spoke
        self._bound_history()

    # --- history ----------------------------------------------------------------------

    def _bound_history(self) -> None:
        """Release the oldest audio past `max_history_audio_ms`, then drop the oldest
        items past `max_history_items` or `max_history_text_chars` (engine/history.py).
        A user turn with no transcript first gets the executor's, for history."""
        limits = self.limits
        in_use = self.responder.items_in_use()
        items = self.conversation.items
        for item in audio_to_release(items, limits.max_history_audio_ms, in_use):
            if item.role == "user" and item.kind == "message" and not item.transcript:
                self.transcription.start(prompt_item(item), for_client=False)
            item.release_audio()
        dropped = items_to_drop(
            items, limits.max_history_items, limits.max_history_text_chars, in_use
        )
        for item in dropped:
            self.conversation.remove(item.id)
            self.outbox.forget(item.id)
            self.emit.control(ConversationItemDeletedEvent, item_id=item.id)

    # --- shutdown -------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """The connection is gone: stop the model and every task, bounded."""
        await self.responder.shutdown()
        await self.mcp.close()
        self._cancel_score()
        self.speculation.discard()
        self._cancel_snippet()
        self.transcription.cancel_all()
        await self.prepares.cancel_all(self.limits.abort_timeout_s)
        self.outbox.close()
        if self.observer is not None:
            self.observer.session_closed(self.session_id)


def _warn_no_end_of_turn() -> None:
    global _warned_no_end_of_turn
    if not _warned_no_end_of_turn:
        _warned_no_end_of_turn = True
        log.warning(
            "semantic_vad without an end-of-turn model: turns end after %d ms of silence",
            silence_needed_ms("auto", None),
        )
