// The Realtime protocol over WebRTC, as OpenAI's browser guide has it: the microphone
// is a track of a peer connection, the events travel on its `oai-events` data channel,
// and the offer goes to POST /v1/realtime/calls with the ephemeral key as a Bearer
// header; the answer comes back as SDP. The server plays the assistant's audio on the
// connection's incoming track and handles barge-in and truncation itself, and the
// browser cancels the echo of audio played from a WebRTC track (iOS Safari only so).

import { AuthError, dispatchServerEvent } from "./realtime.js";

// One call. Same surface as RealtimeConnection: an `event` CustomEvent per server
// event, `close` ({code, reason}) when it ends; `remoteStream` is the assistant's audio.
export class RealtimeCall extends EventTarget {
  constructor() {
    super();
    this.pc = null;
    this.channel = null;
    this.callId = null;
    this.remoteStream = null;
    this.closed = false;
  }

  async open({ base, key, stream }) {
    const pc = new RTCPeerConnection();
    this.pc = pc;
    const remote = new Promise((resolve) => {
      pc.ontrack = (e) => resolve(e.streams[0] ?? new MediaStream([e.track]));
    });
    for (const track of stream.getAudioTracks()) pc.addTrack(track, stream);
    const channel = pc.createDataChannel("oai-events");
    this.channel = channel;
    channel.onmessage = ({ data }) => dispatchServerEvent(this, data);
    const opened = new Promise((resolve, reject) => {
      channel.onopen = resolve;
      channel.onclose = () => {
        reject(new Error("the call ended before it began"));
        this.ended(1000, "");
      };
    });
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === "failed") this.ended(1006, "the connection failed");
    };
    await pc.setLocalDescription(await pc.createOffer());
    const response = await fetch(new URL("/v1/realtime/calls", base), {
      method: "POST",
      body: pc.localDescription.sdp,
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/sdp" },
    });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      const message = body?.error?.message ?? `HTTP ${response.status}`;
      pc.close();
      if (response.status === 401 || response.status === 403) throw new AuthError(message);
      throw new Error(message);
    }
    this.callId = response.headers.get("Location")?.split("/").pop() ?? null;
    await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
    this.remoteStream = await remote;
    await opened;
    return "webrtc";
  }

  ended(code, reason) {
    if (this.closed) return;
    this.closed = true;
    this.dispatchEvent(new CustomEvent("close", { detail: { code, reason } }));
  }

  get isOpen() {
    return this.channel?.readyState === "open";
  }

  send(event) {
    if (this.isOpen) this.channel.send(JSON.stringify(event));
  }

  close() {
    this.closed = true; // hung up here: no close event
    this.channel?.close();
    this.pc?.close();
  }
}
