// The Realtime protocol from a browser: an ephemeral key, then the WebSocket.
//
// Browsers cannot set an Authorization header on a WebSocket, so the key travels as
// a subprotocol: ["realtime", "openai-insecure-api-key.<key>"]. The key offered is
// always an ephemeral `ek_…` from POST /v1/realtime/client_secrets, which opens one
// session, expires, and carries the session configuration it was made with. The real
// API key (only needed when the server has keys) is sent to that endpoint alone, as
// a Bearer header; in production, have your backend make that call instead.

export class AuthError extends Error {}

// A server event's JSON text, dispatched on `target` as an `event` CustomEvent
// (text that is not JSON is dropped). The WebSocket and the WebRTC call both use it.
export function dispatchServerEvent(target, data) {
  let event;
  try {
    event = JSON.parse(data);
  } catch {
    return;
  }
  target.dispatchEvent(new CustomEvent("event", { detail: event }));
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

// One WebSocket session. Dispatches an `event` CustomEvent per server event and a
// `close` event ({code, reason}) when it ends.
export class RealtimeConnection extends EventTarget {
  constructor() {
    super();
    this.ws = null;
  }

  open({ base, key }) {
    const url = new URL("/v1/realtime", base);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, ["realtime", `openai-insecure-api-key.${key}`]);
      this.ws = ws;
      let opened = false;
      ws.onopen = () => {
        opened = true;
        resolve(ws.protocol);
      };
      ws.onmessage = ({ data }) => dispatchServerEvent(this, data);
      ws.onclose = ({ code, reason }) => {
        if (!opened) reject(new Error(`the server refused the connection (${code})`));
        this.dispatchEvent(new CustomEvent("close", { detail: { code, reason } }));
      };
    });
  }

  get isOpen() {
    return this.ws?.readyState === WebSocket.OPEN;
  }

  send(event) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(event));
  }

  close() {
    this.ws?.close(1000);
  }
}
