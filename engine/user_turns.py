"""The user's side of the conversation: input audio into turns, turns into items.

Owned by the Session and run on its task, like every owner it composes. `UserTurns`
takes the input audio (appends and a media track), runs it through turn detection
and acts on what the detector and its own owners decide:

- turn detection (engine/turn_detection.py): the VAD stream and detector, the
  end-of-turn model's scoring at pauses and speculation during a pause; when a pause
  looks final, the answer is begun early (`Responder.answer_early`);
- held speech (engine/held_speech.py): speech while the assistant is audible, which
  must qualify (engine/interruption.py) before it interrupts;
- postponed speech (engine/postponed_speech.py): speech over an answer that cannot
  be interrupted waits until the answer has been heard;
- partial transcripts (engine/partials.py) of the turn being spoken;
- the idle timeout, and commits: a turn's audio becomes a user item, handed to the
  model through the prepare chain (response-bound) and to input transcription.

It is the only writer of the turn being spoken (its item id and start in the input
buffer), of held and postponed speech and of the detector. A turn's end asks the
Responder for an answer and its start barges in; the gates stay the Responder's.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import numpy.typing as npt
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDone,
    InputAudioBufferClearedEvent,
    InputAudioBufferCommittedEvent,
    InputAudioBufferSpeechStartedEvent,
    InputAudioBufferSpeechStoppedEvent,
    InputAudioBufferTimeoutTriggered,
)

from engine import protocol
from engine.conversation import Conversation, Item
from engine.emitter import Emitter, Flush, Ids
from engine.end_of_turn import END_OF_TURN_WINDOW_S, EndOfTurnModel
from engine.held_speech import Drop, HearingDone, HeldSpeech, Interrupt, OffLoopHearing
from engine.history_bounds import HistoryBounds
from engine.ingest_pace import IngestPace
from engine.input_audio import InputAudio
from engine.input_buffer import InputBuffer
from engine.interruption import HearingRecognizer, InterruptionParams, holds
from engine.limits import EngineLimits
from engine.mailbox import Message
from engine.observer import Observer
from engine.pause_scoring import EndOfTurnScored
from engine.playback import Playback, TrackAudio
from engine.postponed_speech import PostponedSpeech, protects
from engine.prepare_chain import PrepareChain
from engine.responder import Responder
from engine.response import ResponseRequest
from engine.session_config import SessionConfig
from engine.transcription import InputTranscription
from engine.turn_detection import AnswerEarly, TurnDetection
from engine.turns import (
    PauseCandidate,
    ServerVadParams,
    SpeechStarted,
    SpeechStopped,
    TurnDetector,
    TurnEvent,
)
from engine.vad import VadBackend
from models.base import PCM_RATE, Executor, PromptItem


class UserTurns:
    def __init__(
        self,
        *,
        config: Callable[[], SessionConfig],
        input_audio: InputAudio,
        executor: Executor,
        vad_backend: VadBackend,
        end_of_turn: EndOfTurnModel | None,
        hearing: HearingRecognizer | None,
        conversation: Conversation,
        prepares: PrepareChain,
        responder: Responder,
        playback: Playback,
        transcription: InputTranscription,
        emit: Emitter,
        ids: Ids,
        limits: EngineLimits,
        session_id: str,
        post: Callable[[Message], None],
        history: HistoryBounds,
        observer: Observer | None,
    ) -> None:
        self._config = config  # the session's current configuration
        self._input = input_audio  # the session's: its buffer holds the turns
        self._executor = executor
        self._conversation = conversation
        self._prepares = prepares
        self._responder = responder
        self._playback = playback  # when the assistant is audible
        self._transcription = transcription
        self._emit = emit
        self._ids = ids
        self._limits = limits
        self._session_id = session_id
        self._history = history  # enforced after each commit
        self._observer = observer
        # Turn detection, with semantic_vad's end-of-turn model (shared by all
        # sessions; None: semantic_vad ends turns after a fixed silence).
        pace = (
            IngestPace(limits.ingest_speed, limits.ingest_burst_s) if limits.ingest_speed else None
        )
        paced = partial(observer.audio_paced, session_id) if observer else lambda seconds: None
        self.detection = TurnDetection(
            vad_backend, end_of_turn, executor, post, session_id, pace, paced
        )
        self.detection.use(self.detection.new_detector(config().turn_detection, 0))
        # Speech while the assistant is audible; its recognizer (shared by all
        # sessions) hears it; None: duration alone qualifies it.
        self.held = HeldSpeech(
            None if hearing is None else OffLoopHearing(hearing, post, session_id)
        )
        # Speech over an answer that cannot be interrupted waits for it to be heard.
        self.postponed = PostponedSpeech()
        self._speech: tuple[str, int] | None = None  # (item id, start position) of a turn

    @property
    def buffer(self) -> InputBuffer:
        return self._input.buffer

    def idle(self) -> bool:
        """No end-of-turn scoring in flight."""
        return self.detection.scoring.idle()

    # --- what the session asks ----------------------------------------------------------

    def new_detector(self, params: ServerVadParams | None) -> TurnDetector | None:
        """A detector for a `session.update`'s turn detection, used once `use`d."""
        return self.detection.new_detector(params, self._input.now_ms())

    def use(self, detector: TurnDetector | None) -> None:
        """Turn detection changed: the turn being spoken and all in flight go."""
        self.held.reset()
        self.postponed.reset()
        self.detection.use(detector)
        self._speech = None

    def answer_ended(self, response_id: str | None, protected: bool) -> None:
        self.postponed.answer_ended(response_id, protected)

    def output_cleared(self) -> None:
        self.postponed.answer = None  # the client stopped playing it

    def stop(self) -> None:
        """Stop what turn detection has in flight: the end-of-turn scoring, speculation
        and held speech with its hearing."""
        self.detection.stop_work()
        self.held.reset()
        self.postponed.reset()

    # --- input audio ------------------------------------------------------------------

    async def append(self, event: protocol.InputAudioBufferAppend) -> None:
        if self._no_room_for(self._config().input_format.ms_of(len(event.pcm))):
            # Refused before decoding, so the decoder's state holds nothing of it.
            raise protocol.ProtocolError(
                "input_audio_buffer_full",
                f"The input audio buffer holds at most {self._limits.max_buffer_ms} ms; "
                "commit or clear it first.",
                event_id=event.event_id,
            )
        await self._take_audio(self._input.decode(event), event.received_at)

    def _no_room_for(self, incoming_ms: float) -> bool:
        """Without turn detection the buffer only grows until the client commits or
        clears it: audio that would take it past `max_buffer_ms` is refused."""
        held_ms = self._input.held_ms()
        return (
            self.detection.detector is None and held_ms + incoming_ms > self._limits.max_buffer_ms
        )

    async def track_audio(self, audio: TrackAudio) -> None:
        # A track cannot be refused an append at a time: past the bound its audio is
        # dropped, and the client told once.
        dropped = self._no_room_for(len(audio.pcm) * 1000 / PCM_RATE)
        if self._input.track_dropped(dropped):
            raise protocol.ProtocolError(
                "input_audio_buffer_full",
                f"The input audio buffer holds at most {self._limits.max_buffer_ms}"
                " ms; commit or clear it. Track audio is dropped until then.",
            )
        if not dropped:
            await self._take_audio(audio.pcm, audio.received_at)

    async def _take_audio(self, pcm: npt.NDArray[np.int16], received_at: float | None) -> None:
        """Decoded input, 24 kHz: echo and noise, the buffer, VAD and turns."""
        pcm = self._input.take(pcm, received_at)
        detector = self.detection.detector  # only this task replaces it, and not while here
        offload = len(pcm) > self._limits.vad_offload_samples
        events = await self.detection.feed(pcm, offload=offload)
        if detector is None:
            return
        await self._release_postponed()
        for turn_event in events:
            await self._on_turn_event(turn_event, received_at)
        if self.detection.after_frames(self._turn_so_far, self._turn_ms()) is not None:
            self._answer_early()
        if self._config().input_transcription is not None and detector.pause_ms is None:
            self._transcription.partials.grew(self._turn_heard, self._turn_ms())
        if detector.in_speech:
            self.held.grew(self._input.now_ms() - (detector.pause_ms or 0))
        await self._advance_held()
        full = len(self.buffer) > self.buffer.ms_to_pos(self._limits.max_buffer_ms)
        if self.held.ended and full:
            await self._advance_held(final=True)  # no more waiting for the recognizer
        if self.postponed.ended and full:
            self._commit_postponed()  # no more room to wait in
        if self.held.ended or self.postponed.ended:
            pass  # its audio waits in the buffer for the verdict, or for the answer's end
        elif not detector.in_speech:
            self._check_idle_timeout()
            # Idle: keep only what a future turn's prefix padding can reach.
            params = self._config().turn_detection
            keep_ms = params.prefix_padding_ms if params else 0
            self.buffer.discard_before(self.buffer.end - self.buffer.ms_to_pos(keep_ms + 500))
        elif len(self.buffer) > self.buffer.ms_to_pos(self._limits.max_buffer_ms):
            # A turn longer than the buffer holds (noise the VAD calls speech): end it.
            stop = detector.force_stop(self._input.now_ms())
            if stop is not None:
                await self._on_turn_event(stop, received_at)

    # --- turn events ----------------------------------------------------------------

    async def _on_turn_event(self, event: TurnEvent, frame_received: float | None) -> None:
        """A turn detection event found while handling an append whose frame reached
        the server at `frame_received` (stamped only for an observer)."""
        params = self._config().turn_detection
        assert params is not None
        if isinstance(event, SpeechStarted):
            if self.held.held is not None:  # the last held speech ended, unheard: decide now
                await self._advance_held(final=True)
            self._playback.user_spoke()
            if self.postponed.resumed():
                return  # more of the turn said over an uninterruptible answer
            item_id = self._ids.new("item")
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
        params = self._config().turn_detection
        assert params is not None
        self._emit.flushing(
            InputAudioBufferSpeechStartedEvent,
            Flush.ALL if params.interrupt_response else Flush.CLIENT,
            audio_start_ms=audio_start_ms,
            item_id=item_id,
        )
        self._transcription.partials.announced(item_id)
        if self._observer is not None:
            self._observer.speech_started(self._session_id, item_id, audio_start_ms)
        await self._responder.barge_in(params.interrupt_response)

    async def _speech_stopped(self, event: SpeechStopped, frame_received: float | None) -> None:
        params = self._config().turn_detection
        assert params is not None
        item_id, start = self._speech or (self._ids.new("item"), self.buffer.start)
        self._speech = None
        self._emit.control(
            InputAudioBufferSpeechStoppedEvent, audio_end_ms=event.audio_end_ms, item_id=item_id
        )
        self._commit(item_id, start, self.buffer.ms_to_pos(event.audio_end_ms))
        if params.create_response:
            self._responder.request(ResponseRequest(from_client=False))
        if self._observer is not None:
            self._observer.speech_stopped(
                self._session_id, item_id, event.audio_end_ms, frame_received
            )

    # --- qualified interruption (engine/held_speech.py) ------------------------------

    def _assistant_audible(self) -> bool:
        """A response is streaming, or its audio may still be playing at the client."""
        return self._responder.active is not None or self._playback.audible(self._input.now_ms())

    def _interruption(self) -> InterruptionParams | None:
        """Qualified interruption's settings: the session's; with it off but the echo
        guard on, the defaults (held speech is where the guard finds the assistant's
        own voice); None: every speech start interrupts."""
        params = self._config().turn_detection
        if params is None:
            return None
        off = params.interruption is None or not params.interruption.enabled
        if off and self._input.guards_echo:
            return InterruptionParams()
        return params.interruption

    async def _advance_held(self, *, final: bool = False) -> None:
        """Take held speech's next step and act on it; `final`: decide now with what
        is known (new speech needs the floor)."""
        params = self._interruption()
        if params is None or self.held.held is None:
            return
        detection = self._config().turn_detection
        padding_ms = detection.prefix_padding_ms if detection else 0
        decision = self.held.step(params, self._input, padding_ms, final=final)
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
            self.detection.speculation.discard()
            if decision.end_ms is not None:
                # No turn: its audio goes, the answer plays on.
                self._speech = None
                self.buffer.discard_before(self.buffer.ms_to_pos(decision.end_ms))

    async def hearing_done(self, message: HearingDone) -> None:
        params = self._interruption()
        if params is not None and self.held.heard(message, params):
            await self._advance_held()

    # --- speech over an uninterruptible answer (engine/postponed_speech.py) --------------

    def _protected(self) -> bool:
        """Speech now would cut an answer that cannot be interrupted."""
        active = self._responder.active
        answer = self.postponed.answer
        audible = (
            answer is not None
            and self._playback.answer == answer
            and self._playback.audible(self._input.now_ms())
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
        params = self._config().turn_detection
        if params is not None and params.create_response:
            self._responder.request(ResponseRequest(from_client=False))

    # --- semantic_vad: the end-of-turn model ---------------------------------------------

    def _score_pause(self, pause_id: int) -> None:
        """Ask the end-of-turn model about the turn so far (answered by mailbox)."""
        if self._speech is None:
            return
        window = self.buffer.ms_to_pos(round(END_OF_TURN_WINDOW_S * 1000))
        start = max(self._speech[1], self.buffer.end - window)
        words = partial(self._executor.speculative_text, self._speech[0])
        self.detection.scoring.score(pause_id, self.buffer.copy(start, self.buffer.end), words)

    async def end_of_turn_scored(self, message: EndOfTurnScored) -> None:
        decided = self.detection.scored(message)
        if isinstance(decided, SpeechStopped):
            await self._on_turn_event(decided, None)
        elif isinstance(decided, AnswerEarly):
            self._answer_early()

    # --- speculative work during a pause (engine/speculation.py) -------------------------

    def _turn_so_far(self) -> PromptItem | None:
        if self._config().type == "transcription":
            return None  # (a transcription session has no answer to begin early)
        return self._turn_heard()

    def _turn_heard(self) -> PromptItem | None:
        """The turn in progress so far (its partial transcripts, in either type)."""
        if self._speech is None:
            return None
        item_id, start = self._speech
        audio = self.buffer.copy(start, self.buffer.end)
        return PromptItem(item_id, "user", audio=audio, hint=self._config().speech_hint)

    def _turn_ms(self) -> int:
        """The turn in progress so far, in ms of audio (0: none)."""
        if self._speech is None:
            return 0
        return self._input.now_ms() - self.buffer.pos_to_ms(self._speech[1])

    def _answer_early(self) -> None:
        """Begin the answer the commit would ask for, if it would ask for one at once
        (see models/speculative_responses.py)."""
        params = self._config().turn_detection
        if params is None or not params.create_response or self._responder.active is not None:
            return
        turn = self._turn_so_far()
        if turn is None or self.detection.speculation.item_id != turn.id:
            return  # the turn itself is not being speculated on
        self._responder.answer_early(turn)

    def _check_idle_timeout(self) -> None:
        """server_vad `idle_timeout_ms`: silence for that long after an answer has
        finished playing commits the (silent) input and asks for a response, so the
        assistant can prompt the user. Measured on the input audio clock, which
        keeps running while the client streams its microphone."""
        params = self._config().turn_detection
        if params is None or params.idle_timeout_ms is None or self._responder.active is not None:
            return
        now_ms = self._input.now_ms()
        since = self._playback.idle_since(now_ms, params.idle_timeout_ms)
        if since is None:
            return
        item_id = self._ids.new("item")
        start_ms = max(self.buffer.pos_to_ms(self.buffer.start), since)
        self._emit.control(
            InputAudioBufferTimeoutTriggered,
            audio_start_ms=start_ms,
            audio_end_ms=now_ms,
            item_id=item_id,
        )
        self._commit(item_id, self.buffer.ms_to_pos(start_ms), self.buffer.end)
        self._responder.request(ResponseRequest(from_client=False))

    # --- commits -----------------------------------------------------------------------

    def commit(self, event: protocol.InputAudioBufferCommit) -> None:
        have_ms = self._input.held_ms()
        if have_ms < self._limits.min_commit_ms:
            raise protocol.ProtocolError(
                "input_audio_buffer_commit_empty",
                f"Error committing input audio buffer: expected at least "
                f"{self._limits.min_commit_ms}ms of audio, but the buffer has {have_ms}ms.",
                event_id=event.event_id,
            )
        item_id = self._speech[0] if self._speech else self._ids.new("item")
        self._speech = None
        self._reset_turn_detection()
        # What the resampler (and the noise suppressor) still hold belongs to this turn too.
        self._input.flush()
        self._commit(item_id, self.buffer.start, self.buffer.end)

    def _commit(self, item_id: str, begin: int, end: int) -> None:
        """Move [begin, end) of the input buffer into a user item and hand it to the
        model. Audio after `end` stays in the buffer for the next turn."""
        config = self._config()
        audio = self.buffer.take(begin, end)
        item = Item(id=item_id, role="user", audio=audio, rate=PCM_RATE)
        previous = self._conversation.append(item)
        self._emit.control(
            InputAudioBufferCommittedEvent, item_id=item_id, previous_item_id=previous
        )
        if self._observer is not None:
            self._observer.committed(self._session_id, item_id)
        self._emit.control(ConversationItemAdded, item=item.wire(), previous_item_id=previous)
        self._emit.control(ConversationItemDone, item=item.wire(), previous_item_id=previous)
        turn = PromptItem(item_id, "user", audio=audio, rate=PCM_RATE, hint=config.speech_hint)
        self.detection.speculation.committed(item_id)
        # Closing a committed turn makes this preparation response-bound: no response
        # may start before the model has the turn (a transcription session has none).
        if config.type == "realtime":
            self._prepares.submit(
                lambda: self._executor.prepare(turn),
                epoch=self._responder.epoch,
                response_bound=True,
                label=item_id,
            )
        if config.input_transcription is not None:
            self._transcription.start(turn)
        self._history.enforce()

    def clear(self) -> None:
        self._input.clear()
        self._speech = None
        self._reset_turn_detection()
        self._emit.control(InputAudioBufferClearedEvent)

    def _reset_turn_detection(self) -> None:
        self.held.reset()
        self.postponed.reset()
        self.detection.reset(self._input.now_ms())
