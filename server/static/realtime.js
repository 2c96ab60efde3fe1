// The Realtime protocol from a browser: an ephemeral key, then the WebSocket.
//
// Browsers cannot set an Authorization header on a WebSocket, so the key travels as
// a subprotocol: ["realtime", "openai-insecure-api-key.<key>"]. The key offered is
// always an ephemeral `ek_…` from POST /v1/realtime/client_secrets, which opens one
// session, expires, and carries the session configuration it was made with. The real
// API key (only needed when the server has keys) is sent to that endpoint alone, as
// a Bearer header; in production, have your backend make that call instead.
//
// The WebSocket session is resumable (Parley's extension, docs/protocol.md): when the
// connection drops, the page reconnects with the newest resume token and the id of the
// last event it processed, with the same ek_ key (spent by then, still good for the
// session it opened), and gets every event it missed, then the session goes on.

export class AuthError extends Error {}

// A server event's JSON text, dispatched on `target` as an `event` CustomEvent and
// returned once dispatched (text that is not JSON is dropped: undefined). The
// WebSocket and the WebRTC call both use it.
export function dispatchServerEvent(target, data) {
  let event;
  try {
    event = JSON.parse(data);
  } catch {
    return undefined;
  }
  target.dispatchEvent(new CustomEvent("event", { detail: event }));
  return event;
}

export async function createClientSecret({ base, apiKey, session }) {
  const headers = { "Content-Type": "application/json" };
  if (apiKey) headers.Authorization = `Bearer ${apiKey}`;
  const response = await fetch(new URL("/v1/realtime/client_secrets", base), {
    method: "POST",
    headers,
    body: JSON.stringify({ session }),
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = body?.error?.message ?? `HTTP ${response.status}`;
    if (response.status === 401 || response.status === 403) throw new AuthError(message);
    throw new Error(message);
  }
  return body; // {value: "ek_…", expires_at, session}
}

const TOKEN_EVENT = "parley.resume_token";
// Only a drop is resumed: it ends without a close frame (1006). A close frame from the
// server (1001 drain, 1008, 1011, 1013, ...) means it ended the session; 1000 is ours.
const DROPPED = 1006;
// Between attempts: 0.25 s, doubled after each failure up to 2 s. A refused resume
// (404: the token is spent or void, 409: events lost) looks like a network failure to
// a page (a failed WebSocket, 1006, no status), so it gives up after MAX_ATTEMPTS
// failures, or once the session's window has passed.
const FIRST_RETRY_MS = 250;
const MAX_RETRY_MS = 2000;
const MAX_ATTEMPTS = 8;

// One WebSocket session, over as many connections as drops take. Dispatches an
// `event` CustomEvent per server event, `reconnecting` when the connection dropped
// and `reconnected` when the session is back, and `close` ({code, reason}) when the
// session ends.
export class RealtimeConnection extends EventTarget {
  constructor() {
    super();
    this.ws = null;
    this.closed = false; // close() was called: nothing reconnects
    this.resume = null; // {token, windowS}: the newest announced (a token is good once)
    this.lastEventId = null; // of the last server event dispatched
    this.retry = null; // the timer of the next attempt
  }

  open({ base, key }) {
    this.base = base;
    this.key = key;
    return new Promise((resolve, reject) => {
      const opened = () => resolve(this.ws.protocol);
      const failed = (code, reason) => {
        reject(new Error(`the server refused the connection (${code})`));
        this.end(code, reason);
      };
      this.connect({ resume: "true" }, { opened, failed });
    });
  }

  // A WebSocket with `query`; `failed` when it closes without having opened (a
  // refused upgrade looks so, whatever its status).
  connect(query, { opened, failed }) {
    const url = new URL("/v1/realtime", this.base);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
    const ws = new WebSocket(url, ["realtime", `openai-insecure-api-key.${this.key}`]);
    this.ws = ws;
    let wasOpen = false;
    ws.onopen = () => {
      wasOpen = true;
      opened();
    };
    ws.onmessage = ({ data }) => {
      const event = dispatchServerEvent(this, data);
      if (event?.type === TOKEN_EVENT) {
        this.resume = { token: event.resume_token, windowS: event.window_s };
      }
      // Dispatched means processed: listeners run synchronously.
      if (event?.event_id) this.lastEventId = event.event_id;
    };
    ws.onclose = ({ code, reason }) => {
      if (this.ws !== ws) return;
      if (!wasOpen) failed(code, reason);
      else if (code === DROPPED && this.resume && !this.closed) this.dropped();
      else this.end(code, reason);
    };
  }

  // The connection dropped: take the session back before its window passes.
  dropped() {
    const deadline = performance.now() + this.resume.windowS * 1000;
    let failures = 0;
    const attempt = () => {
      this.retry = null;
      const query = { resume_token: this.resume.token };
      if (this.lastEventId) query.last_event_id = this.lastEventId;
      this.connect(query, {
        opened: () => this.dispatchEvent(new CustomEvent("reconnected")),
        failed: (code) => {
          failures += 1;
          if (this.closed) this.end(code, "");
          else schedule();
        },
      });
    };
    const schedule = () => {
      const wait = Math.min(FIRST_RETRY_MS * 2 ** failures, MAX_RETRY_MS);
      if (failures >= MAX_ATTEMPTS || performance.now() + wait > deadline) {
        this.end(DROPPED, "the session could not be resumed");
      } else {
        this.retry = setTimeout(attempt, wait);
      }
    };
    this.dispatchEvent(new CustomEvent("reconnecting"));
    schedule();
  }

  end(code, reason) {
    this.dispatchEvent(new CustomEvent("close", { detail: { code, reason } }));
  }

  get isOpen() {
    return this.ws?.readyState === WebSocket.OPEN;
  }

  // While reconnecting there is no socket to take an event: it is dropped, not queued
  // (a truncate or a barge-in's cancel would be stale by the time it arrived).
  send(event) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(event));
  }

  close() {
    this.closed = true;
    clearTimeout(this.retry);
    this.retry = null;
    this.ws?.close(1000);
  }
}
