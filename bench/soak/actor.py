"""One simulated user: connects, does random things a realtime client does, drops or
closes its connection now and then and comes back, until the soak ends.

Each action waits for its answer while the microphone keeps streaming (silence at
real time, as a client does), and records latencies into the shared Tally; an
answer that never comes is counted as a timeout of that action and the user
reconnects."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from websockets.exceptions import InvalidStatus

from bench.soak.audio import CHUNK_MS, Audio, Utterance
from bench.soak.tally import Tally
from bench.soak.wire import Conn, ResponseSeen

ANSWER_TIMEOUT_S = 15.0  # for a response to a turn, end to end
ACK_TIMEOUT_S = 5.0  # for an acknowledgement (session.updated, error, ...)
LIFE_ACTIONS = (5, 40)  # actions on one connection before a polite close
RESUMABLE_EVERY = 2  # every second user asks for resumable sessions
RESUME_SHARE = 0.75  # of their drops, those taken back (the rest wait out the window)
RESUME_AFTER_S = (0.1, 3.0)  # how long the network is gone before a resume
MAX_SLIP_S = 0.2  # a sender this far behind its schedule restarts it (no burst)

# Relative weights of the actions.
WEIGHTS: dict[str, int] = {
    "speech": 30,
    "barge_in": 10,
    "manual": 8,
    "clear": 5,
    "out_of_band": 8,
    "items": 10,
    "update": 8,
    "bad": 7,
    "drop": 4,
}

# Client input the server must refuse with an error event and live on.
BAD_INPUT: list[str | dict[str, Any]] = [
    "{not json",
    {"type": "no.such.event"},
    {"type": "input_audio_buffer.append", "audio": "!!! not base64 !!!"},
    {"type": "conversation.item.delete", "item_id": "item_missing"},
    {
        "type": "conversation.item.truncate",
        "item_id": "item_missing",
        "content_index": 0,
        "audio_end_ms": 10,
    },
    {"type": "conversation.item.retrieve", "item_id": "item_missing"},
    {"type": "response.cancel"},
    {"type": "session.update", "session": {"type": "realtime", "instructions": 5}},
    {"type": "response.create", "response": {"conversation": "elsewhere"}},
]

SERVER_VAD: dict[str, Any] = {
    "type": "server_vad",
    "create_response": True,
    "interrupt_response": True,
}


@dataclass(frozen=True)
class Comeback:
    """A dropped resumable session to take back: its token, the last event read, and
    the responses seen on it."""

    token: str
    last_event_id: str | None
    responses: dict[str, ResponseSeen]


class Dropped(Exception):
    """The connection is gone (ours or the server's doing): reconnect."""


def session_update(turn_detection: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    session = {"type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}}
    return {"type": "session.update", "session": {**session, **extra}}


class Actor:
    def __init__(
        self,
        index: int,
        url: str,
        audio: Audio,
        tally: Tally,
        seed: int,
        deadline: float,
        api_key: str | None = None,
    ) -> None:
        self.index, self.url, self.audio, self.tally = index, url, audio, tally
        self.rng = random.Random(seed * 100_003 + index)
        self.deadline, self.api_key = deadline, api_key
        self.chunk_s = CHUNK_MS / 1000
        self.next_send = 0.0
        self.serial = 0
        self.conn: Conn | None = None
        # Parley's resume extension: this user's sessions are resumable, and the
        # token and last event to take the dropped one back with
        self.resumable = index % RESUMABLE_EVERY == 0
        self.comeback: Comeback | None = None
        self.actions: dict[str, Callable[[Conn], Awaitable[None]]] = {
            "speech": self.speech,
            "barge_in": self.barge_in,
            "manual": self.manual,
            "clear": self.clear,
            "out_of_band": self.out_of_band,
            "items": self.items,
            "update": self.update,
            "bad": self.bad,
            "drop": self.drop,
        }

    def left(self) -> float:
        return self.deadline - time.monotonic()

    async def connect(self) -> Conn:
        """A new session, or the dropped one taken back (a refusal counted, then a
        new one)."""
        if (back := self.comeback) is not None:
            self.comeback = None
            query = f"resume_token={back.token}" + (
                f"&last_event_id={back.last_event_id}" if back.last_event_id else ""
            )
            try:
                conn = await Conn.open(with_query(self.url, query), self.tally, self.api_key)
            except InvalidStatus as refused:
                body = refused.response.body or b"{}"
                self.tally.resumes[str(json.loads(body).get("error", {}).get("code"))] += 1
            else:
                self.tally.resumes["resumed"] += 1
                # The same session: a response created before the drop may still run.
                conn.responses = back.responses
                return conn
        url = with_query(self.url, "resume=true") if self.resumable else self.url
        return await Conn.open(url, self.tally, self.api_key)

    async def run(self) -> None:
        # Users arrive spread over the first seconds, not all in one instant.
        await asyncio.sleep(self.rng.uniform(0, 2.0))
        names, weights = list(WEIGHTS), list(WEIGHTS.values())
        while self.left() > 0:
            try:
                conn = await self.connect()
            except Exception as exc:
                self.tally.connect_failures += 1
                self.tally.connect_failure_example = self.tally.connect_failure_example or repr(exc)
                await asyncio.sleep(1.0)
                continue
            self.conn = conn
            try:
                for _ in range(self.rng.randint(*LIFE_ACTIONS)):
                    if self.left() <= 0:
                        break
                    name = self.rng.choices(names, weights)[0]
                    self.tally.actions[name] += 1
                    await self.actions[name](conn)
                    await self.settle(conn, name)
                    await self.think(conn)
                await conn.close()
            except Dropped:
                if not conn.ended:  # the server closed it, not us
                    await conn.lost()
            finally:
                self.conn = None
            await asyncio.sleep(self.rng.uniform(0, 1.0))

    # Sending at real time -------------------------------------------------------

    async def paced(self, conn: Conn, text: str) -> None:
        """Send one chunk when its audio would have been recorded."""
        now = time.monotonic()
        if self.next_send < now - MAX_SLIP_S:
            self.next_send = now
        if self.next_send > now:
            await asyncio.sleep(self.next_send - now)
        self.next_send += self.chunk_s
        if conn.closed:
            raise Dropped
        try:
            await conn.send(text)
        except Exception as exc:
            raise Dropped from exc

    async def silence_until(
        self, conn: Conn, ready: Callable[[], bool], name: str, timeout_s: float = ANSWER_TIMEOUT_S
    ) -> bool:
        """Stream silence (the microphone stays open) until `ready()`; a timeout is
        counted against `name`."""
        end = time.monotonic() + timeout_s
        while not ready():
            if time.monotonic() > end:
                self.tally.timeout(name, list(conn.recent))
                return False
            await self.paced(conn, self.audio.silence)
        return True

    async def ack(self, conn: Conn, ready: Callable[[], bool], name: str) -> bool:
        if await conn.until(ready, ACK_TIMEOUT_S):
            return True
        if conn.closed:
            raise Dropped
        self.tally.timeout(name, list(conn.recent))
        return False

    async def think(self, conn: Conn) -> None:
        end = time.monotonic() + self.rng.uniform(0.2, 2.0)
        await self.silence_until(conn, lambda: time.monotonic() > end, "think", 10.0)

    async def settle(self, conn: Conn, name: str) -> None:
        """Let every response of the action end before the next one starts."""
        await self.silence_until(conn, lambda: not conn.busy(), f"{name}:settle")

    def utterance(self) -> Utterance:
        return self.rng.choice(self.audio.utterances)

    def new_id(self) -> str:
        self.serial += 1
        return f"soak_{self.index}_{self.serial}"

    # Actions --------------------------------------------------------------------

    async def say(self, conn: Conn, utterance: Utterance) -> float:
        """Stream an utterance at real time; the time its audible speech ended."""
        t_end = time.monotonic()
        for i, chunk in enumerate(utterance.chunks):
            await self.paced(conn, chunk)
            if i == utterance.last_speech:
                t_end = time.monotonic()
        return t_end

    def answered(self, conn: Conn, t: float) -> bool:
        seen = conn.created_since(t)
        return seen is not None and seen[1].done_t is not None

    def record_turn(self, conn: Conn, t_end: float) -> None:
        seen = conn.created_since(t_end)
        if seen is None:
            return
        response = seen[1]
        if response.first_delta_t is not None:
            self.tally.latency("speech_end_to_first_audio", 1000 * (response.first_delta_t - t_end))
        committed = conn.last_committed_t
        if committed is not None and t_end <= committed <= response.created_t:
            self.tally.latency("committed_to_created", 1000 * (response.created_t - committed))

    async def speech(self, conn: Conn) -> None:
        """A server_vad turn: speak, keep streaming, hear the answer."""
        t_end = await self.say(conn, self.utterance())
        if await self.silence_until(conn, lambda: self.answered(conn, t_end), "speech"):
            self.record_turn(conn, t_end)

    async def barge_in(self, conn: Conn) -> None:
        """Speak, and speak again as soon as the answer's audio starts."""
        t_end = await self.say(conn, self.utterance())

        def audible() -> bool:
            seen = conn.created_since(t_end)
            return seen is not None and (
                seen[1].first_delta_t is not None or seen[1].done_t is not None
            )

        if not await self.silence_until(conn, audible, "barge_in"):
            return
        self.record_turn(conn, t_end)
        seen = conn.created_since(t_end)
        assert seen is not None
        first = seen[1]
        t_again = await self.say(conn, self.utterance())
        if await self.silence_until(conn, lambda: self.answered(conn, t_again), "barge_in"):
            self.tally.barge_ins[
                "cancelled" if first.status == "cancelled" else "finished first"
            ] += 1

    async def manual(self, conn: Conn) -> None:
        """Turn detection off, append a whole utterance at once, commit and ask."""
        updated = conn.count("session.updated")
        await conn.send(session_update(None))
        if not await self.ack(conn, lambda: conn.count("session.updated") > updated, "manual"):
            return
        try:
            for chunk in self.utterance().chunks:
                await conn.send(chunk)
            t = time.monotonic()
            await conn.send({"type": "input_audio_buffer.commit"})
            await conn.send({"type": "response.create"})
            if await conn.until(lambda: self.answered(conn, t), ANSWER_TIMEOUT_S):
                seen = conn.created_since(t)
                assert seen is not None
                self.tally.latency("commit_to_created_manual", 1000 * (seen[1].created_t - t))
            elif conn.closed:
                raise Dropped
            else:
                self.tally.timeout("manual", list(conn.recent))
        finally:
            if not conn.closed:
                updated = conn.count("session.updated")
                await conn.send(session_update(SERVER_VAD))
                await self.ack(conn, lambda: conn.count("session.updated") > updated, "manual")

    async def clear(self, conn: Conn) -> None:
        """Start speaking, then throw the input away."""
        utterance = self.utterance()
        for chunk in utterance.chunks[: self.rng.randint(3, len(utterance.chunks) // 2)]:
            await self.paced(conn, chunk)
        cleared = conn.count("input_audio_buffer.cleared")
        await conn.send({"type": "input_audio_buffer.clear"})
        await self.ack(conn, lambda: conn.count("input_audio_buffer.cleared") > cleared, "clear")

    async def out_of_band(self, conn: Conn) -> None:
        """One or two responses outside the conversation, side by side."""
        n = self.rng.randint(1, 2)
        t = time.monotonic()
        for _ in range(n):
            response = {
                "conversation": "none",
                "metadata": {"purpose": "soak"},
                "input": [
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "Summarize the call."}],
                    }
                ],
            }
            await conn.send({"type": "response.create", "response": response})

        def all_done() -> bool:
            mine = [r for r in conn.responses.values() if r.created_t >= t]
            return len(mine) >= n and all(r.done_t is not None for r in mine)

        await self.silence_until(conn, all_done, "out_of_band")

    async def items(self, conn: Conn) -> None:
        """Create, retrieve, delete a client item, or truncate an answer's audio."""
        choice = self.rng.random()
        heard = [i for r in conn.responses.values() for i in r.audio_items]
        if choice < 0.3 and heard:
            truncated = conn.count("conversation.item.truncated")
            await conn.send(
                {
                    "type": "conversation.item.truncate",
                    "item_id": self.rng.choice(heard),
                    "content_index": 0,
                    "audio_end_ms": self.rng.randint(0, 800),
                }
            )
            done = lambda: conn.count("conversation.item.truncated") > truncated  # noqa: E731
            await self.ack(conn, done, "items:truncate")
            return
        item_id = self.new_id()
        added = conn.count("conversation.item.added")
        item = {
            "id": item_id,
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Remember the number 42."}],
        }
        await conn.send({"type": "conversation.item.create", "item": item})
        if not await self.ack(conn, lambda: conn.count("conversation.item.added") > added, "items"):
            return
        if choice < 0.6:
            retrieved = conn.count("conversation.item.retrieved")
            await conn.send({"type": "conversation.item.retrieve", "item_id": item_id})
            done = lambda: conn.count("conversation.item.retrieved") > retrieved  # noqa: E731
            await self.ack(conn, done, "items:retrieve")
        if choice < 0.85:
            deleted = conn.count("conversation.item.deleted")
            await conn.send({"type": "conversation.item.delete", "item_id": item_id})
            done = lambda: conn.count("conversation.item.deleted") > deleted  # noqa: E731
            await self.ack(conn, done, "items:delete")

    async def update(self, conn: Conn) -> None:
        vad = {**SERVER_VAD, "silence_duration_ms": self.rng.choice([400, 500, 600])}
        instructions = self.rng.choice(["Be brief.", "Answer kindly.", "Speak slowly."])
        updated = conn.count("session.updated")
        await conn.send(session_update(vad, instructions=instructions))
        await self.ack(conn, lambda: conn.count("session.updated") > updated, "update")

    async def bad(self, conn: Conn) -> None:
        errors = conn.errors
        await conn.send(self.rng.choice(BAD_INPUT))
        await self.ack(conn, lambda: conn.errors > errors, "bad")

    async def drop(self, conn: Conn) -> None:
        """Lose the connection mid-sentence, then come back."""
        utterance = self.utterance()
        for chunk in utterance.chunks[: self.rng.randint(1, len(utterance.chunks))]:
            await self.paced(conn, chunk)
        await conn.abort()
        if self.resumable and conn.resume_token is not None:
            if self.rng.random() < RESUME_SHARE:
                self.comeback = Comeback(conn.resume_token, conn.last_event_id, conn.responses)
                await asyncio.sleep(self.rng.uniform(*RESUME_AFTER_S))
            else:
                self.tally.resumes["abandoned"] += 1
        raise Dropped


def with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"
