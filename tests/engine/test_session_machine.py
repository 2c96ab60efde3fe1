"""A state machine over the session engine: random interleavings of client events and
model progress, with the protocol's invariants checked after every step.

The client speaks (espeak-ng fixtures) and stays silent, commits and clears, creates
responses in and out of band, cancels, truncates, creates and deletes items,
reconfigures turn detection, stops and resumes reading; the model (a
`ControlledExecutor`) sends chunks, finishes or fails only when a rule says so. A
disconnect ends the session, checks that it left nothing running, and opens a new
one. Every step settles deterministically (tests/support/machine_client.py).
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from bench.speech import load_wav, silence
from engine.emitter import OutboxOverflow
from engine.history import text_chars
from engine.limits import EngineLimits
from tests.support.controlled_executor import Chunk, Fail, Finish
from tests.support.machine_client import MachineClient

APPEND = 2400  # 100 ms per append, as a client streams its microphone

LIMITS = EngineLimits(
    max_buffer_ms=3000,  # small, so both manual refusals and VAD's forced stop happen
    vad_offload_samples=10**9,  # VAD on the loop: a worker thread would not settle
    # No ingest pacing: it waits on the wall clock once a session has sent a minute of
    # audio, which thirty steps of speech can (and whether it waits depends on the host).
    ingest_speed=0.0,
    outbox_limit=24,  # small, so a client that stops reading fills it within a few steps
    outbox_reserve=12,
    # The history bounds and the out-of-band limit, small enough to be reached
    max_history_audio_ms=5000,
    max_history_items=12,
    max_history_text_chars=60,
    max_out_of_band_responses=2,
)


def _b64(pcm: npt.NDArray[np.int16]) -> str:
    return base64.b64encode(pcm.astype("<i2").tobytes()).decode("ascii")


def _appends(pcm: npt.NDArray[np.int16]) -> list[str]:
    return [_b64(pcm[i : i + APPEND]) for i in range(0, len(pcm), APPEND)]


# Precomputed once: each speech clip is lead silence then the utterance, with no
# trailing silence, so the turn ends only when a silence rule (or a commit) ends it.
SPEECH = {
    name: _appends(np.concatenate([silence(200), load_wav(name)])) for name in ("joke", "lights")
}
SILENCE = {ms: _appends(silence(ms)) for ms in (100, 300, 700, 1500)}


def _always_kept(client: MachineClient, references: dict[str, str]) -> set[str]:
    """Items the history bounds keep whatever they hold: the newest user audio (the
    next prompt's) and what responses in progress use (their output, their input).
    `references`: the item each response named as its input, by response id."""
    items = client.session.conversation.items
    newest_user = next(
        (i.id for i in reversed(items) if i.role == "user" and i.audio is not None), ""
    )
    in_use = {references[r] for r in client.ledger.open if r in references}
    unannounced = {i.id for i in items if i.status == "in_progress"}  # a response's message
    return {newest_user, *client.ledger.open_items, *in_use, *unannounced}


def _memory_bounds(client: MachineClient, references: dict[str, str]) -> list[str]:
    """Every bound a session keeps (engine/limits.py), as broken-bound messages
    (empty: all held). Add a bound here when the limits gain one."""
    session, limits, ledger = client.session, client.session.limits, client.ledger
    broken = []
    if len(session.outbox) > limits.outbox_limit + limits.outbox_reserve:
        broken.append(f"outbox holds {len(session.outbox)} events")
    if client.ended:
        return broken  # closed mid-event for not reading: what it held is dropped
    buffered_ms = session.buffer.pos_to_ms(len(session.buffer))
    if buffered_ms > limits.max_buffer_ms:
        broken.append(f"input buffer holds {buffered_ms} ms > {limits.max_buffer_ms}")
    if len(ledger.out_of_band_open) > limits.max_out_of_band_responses:
        broken.append(f"{len(ledger.out_of_band_open)} out-of-band responses run at once")
    kept = _always_kept(client, references)
    counted = [i for i in session.conversation.items if i.id not in kept]
    held_ms = sum(len(i.audio) * 1000 // i.rate for i in counted if i.audio is not None)
    if held_ms > limits.max_history_audio_ms:
        broken.append(f"conversation holds {held_ms} ms of audio > {limits.max_history_audio_ms}")
    if len(counted) > limits.max_history_items:
        broken.append(f"conversation holds {len(counted)} items > {limits.max_history_items}")
    chars = sum(text_chars(i) for i in counted)
    if chars > limits.max_history_text_chars:
        broken.append(f"conversation holds {chars} characters > {limits.max_history_text_chars}")
    return broken


def _features(events: list[dict[str, Any]]) -> set[str]:
    """The behaviours a session's events show, so the statistics tell what the
    examples reach (a rule nobody reaches tests nothing)."""
    seen = set()
    for e in events:
        kind = e["type"]
        if kind in ("input_audio_buffer.speech_stopped", "input_audio_buffer.cleared"):
            seen.add(kind)
        elif kind == "response.done":
            r = e["response"]
            band = "in band" if r.get("conversation_id") else "out of band"
            reason = (r.get("status_details") or {}).get("reason")
            seen.add(f"response {r['status']} {reason or ''} ({band})".replace("  ", " "))
        elif kind == "response.function_call_arguments.done":
            seen.add("function call")
        elif kind == "conversation.item.truncated":
            seen.add("item truncated")
        elif kind == "error":
            seen.add(f"error {e['error']['code']}")
    return seen


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.client = MachineClient(self.loop, LIMITS)
        self.sessions = 1
        self.steps = 0  # steps of the current session
        self._seen: set[str] = set()  # what the examples reached, for the statistics
        self.references: dict[str, str] = {}  # response id -> the item it took as input
        self.uninterruptible: set[str] = set()  # in-band responses speech must not cut

    def teardown(self) -> None:
        try:
            if not self.client.ledger.broken:  # else the failure is reported already
                self._end_session()
                self._seen |= _features(self.client.events)
                for feature in sorted(self._seen):  # --hypothesis-show-statistics
                    event(feature)
        finally:
            # After a failure tasks may be left: end them quietly before the loop goes.
            left = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in left:
                task.cancel()
            if left:
                self.loop.run_until_complete(asyncio.wait(left))
            self.loop.close()

    @initialize(
        vad=st.sampled_from([(True, True), (True, False), (True, False), (False, True), None]),
        qualified=st.booleans(),
    )
    def configure(self, vad: tuple[bool, bool] | None, qualified: bool) -> None:
        """The session starts in one of the turn detection modes, with or without
        qualified interruption."""
        if vad != (True, True) or qualified:  # else the default
            self.update_session(vad, None, False, qualified)

    # --- helpers -----------------------------------------------------------------------

    @property
    def ledger(self) -> Any:
        return self.client.ledger

    def send(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        return self.client.step(self.client.send(event))

    def send_all(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        async def all_of() -> None:
            for one in events:
                await self.client.send(one)

        return self.client.step(all_of())

    def append(self, chunks: list[str]) -> None:
        self.send_all([{"type": "input_audio_buffer.append", "audio": a} for a in chunks])

    def pick(self, ids: list[str], n: int) -> str | None:
        return ids[n % len(ids)] if ids else None

    def known_items(self) -> list[str]:
        seen = [e["item"]["id"] for e in self.client.events if e["type"].endswith("item.added")]
        return [*dict.fromkeys(seen), "item_unknown"]

    def _end_session(self) -> None:
        """Disconnect and check the session let go of everything."""
        client = self.client
        live = set(client.executor.live)
        was_reading = client.reading.is_set()
        client.disconnect()
        if client.run_task.exception() is not None:
            assert isinstance(client.run_task.exception(), OutboxOverflow)
            assert not was_reading, "a reading client was closed as not reading"
            self._seen.add("closed: the client stopped reading")
        assert not client.executor.live, f"generations outlive the session: {client.executor.live}"
        assert live <= set(client.executor.aborted), "a live generation was not aborted"
        leftover = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        assert not leftover, f"tasks outlive the session: {leftover}"

    # --- input audio -------------------------------------------------------------------

    @precondition(lambda self: not self.client.ended)
    @rule(clip=st.sampled_from(sorted(SPEECH)), then_silent_ms=st.sampled_from([0, 700, 1500]))
    def speak(self, clip: str, then_silent_ms: int) -> None:
        """An utterance; the silence after it (if any) ends the turn under server_vad."""
        self.append(SPEECH[clip] + SILENCE.get(then_silent_ms, []))

    @precondition(lambda self: not self.client.ended)
    @rule(clip=st.sampled_from(sorted(SPEECH)))
    def speak_a_turn(self, clip: str) -> None:
        """An utterance and the silence that ends it (the commonest client action, so
        it has a rule of its own besides `speak`)."""
        self.append(SPEECH[clip] + SILENCE[700])

    @precondition(lambda self: not self.client.ended)
    @rule(ms=st.sampled_from(sorted(SILENCE)))
    def stay_silent(self, ms: int) -> None:
        self.append(SILENCE[ms])

    @precondition(lambda self: not self.client.ended)
    @rule()
    def commit(self) -> None:
        self.send({"type": "input_audio_buffer.commit"})

    @precondition(lambda self: not self.client.ended)
    @rule()
    def clear(self) -> None:
        self.send({"type": "input_audio_buffer.clear"})

    # --- responses ---------------------------------------------------------------------

    @precondition(lambda self: not self.client.ended)
    @rule(
        out_of_band=st.booleans(),
        modality=st.sampled_from([None, "audio", "text"]),
        given_input=st.sampled_from([None, "empty", "text", "reference"]),
        n=st.integers(0, 50),
        interruptible=st.sampled_from([None, None, False]),
    )
    def create_response(
        self,
        out_of_band: bool,
        modality: str | None,
        given_input: str | None,
        n: int,
        interruptible: bool | None,
    ) -> None:
        response: dict[str, Any] = {}
        ref = None
        if interruptible is not None:
            response["interruptible"] = interruptible
        if out_of_band:
            response["conversation"] = "none"
        if modality is not None:
            response["output_modalities"] = [modality]
        if given_input == "empty":
            response["input"] = []
        elif given_input == "text":
            text = [{"type": "input_text", "text": "hello"}]
            response["input"] = [{"type": "message", "role": "user", "content": text}]
        elif given_input == "reference":
            ref = self.pick(self.known_items(), n)
            response["input"] = [{"type": "item_reference", "id": ref}]
        for sent in self.send({"type": "response.create", "response": response}):
            if sent["type"] == "response.created" and ref is not None:
                self.references[sent["response"]["id"]] = ref
            if sent["type"] == "response.created" and interruptible is False and not out_of_band:
                self.uninterruptible.add(sent["response"]["id"])

    @precondition(lambda self: not self.client.ended)
    @rule(which=st.sampled_from(["none", "open", "done", "unknown"]), n=st.integers(0, 50))
    def cancel_response(self, which: str, n: int) -> None:
        event: dict[str, Any] = {"type": "response.cancel"}
        if which == "open":
            event["response_id"] = self.pick(self.ledger.open, n)
        elif which == "done":
            event["response_id"] = self.pick(sorted(self.ledger.done), n)
        elif which == "unknown":
            event["response_id"] = "resp_unknown"
        self.send(event)

    @precondition(lambda self: not self.client.ended)
    @rule()
    def clear_output(self) -> None:
        self.send({"type": "output_audio_buffer.clear"})

    # --- conversation items ------------------------------------------------------------

    @precondition(lambda self: not self.client.ended)
    @rule(n=st.integers(0, 50), audio_end_ms=st.sampled_from([0, 50, 150, 10_000]))
    def truncate(self, n: int, audio_end_ms: int) -> None:
        self.send(
            {
                "type": "conversation.item.truncate",
                "item_id": self.pick(self.known_items(), n),
                "content_index": 0,
                "audio_end_ms": audio_end_ms,
            }
        )

    @precondition(lambda self: not self.client.ended)
    @rule(
        kind=st.sampled_from(
            ["user_text", "user_audio", "assistant_text", "assistant_audio", "call_output"]
        ),
        previous=st.sampled_from(["last", "root", "known", "unknown"]),
        n=st.integers(0, 50),
    )
    def create_item(self, kind: str, previous: str, n: int) -> None:
        item: dict[str, Any]
        if kind == "call_output":
            item = {"type": "function_call_output", "call_id": "call_1", "output": "{}"}
        else:
            role, part = {
                "user_text": ("user", {"type": "input_text", "text": "hi"}),
                "user_audio": ("user", {"type": "input_audio", "audio": SILENCE[100][0]}),
                "assistant_text": ("assistant", {"type": "output_text", "text": "ok"}),
                "assistant_audio": ("assistant", {"type": "output_audio", "transcript": "ok"}),
            }[kind]
            item = {"type": "message", "role": role, "content": [part]}
        event: dict[str, Any] = {"type": "conversation.item.create", "item": item}
        if previous == "root":
            event["previous_item_id"] = "root"
        elif previous == "known":
            event["previous_item_id"] = self.pick(self.known_items(), n)
        elif previous == "unknown":
            event["previous_item_id"] = "item_unknown"
        self.send(event)

    @precondition(lambda self: not self.client.ended)
    @rule(n=st.integers(0, 50))
    def delete_item(self, n: int) -> None:
        self.send({"type": "conversation.item.delete", "item_id": self.pick(self.known_items(), n)})

    # --- configuration -----------------------------------------------------------------

    @precondition(lambda self: not self.client.ended)
    @rule(
        vad=st.sampled_from([None, (True, True), (True, False), (False, True), (False, False)]),
        modality=st.sampled_from([None, "audio", "text"]),
        transcription=st.booleans(),
        qualified=st.booleans(),
    )
    def update_session(
        self,
        vad: tuple[bool, bool] | None,
        modality: str | None,
        transcription: bool,
        qualified: bool = False,
    ) -> None:
        detection: dict[str, Any] | None = None
        if vad is not None:
            create, interrupt = vad
            detection = {
                "type": "server_vad",
                "create_response": create,
                "interrupt_response": interrupt,
            }
            if qualified:  # speech while the assistant is audible is held until heard
                detection["interruption"] = {"min_speech_ms": 250, "max_backchannel_ms": 1500}
        audio_in: dict[str, Any] = {"turn_detection": detection}
        if transcription:
            audio_in["transcription"] = {"model": "whisper-1"}
        session: dict[str, Any] = {"type": "realtime", "audio": {"input": audio_in}}
        if modality is not None:
            session["output_modalities"] = [modality]
        self.send({"type": "session.update", "session": session})

    # --- held speech (engine/interruption.py) ------------------------------------------

    @precondition(lambda self: not self.client.ended and bool(self.client.hearing.pending()))
    @rule(text=st.sampled_from(["Mm-hm.", "okay", "Wait, stop.", "", None]), sure=st.booleans())
    def hear_held_speech(self, text: str | None, sure: bool) -> None:
        """The hearing recognizer answers: a backchannel, words it is sure of or not,
        nothing, or a failure."""

        async def answer() -> None:
            self.client.hearing.answer(text, sure=sure)

        self.client.step(answer())
        self._seen.add(f"held speech heard as {text!r}{'' if sure else ' (unsure)'}")

    # --- the model ---------------------------------------------------------------------

    @precondition(lambda self: not self.client.ended and bool(self.client.executor.live))
    @rule(
        n=st.integers(0, 50),
        kinds=st.lists(st.sampled_from(["audio", "audio", "text", "call"]), min_size=1, max_size=3),
    )
    def model_chunks(self, n: int, kinds: list[Any]) -> None:
        """A generation sends one to three chunks."""
        self._command(n, *(Chunk(kind) for kind in kinds))

    @precondition(lambda self: not self.client.ended and bool(self.client.executor.live))
    @rule(n=st.integers(0, 50), fail=st.sampled_from([False, False, True]))
    def model_ends(self, n: int, fail: bool) -> None:
        """A generation finishes, or fails."""
        self._command(n, Fail() if fail else Finish())

    def _command(self, n: int, *commands: Chunk | Finish | Fail) -> None:
        request_id = self.pick(list(self.client.executor.live), n)
        assert request_id is not None

        async def send() -> None:
            for command in commands:
                self.client.executor.send(request_id, command)

        self.client.step(send())

    @precondition(lambda self: not self.client.ended)
    @rule()
    def model_rejects_next_turn(self) -> None:
        self.client.executor.fail_next_prepare = True

    # --- the connection ----------------------------------------------------------------

    @precondition(lambda self: not self.client.ended and self.client.reading.is_set())
    @rule()
    def stop_reading(self) -> None:
        self.client.reading.clear()

    @precondition(lambda self: not self.client.ended)
    @rule()
    def burst_of_refused_events(self) -> None:
        """More refused events at once than the outbox and its reserve hold (each
        gets an error, a control event): a reading client gets every one, a client
        that stopped reading is closed (the invariants check both)."""
        n = LIMITS.outbox_limit + LIMITS.outbox_reserve + 1
        self.send_all([{"type": "conversation.item.retrieve", "item_id": "item_unknown"}] * n)

    @precondition(lambda self: not self.client.ended and not self.client.reading.is_set())
    @rule()
    def resume_reading(self) -> None:
        self.client.reading.set()
        self.client.step(MachineClient._nothing())

    @precondition(lambda self: self.steps >= 8 or self.client.ended)  # sessions get deep
    @rule()
    def disconnect(self) -> None:
        """The client leaves (or was closed for not reading): check, then a new one."""
        self._end_session()
        self._seen |= _features(self.client.events)
        self.client = MachineClient(self.loop, LIMITS)
        self.sessions += 1
        self.steps = 0

    # --- invariants --------------------------------------------------------------------

    @invariant()
    def bounds_held(self) -> None:
        self.steps += 1  # invariants run once after every step
        broken = _memory_bounds(self.client, self.references)
        assert not broken, broken

    @invariant()
    def session_alive_or_closed_for_not_reading(self) -> None:
        task = self.client.run_task
        if task.done():
            assert isinstance(task.exception(), OutboxOverflow), task
            assert not self.client.reading.is_set()

    @invariant()
    def responses_accounted_for(self) -> None:
        """At rest and read up: every open response is in the model's hands, every
        generation belongs to an open response, and VAD turns were answered."""
        if not self.client.reading.is_set() or self.client.ended:
            return  # unread events would make the client's view lag behind
        ledger = self.ledger
        assert set(ledger.open) == set(self.client.executor.live), (
            f"open responses {ledger.open} != generations {list(self.client.executor.live)}"
        )
        ledger.check_settled()
        if ledger.unanswered:
            self._seen.add("a VAD turn's answer deferred")

    @invariant()
    def uninterruptible_answers_are_not_talked_over(self) -> None:
        """No speech_started while one streams, and it never ends by a barge-in."""
        open_now = False
        for e in self.client.events:
            response = e.get("response", {})
            if e["type"] == "response.created" and response["id"] in self.uninterruptible:
                open_now = True
            elif e["type"] == "response.done" and response["id"] in self.uninterruptible:
                open_now = False
                reason = (response.get("status_details") or {}).get("reason")
                assert reason != "turn_detected", f"{response['id']} was cut by speech"
            elif e["type"] == "input_audio_buffer.speech_started":
                assert not open_now, "speech_started during an uninterruptible answer"
        if self.client.session.user_turns.postponed.turn is not None:
            self._seen.add("speech postponed")

    @invariant()
    def announced_items_exist(self) -> None:
        if not self.client.reading.is_set() or self.ledger.in_band_open:
            return  # a running response's calls join the conversation when it ends
        held = {item.id for item in self.client.session.conversation.items}
        missing = [i for i in self.ledger.items if i not in held]
        assert not missing, f"announced items missing from the conversation: {missing}"


SessionMachine.TestCase.settings = settings(
    max_examples=500,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI is reproducible
    database=None,  # and none replayed from a local run's failures
    suppress_health_check=[HealthCheck.too_slow],
)
TestSessionMachine = SessionMachine.TestCase
