"""The OpenAI Agents SDK for JavaScript (`@openai/agents-realtime`, installed by
`make test` from tests/browser/package-lock.json) in headless Chromium, unchanged,
pointed at Parley by its WebRTC transport's `baseUrl`: it opens a call with an
ephemeral key, sends its own `session.update`, and holds a voice turn (the fake
microphone speaks a fixture)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Route

from tests.support.browser import API_KEY, TIMEOUT_MS, Launcher, capture_wav
from tests.support.servers import ServerFactory

SDK = Path(__file__).parent / "node_modules/@openai/agents-realtime/dist/bundle"
UMD = SDK / "openai-realtime-agents.umd.js"
PAGE = """<!doctype html>
<meta charset="utf-8">
<script src="/agents-realtime.umd.js"></script>
<script>
  window.__events = [];
  window.__errors = [];
  window.connectAgent = async (key) => {
    const { RealtimeAgent, RealtimeSession, OpenAIRealtimeWebRTC } = OpenAIAgentsRealtime;
    const agent = new RealtimeAgent({ name: "Parley test", instructions: "Answer briefly." });
    const transport = new OpenAIRealtimeWebRTC({
      baseUrl: `${location.origin}/v1/realtime/calls`,
    });
    transport.on("*", (event) => window.__events.push(event));
    const session = new RealtimeSession(agent, { transport, model: "parley" });
    session.on("error", (e) => window.__errors.push(String(e?.error?.message ?? e?.error ?? e)));
    window.__session = session;
    await session.connect({ apiKey: key });
    return transport.callId ?? null;
  };
</script>
"""


async def test_the_agents_sdk_holds_a_voice_turn_over_webrtc(
    serve: ServerFactory,
    launch: Launcher,
    tmp_path: Path,
) -> None:
    assert UMD.exists(), f"{UMD} is missing: `make test` installs it (npm ci in tests/browser)"
    server = await serve(api_keys=[API_KEY])
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        minted = await http.post(
            "/v1/realtime/client_secrets",
            json={"session": {"type": "realtime"}},
            headers={"Authorization": f"Bearer {API_KEY}"},
        )
    key = minted.json()["value"]
    capture = tmp_path / "speech.wav"
    capture_wav(capture, lead_s=2.0, tail_s=4.0)
    browser = await launch(Path(f"{capture}%noloop"))
    page = await browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    # The test page and the SDK's bundle, served as if Parley served them (same origin).
    async def fulfil(route: Route) -> None:
        if route.request.url.endswith("/agents-realtime.umd.js"):
            await route.fulfill(path=UMD, content_type="text/javascript")
        else:
            await route.fulfill(body=PAGE, content_type="text/html")

    await page.route(f"{server.http_url}/agents/**", fulfil)
    await page.route(f"{server.http_url}/agents-realtime.umd.js", fulfil)
    await page.goto(f"{server.http_url}/agents/index.html")
    call_id = await page.evaluate("(key) => window.connectAgent(key)", key)
    await page.wait_for_function(
        """() => window.__events.some((e) => e.type === "output_audio_buffer.stopped")""",
        timeout=TIMEOUT_MS,
    )
    events: list[dict[str, Any]] = await page.evaluate("window.__events")
    types = [e["type"] for e in events]
    assert "session.updated" in types  # the SDK's own session.update was taken
    for kind in (
        "input_audio_buffer.speech_started",
        "input_audio_buffer.committed",
        "response.created",
        "output_audio_buffer.started",
    ):
        assert kind in types, (kind, types)
    done = [e for e in events if e["type"] == "response.done"]
    assert done and done[0]["response"]["status"] == "completed", done
    assert "error" not in types, [e for e in events if e["type"] == "error"]
    # The SDK's own view of the conversation: the user's turn and the spoken answer.
    history = await page.evaluate(
        "window.__session.history.map((i) => ({type: i.type, role: i.role, status: i.status}))"
    )
    roles = [i["role"] for i in history if i["type"] == "message"]
    assert roles[:2] == ["user", "assistant"], history
    assert call_id is None or call_id.startswith("rtc_")
    assert not await page.evaluate("window.__errors"), await page.evaluate("window.__errors")
    assert not errors, errors
