"""The browser client (server/static/) in a real headless Chromium against a real
Parley server.

Debian's chromium (/usr/bin/chromium, never a downloaded browser) is driven by the
Python `playwright` package. Its fake microphone plays a WAV made here from a speech
fixture (`--use-file-for-fake-audio-capture`), so the page's whole audio path runs:
getUserMedia, the capture worklet's resampling to 24 kHz, the WebSocket, server VAD,
the playback worklet. Every frame on the page's WebSocket is recorded from the test
side (Playwright's frame events), and an AnalyserNode on the player's output tells
when sound actually plays.

`make system-deps` installs chromium (as root); the `playwright` package comes with
the test extra. Where the browser is missing these tests skip loudly, and fail in CI.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import numpy as np
from fastapi import FastAPI

from server.app import STATIC_DIR
from server.resume import TOKEN_EVENT
from tests.support.browser import API_KEY, TIMEOUT_MS, TIMEOUT_S, Launcher, capture_wav
from tests.support.servers import RunningServer, ServerFactory

try:
    from playwright.async_api import Browser, Page, WebSocket, async_playwright
except ImportError:  # reported by `require_browser`
    async_playwright = None

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SCRIPTED_WORDS = 7  # "I heard N samples in M items." is seven words, one chunk each
# Records when the player's output last carried sound (performance.now()), from an
# AnalyserNode tapped onto the playback worklet's node.
LISTEN_TO_OUTPUT = """() => {
  const app = window.parley;
  const analyser = app.context.createAnalyser();
  analyser.fftSize = 512;
  app.outputNode.connect(analyser);
  const data = new Float32Array(analyser.fftSize);
  window.__sound = { first: null, last: null };
  setInterval(() => {
    analyser.getFloatTimeDomainData(data);
    let peak = 0;
    for (const v of data) peak = Math.max(peak, Math.abs(v));
    if (peak > 1e-3) {
      const now = performance.now();
      window.__sound.first ??= now;
      window.__sound.last = now;
    }
  }, 5);
}"""
# Records every value of <body data-state>, and when each truncate left the page.
RECORD_PAGE = """() => {
  window.__states = [];
  new MutationObserver(() => {
    const s = document.body.dataset.state;
    if (window.__states.at(-1) !== s) window.__states.push(s);
  }).observe(document.body, { attributes: true, attributeFilter: ["data-state"] });
  window.__truncates = [];
  // Every event on a WebRTC call's data channel, both ways, as it happens.
  window.__rtc = [];
  const record = (sent, data) => {
    try {
      window.__rtc.push({ at: performance.now(), sent, event: JSON.parse(data) });
    } catch {}
  };
  const createDataChannel = RTCPeerConnection.prototype.createDataChannel;
  RTCPeerConnection.prototype.createDataChannel = function (...args) {
    const channel = createDataChannel.apply(this, args);
    channel.addEventListener("message", ({ data }) => record(false, data));
    const sendOn = channel.send.bind(channel);
    channel.send = (data) => {
      record(true, data);
      return sendOn(data);
    };
    return channel;
  };
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (data) {
    if (typeof data === "string" && data.includes('"conversation.item.truncate"')) {
      window.__truncates.push(performance.now());
    }
    return send.call(this, data);
  };
}"""


@dataclass
class Frame:
    at: float  # time.monotonic()
    sent: bool  # page -> server
    event: dict[str, Any]
    socket: int  # which of the page's realtime WebSockets (an index into `urls`)


class PageSocket:
    """Every frame on the page's realtime WebSockets (one, or more after drops), both
    ways, as it happens."""

    def __init__(self, page: Page) -> None:
        self.frames: list[Frame] = []
        self.urls: list[str] = []  # of each WebSocket, as the page opened them
        self._changed = asyncio.Event()
        page.on("websocket", self._attach)

    def _attach(self, ws: WebSocket) -> None:
        if "/v1/realtime" not in ws.url:
            return
        index = len(self.urls)
        self.urls.append(ws.url)
        ws.on("framesent", lambda payload: self._record(payload, index, sent=True))
        ws.on("framereceived", lambda payload: self._record(payload, index, sent=False))
        self._changed.set()

    def _record(self, payload: str | bytes, index: int, *, sent: bool) -> None:
        try:
            event = json.loads(payload)
        except ValueError:
            return
        self.frames.append(Frame(time.monotonic(), sent, event, index))
        self._changed.set()

    def of(self, kind: str, *, sent: bool | None = None, socket: int | None = None) -> list[Frame]:
        return [
            f
            for f in self.frames
            if f.event.get("type") == kind
            and (sent is None or f.sent == sent)
            and (socket is None or f.socket == socket)
        ]

    async def wait_for_change(self) -> None:
        """Until the next frame, either way (TIMEOUT_S at most)."""
        self._changed.clear()
        async with asyncio.timeout(TIMEOUT_S):
            await self._changed.wait()

    async def wait_for(self, kind: str, *, sent: bool, socket: int | None = None) -> Frame:
        """The first frame of `kind` (in the given direction, on the given socket),
        waiting for it."""
        try:
            async with asyncio.timeout(TIMEOUT_S):
                while not (found := self.of(kind, sent=sent, socket=socket)):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            seen = sorted({f.event.get("type", "?") for f in self.frames})
            raise AssertionError(f"no {kind} frame within {TIMEOUT_S} s; saw {seen}") from None
        return found[0]


async def open_page(
    browser: Browser, server: RunningServer, transport: str = "websocket"
) -> tuple[Page, PageSocket, list[str]]:
    page = await browser.new_page(viewport={"width": 1280, "height": 860})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    socket = PageSocket(page)
    await page.goto(f"{server.http_url}/")
    await page.evaluate(RECORD_PAGE)
    await page.check(f"input[name=transport][value={transport}]")
    return page, socket, errors


async def connected(page: Page, protocol: str = "realtime") -> None:
    await page.wait_for_selector("body[data-state=listening]", timeout=TIMEOUT_MS)
    assert await page.get_attribute("body", "data-protocol") == protocol
    await page.evaluate(LISTEN_TO_OUTPUT)


def appended_audio(socket: PageSocket) -> list[np.ndarray]:
    return [
        np.frombuffer(base64.b64decode(f.event["audio"]), dtype="<i2")
        for f in socket.of("input_audio_buffer.append", sent=True)
    ]


def screenshot(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


async def test_the_page_is_served_without_a_key(serve: ServerFactory) -> None:
    """The page and its modules hold no secret: served to anyone, as JavaScript
    (module scripts and worklets refuse other types), while the API needs a key."""
    server = await serve(api_keys=[API_KEY])
    modules = {path.name: path.read_text() for path in sorted(STATIC_DIR.glob("*.js"))}
    assert {"app.js", "capture-worklet.js", "playback-worklet.js"} <= modules.keys()
    async with httpx.AsyncClient(base_url=server.http_url) as client:
        page = await client.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert '<script type="module" src="/static/app.js">' in page.text
        for name, text in modules.items():
            response = await client.get(f"/static/{name}")
            assert response.status_code == 200, name
            assert "javascript" in response.headers["content-type"], response.headers
            assert response.text == text
        assert (await client.get("/v1/models")).status_code == 401


async def test_conversation_in_the_browser(
    serve: ServerFactory, launch: Launcher, tmp_path: Path
) -> None:
    """The page gets an ephemeral key with the API key typed into it, connects with
    the key as a subprotocol, streams the microphone in 20 ms chunks; the server
    finds the turn, the answer plays through the jitter buffer without a gap, and
    the transcript shows both turns with the turn's latency."""
    server = await serve(api_keys=[API_KEY])
    capture = tmp_path / "speech.wav"
    capture_wav(capture, lead_s=1.0, tail_s=4.0)
    browser = await launch(Path(f"{capture}%noloop"))
    page, socket, errors = await open_page(browser, server)

    # Without a key the server refuses to mint one, and the page says why.
    await page.click("#connect")
    notice = await page.wait_for_selector("#notice.error", timeout=TIMEOUT_MS)
    assert notice is not None
    assert "needs an API key" in await notice.inner_text()
    assert await page.get_attribute("body", "data-state") == "disconnected"
    assert not socket.frames  # no WebSocket was opened
    assert errors == [
        "Failed to load resource: the server responded with a status of 401 (Unauthorized)"
    ]
    errors.clear()

    secrets: list[dict[str, Any]] = []

    async def on_response(response: Any) -> None:
        if response.url.endswith("/v1/realtime/client_secrets") and response.ok:
            request_headers = await response.request.all_headers()
            secrets.append({"auth": request_headers.get("authorization"), **await response.json()})

    page.on("response", on_response)
    await page.fill("#api-key", API_KEY)
    await page.click("#connect")
    await connected(page)
    assert secrets and secrets[0]["auth"] == f"Bearer {API_KEY}"
    assert secrets[0]["value"].startswith("ek_")
    created = (await socket.wait_for("session.created", sent=False)).event
    # The session the page asked for, carried by the ephemeral key.
    assert created["session"]["audio"]["input"]["transcription"]["model"] == "whisper-1"
    assert created["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad"

    answer = await page.wait_for_selector(
        ".turn.assistant[data-played-ms][data-latency-ms]", timeout=TIMEOUT_MS
    )
    assert answer is not None
    item_id = await answer.get_attribute("data-item-id")
    await page.wait_for_selector("body[data-state=listening]", timeout=TIMEOUT_MS)

    # The turn: found by the server's VAD in the page's microphone audio.
    started = await socket.wait_for("input_audio_buffer.speech_started", sent=False)
    stopped = await socket.wait_for("input_audio_buffer.speech_stopped", sent=False)
    assert started.at < stopped.at
    chunks = appended_audio(socket)
    assert all(480 <= len(c) <= 960 for c in chunks), {len(c) for c in chunks}  # 20-40 ms
    heard = np.concatenate(chunks).astype(np.float64)
    peak_rms = max(np.sqrt(np.mean(heard[i : i + 2400] ** 2)) for i in range(0, len(heard), 2400))
    assert peak_rms > 500, peak_rms  # speech went through capture and resampling

    # Both turns in the transcript.
    await page.wait_for_selector(".turn.user:not(.pending)", timeout=TIMEOUT_MS)
    user_text = await page.inner_text(".turn.user .text")
    assert re.fullmatch(r"audio of \d+ samples", user_text), user_text
    answer_text = await page.inner_text(f".turn.assistant[data-item-id='{item_id}'] .text")
    assert re.fullmatch(r"I heard \d+ samples in 1 items\.", answer_text), answer_text

    # The answer played whole, without underruns, and its latency was measured.
    played_ms = float(await answer.get_attribute("data-played-ms") or "nan")
    assert played_ms == SCRIPTED_WORDS * 100
    assert await page.get_attribute("body", "data-underruns") == "0"
    sound = await page.evaluate("window.__sound")
    assert sound["first"] is not None, "no sound ever reached the output"
    latency_ms = int(await answer.get_attribute("data-latency-ms") or "-1")
    # End of speech -> first audio includes the VAD's 500 ms of silence.
    assert 450 <= latency_ms < 10_000, latency_ms
    assert await page.inner_text("#stat-last") == f"{latency_ms} ms"

    states = await page.evaluate("window.__states")
    for expected in ("listening", "user-speaking", "assistant-speaking"):
        assert expected in states, states
    assert states.index("user-speaking") < states.index("assistant-speaking"), states
    assert states[-1] == "listening", states

    await page.screenshot(path=screenshot("browser-conversation.png"))
    assert not errors, errors


async def test_barge_in_stops_playback_and_truncates(
    serve: ServerFactory, launch: Launcher, tmp_path: Path
) -> None:
    """A long answer (7 s of audio) is playing when the looped microphone file
    speaks again: the page stops the sound at once and truncates the item to the
    milliseconds actually played."""
    chunk_ms = 1000
    server = await serve(scripted_chunk_ms=chunk_ms, scripted_chunk_delay_s=0.2)
    response_ms = SCRIPTED_WORDS * chunk_ms
    capture = tmp_path / "speech-looped.wav"
    # Looped by chromium: speech again about 2.5 s after the first turn ends.
    capture_wav(capture, lead_s=1.0, tail_s=1.5)
    browser = await launch(capture)
    page, socket, errors = await open_page(browser, server)
    await page.click("#connect")
    await connected(page)

    truncate = await socket.wait_for("conversation.item.truncate", sent=True)
    item_id = truncate.event["item_id"]
    deltas = [f for f in socket.of("response.output_audio.delta") if f.event["item_id"] == item_id]
    assert deltas, "the truncated item never had audio"
    barge = [
        f
        for f in socket.of("input_audio_buffer.speech_started", sent=False)
        if deltas[0].at < f.at <= truncate.at
    ]
    assert barge, "no speech_started between the answer's audio and the truncate"
    # At once: the truncate follows the speech_started it answers.
    assert truncate.at - barge[-1].at < 0.5, truncate.at - barge[-1].at
    played_ms = truncate.event["audio_end_ms"]
    assert truncate.event["content_index"] == 0
    assert 0 < played_ms < response_ms, played_ms

    # The server cut the item where the page said.
    truncated = await socket.wait_for("conversation.item.truncated", sent=False)
    assert truncated.event["item_id"] == item_id
    assert truncated.event["audio_end_ms"] == played_ms

    # The sound stopped: the output fell silent within a few ms of the truncate and
    # stayed silent (here: for 400 ms, while the user speaks).
    await page.wait_for_function(
        """() => window.__truncates.length > 0 && window.__sound.last !== null &&
             performance.now() - Math.max(window.__sound.last, window.__truncates[0]) > 400""",
        timeout=TIMEOUT_MS,
    )
    sound, truncates = await page.evaluate("[window.__sound, window.__truncates]")
    assert sound["first"] < truncates[0], "nothing played before the barge-in"
    # The flush fades out over 4 ms before the truncate is sent; the analyser looks
    # every 5 ms over a 11 ms window.
    assert sound["last"] - truncates[0] < 50, sound["last"] - truncates[0]

    cut = page.locator(f".turn.assistant[data-item-id='{item_id}']")
    await cut.and_(page.locator("[data-truncated-ms]")).wait_for(timeout=TIMEOUT_MS)
    assert await cut.get_attribute("data-played-ms") == str(played_ms)
    assert "interrupted at" in await cut.inner_text()
    states = await page.evaluate("window.__states")
    assert "assistant-speaking" in states, states
    await page.screenshot(path=screenshot("browser-barge-in.png"))
    assert not errors, errors


async def test_push_to_talk(serve: ServerFactory, launch: Launcher, tmp_path: Path) -> None:
    """Push to talk instead of server VAD: audio goes out only while the button is
    held, and letting go commits the turn and asks for the answer."""
    server = await serve()
    capture = tmp_path / "speech.wav"
    lead_s = 1.0
    speech_s = capture_wav(capture, lead_s=lead_s, tail_s=4.0)
    browser = await launch(Path(f"{capture}%noloop"))
    page, socket, errors = await open_page(browser, server)
    await page.check("input[name=mode][value=ptt]")
    await page.click("#connect")
    await connected(page)
    created = (await socket.wait_for("session.created", sent=False)).event
    assert created["session"]["audio"]["input"]["turn_detection"] is None
    assert not socket.of("input_audio_buffer.append")  # nothing is sent until held

    await page.hover("#talk")
    await page.mouse.down()
    await page.wait_for_selector("body[data-state=user-speaking]", timeout=TIMEOUT_MS)
    # Held until the page has sent the whole sentence (and a little silence).
    needed = int((lead_s + speech_s + 0.3) * 1000 / 20)
    deadline = time.monotonic() + TIMEOUT_S
    while len(socket.of("input_audio_buffer.append")) < needed:
        assert time.monotonic() < deadline, "the page stopped sending audio"
        await socket.wait_for_change()
    await page.mouse.up()

    commit = await socket.wait_for("input_audio_buffer.commit", sent=True)
    create = await socket.wait_for("response.create", sent=True)
    assert commit.at <= create.at
    assert not socket.of("input_audio_buffer.speech_started")  # no server VAD
    answer = await page.wait_for_selector(
        ".turn.assistant[data-played-ms][data-latency-ms]", timeout=TIMEOUT_MS
    )
    assert answer is not None
    await page.wait_for_selector(".turn.user:not(.pending)", timeout=TIMEOUT_MS)
    user_text = await page.inner_text(".turn.user .text")
    heard = re.fullmatch(r"audio of (\d+) samples", user_text)
    assert heard is not None, user_text
    sent = sum(len(c) for c in appended_audio(socket))
    assert int(heard[1]) == sent  # the turn is exactly what was sent while held
    answer_text = await page.inner_text(".turn.assistant .text")
    assert re.fullmatch(r"I heard \d+ samples in 1 items\.", answer_text), answer_text
    assert await page.get_attribute("body", "data-underruns") == "0"
    await page.wait_for_selector("body[data-state=listening]", timeout=TIMEOUT_MS)
    # Released: nothing was sent after the commit, while the answer came and played.
    assert all(f.at < commit.at for f in socket.of("input_audio_buffer.append"))
    assert not errors, errors


async def test_a_dropped_websocket_is_resumed_by_the_page(
    serve: ServerFactory, apps: list[FastAPI], launch: Launcher, tmp_path: Path
) -> None:
    """The page opens a resumable session; when its connection drops after an answer,
    it says it is reconnecting, comes back by itself with its newest token and the last
    event it processed, and the same session (its conversation so far) answers the
    next turn on the new socket."""
    server = await serve(api_keys=[API_KEY])
    capture = tmp_path / "speech-looped.wav"
    # Looped by chromium: a turn about every 7 s, its answer over well before the next.
    capture_wav(capture, lead_s=1.0, tail_s=4.0)
    browser = await launch(capture)
    page, socket, errors = await open_page(browser, server)
    await page.fill("#api-key", API_KEY)
    await page.click("#connect")
    await connected(page)
    await page.wait_for_selector(".turn.assistant[data-played-ms]", timeout=TIMEOUT_MS)
    assert parse_qs(urlsplit(socket.urls[0]).query) == {"resume": ["true"]}
    resumes = apps[-1].state.realtime.resumes._by_id
    ((session_id, resumable),) = resumes.items()
    token = socket.of(TOKEN_EVENT, sent=False)[-1].event["resume_token"]
    assert token.startswith("rt_")

    # The network drops: the server's end of the socket goes, without a close frame.
    assert resumable.attachment is not None
    resumable.attachment.abort()
    announced = await socket.wait_for(TOKEN_EVENT, sent=False, socket=1)
    # Back with the newest token and the last event the page had, first told its next token.
    received = [f for f in socket.frames if not f.sent]
    last = [f for f in received if f.socket == 0][-1]
    query = parse_qs(urlsplit(socket.urls[1]).query)
    assert query == {"resume_token": [token], "last_event_id": [last.event["event_id"]]}
    assert next(f for f in received if f.socket == 1) is announced
    assert announced.event["resume_token"] not in (token, None)
    # The same session, taken back: no new one was opened.
    assert resumes == {session_id: resumable} and resumable.attachment is not None
    assert apps[-1].state.hub.sessions == 1
    assert not socket.of("session.created", socket=1)

    # The next turn, heard and answered on the new socket, with the conversation kept.
    done = await socket.wait_for("response.done", sent=False, socket=1)
    assert done.event["response"]["status"] == "completed"
    (item,) = [o["id"] for o in done.event["response"]["output"]]
    answer = page.locator(f".turn.assistant[data-item-id='{item}'][data-played-ms]")
    await answer.wait_for(timeout=TIMEOUT_MS)
    text = await answer.locator(".text").inner_text()
    heard = re.fullmatch(r"I heard \d+ samples in (\d+) items\.", text)
    assert heard is not None and int(heard[1]) >= 3, text  # the first turn and its answer too
    assert socket.of("input_audio_buffer.append", sent=True, socket=1)
    await page.wait_for_selector("body[data-state=listening]", timeout=TIMEOUT_MS)
    states = await page.evaluate("window.__states")
    assert "reconnecting" in states, states
    assert len(socket.urls) == 2
    assert not errors, errors


async def test_a_session_that_cannot_be_resumed_ends_on_the_page(
    serve: ServerFactory, apps: list[FastAPI], launch: Launcher, tmp_path: Path
) -> None:
    """The connection drops and the session is gone too (here: ended on the server):
    every resume is refused, and once its window has passed the page stops trying and
    says the session ended."""
    server = await serve(api_keys=[API_KEY], resume_window_s=2.0)
    capture = tmp_path / "silence.wav"
    capture_wav(capture, lead_s=30.0, tail_s=0.0)
    browser = await launch(Path(f"{capture}%noloop"))
    page, socket, errors = await open_page(browser, server)
    await page.fill("#api-key", API_KEY)
    await page.click("#connect")
    await connected(page)
    token = (await socket.wait_for(TOKEN_EVENT, sent=False)).event["resume_token"]
    (resumable,) = apps[-1].state.realtime.resumes._by_id.values()
    assert resumable.attachment is not None
    resumable.attachment.abort()
    resumable.finish()

    notice = await page.wait_for_selector("#notice.error", timeout=TIMEOUT_MS)
    assert notice is not None
    assert "could not be resumed" in await notice.inner_text()
    assert await page.get_attribute("body", "data-state") == "disconnected"
    states = await page.evaluate("window.__states")
    assert states[-2:] == ["reconnecting", "disconnected"], states
    # It tried, with the token, until the 2 s window would have passed (0.25 + 0.5 +
    # 1 s of waits; the next, 2 s, would end past it).
    attempts = socket.urls[1:]
    assert len(attempts) == 3, socket.urls
    assert all(parse_qs(urlsplit(url).query)["resume_token"] == [token] for url in attempts)
    assert len(errors) == 3 and all("404" in e for e in errors), errors


async def rtc_events(page: Page, kind: str, *, sent: bool = False) -> list[dict[str, Any]]:
    """The page's data channel events of `kind` (window.__rtc, from RECORD_PAGE)."""
    events: list[dict[str, Any]] = await page.evaluate(
        "([kind, sent]) => window.__rtc.filter((e) => e.event.type === kind && e.sent === sent)",
        [kind, sent],
    )
    return events


async def rtc_wait_for(page: Page, kind: str, *, sent: bool = False) -> dict[str, Any]:
    await page.wait_for_function(
        "([kind, sent]) => window.__rtc.some((e) => e.event.type === kind && e.sent === sent)",
        arg=[kind, sent],
        timeout=TIMEOUT_MS,
    )
    return (await rtc_events(page, kind, sent=sent))[0]


async def test_conversation_over_webrtc(
    serve: ServerFactory, launch: Launcher, tmp_path: Path
) -> None:
    """The page's default transport: the ephemeral key opens a call at
    /v1/realtime/calls, the microphone is the call's track, events travel on the
    data channel, and the answer plays from the call's incoming track."""
    server = await serve(api_keys=[API_KEY])
    capture = tmp_path / "speech.wav"
    capture_wav(capture, lead_s=1.0, tail_s=4.0)
    browser = await launch(Path(f"{capture}%noloop"))
    page, socket, errors = await open_page(browser, server, transport="webrtc")
    offers: list[dict[str, Any]] = []

    async def on_response(response: Any) -> None:
        if response.url.endswith("/v1/realtime/calls"):
            headers = await response.request.all_headers()
            offers.append(
                {
                    "status": response.status,
                    "auth": headers.get("authorization", ""),
                    "type": headers.get("content-type"),
                    "location": await response.header_value("location"),
                }
            )

    page.on("response", on_response)
    await page.fill("#api-key", API_KEY)
    await page.click("#connect")
    await connected(page, "webrtc")
    (offer,) = offers
    assert offer["status"] == 201 and offer["type"] == "application/sdp"
    assert offer["auth"].startswith("Bearer ek_")  # the ephemeral key, never the API key
    assert offer["location"].startswith("/v1/realtime/calls/rtc_")
    created = (await rtc_wait_for(page, "session.created"))["event"]
    assert created["session"]["audio"]["input"]["transcription"]["model"] == "whisper-1"

    answer = await page.wait_for_selector(
        ".turn.assistant[data-played=whole][data-latency-ms]", timeout=TIMEOUT_MS
    )
    assert answer is not None
    await page.wait_for_selector("body[data-state=listening]", timeout=TIMEOUT_MS)
    started = await rtc_wait_for(page, "input_audio_buffer.speech_started")
    playing = await rtc_wait_for(page, "output_audio_buffer.started")
    stopped = await rtc_wait_for(page, "output_audio_buffer.stopped")
    assert started["at"] < playing["at"] < stopped["at"]
    # Audio went on the tracks, never as events, and the page used no WebSocket.
    assert not await rtc_events(page, "response.output_audio.delta")
    assert not await rtc_events(page, "input_audio_buffer.append", sent=True)
    assert not socket.frames
    await page.wait_for_selector(".turn.user:not(.pending)", timeout=TIMEOUT_MS)
    user_text = await page.inner_text(".turn.user .text")
    assert re.fullmatch(r"audio of \d+ samples", user_text), user_text
    answer_text = await page.inner_text(".turn.assistant .text")
    assert re.fullmatch(r"I heard \d+ samples in 1 items\.", answer_text), answer_text
    sound = await page.evaluate("window.__sound")
    assert sound["first"] is not None, "no sound came from the call's track"
    assert sound["first"] >= playing["at"] - 100  # the answer's sound, not before it
    latency_ms = int(await answer.get_attribute("data-latency-ms") or "-1")
    assert 450 <= latency_ms < 10_000, latency_ms
    states = await page.evaluate("window.__states")
    assert states.index("user-speaking") < states.index("assistant-speaking"), states
    assert states[-1] == "listening", states
    await page.screenshot(path=screenshot("browser-webrtc-conversation.png"))
    assert not errors, errors


async def test_barge_in_over_webrtc(serve: ServerFactory, launch: Launcher, tmp_path: Path) -> None:
    """Over WebRTC the server handles barge-in: the looped microphone speaks over a
    7 s answer, the call's track goes silent at once, and the server truncates the
    item to what it played and says so."""
    chunk_ms = 1000
    server = await serve(scripted_chunk_ms=chunk_ms, scripted_chunk_delay_s=0.2)
    capture = tmp_path / "speech-looped.wav"
    capture_wav(capture, lead_s=1.0, tail_s=1.5)
    browser = await launch(capture)
    page, _, errors = await open_page(browser, server, transport="webrtc")
    await page.click("#connect")
    await connected(page, "webrtc")

    truncated = (await rtc_wait_for(page, "conversation.item.truncated"))["event"]
    cleared = await rtc_wait_for(page, "output_audio_buffer.cleared")
    playing = await rtc_wait_for(page, "output_audio_buffer.started")
    barge = [
        e
        for e in await rtc_events(page, "input_audio_buffer.speech_started")
        if playing["at"] < e["at"] <= cleared["at"]
    ]
    assert barge, "no speech_started while the answer played"
    assert cleared["event"]["response_id"] == playing["event"]["response_id"]
    played_ms = truncated["audio_end_ms"]
    assert 0 < played_ms < 7 * chunk_ms, played_ms
    assert not await rtc_events(page, "conversation.item.truncate", sent=True)  # the server's

    # The sound stopped: silent within 150 ms of the speech_started, for 400 ms.
    await page.wait_for_function(
        """(t) => window.__sound.last !== null &&
             performance.now() - Math.max(window.__sound.last, t) > 400""",
        arg=barge[-1]["at"],
        timeout=TIMEOUT_MS,
    )
    sound = await page.evaluate("window.__sound")
    assert sound["first"] < barge[-1]["at"], "nothing played before the barge-in"
    assert sound["last"] - barge[-1]["at"] < 150, sound["last"] - barge[-1]["at"]

    cut = page.locator(f".turn.assistant[data-item-id='{truncated['item_id']}']")
    await cut.and_(page.locator("[data-truncated-ms]")).wait_for(timeout=TIMEOUT_MS)
    assert await cut.get_attribute("data-played-ms") == str(played_ms)
    assert "interrupted at" in await cut.inner_text()
    await page.screenshot(path=screenshot("browser-webrtc-barge-in.png"))
    assert not errors, errors
