// Parley's browser client: the page's controller.
//
// Flow: Connect -> microphone and audio worklets -> an ephemeral key from
// POST /v1/realtime/client_secrets (carrying the session settings) -> a WebRTC call
// (the default) or the WebSocket (the fallback setting).
// WebRTC: the microphone is the call's track and the assistant plays from the call's
// incoming track; the server paces that audio, stops it on barge-in and truncates the
// item itself (output_audio_buffer.* events say what it plays).
// WebSocket: the key goes as a subprotocol, microphone audio streams as
// input_audio_buffer.append, assistant audio plays through a jitter buffer, and
// speech during playback stops it at once and truncates the item to what was heard;
// a dropped connection is taken back (Parley's resume extension, realtime.js).
// Either way the server finds turns (server VAD) or the user holds the talk button.

import { base64ToPcm, Microphone, openAudio, pcmToBase64, Player, RATE } from "./audio.js";
import { AuthError, createClientSecret, RealtimeConnection } from "./realtime.js";
import { RealtimeCall } from "./webrtc.js";

const $ = (id) => document.getElementById(id);
const BASE = window.location.origin;
const SETTINGS_KEY = "parley.settings";
const MAX_QUEUED_CHUNKS = 50; // 1 s of audio captured before the session is ready
const LOG_LIMIT = 200;
const QUIET_EVENTS = new Set([
  "input_audio_buffer.append",
  "response.output_audio.delta",
  "response.output_audio_transcript.delta",
  "response.output_text.delta",
]);

const app = {
  phase: "disconnected", // disconnected | connecting | connected
  attempt: 0, // bumped by each connect and teardown: a stale connect gives up
  context: null,
  mic: null,
  player: null,
  conn: null,
  transport: "webrtc", // of the current connection: webrtc | websocket
  outputNode: null, // where the assistant's audio can be tapped (the tests' analyser)
  audioEl: null, // WebRTC: plays the call's incoming track
  serverPlaying: null, // WebRTC: the response whose audio the server is playing
  responseItems: new Map(), // response id -> assistant item id
  ready: false, // session.created seen
  reconnecting: false, // WebSocket: the connection dropped, the session is being taken back
  queued: [],
  sentSamples: 0,
  sentLog: [], // [{end, at}]: when each sent chunk was captured, on the input clock
  userSpeaking: false,
  pttHeld: false,
  pttSamples: 0,
  awaiting: false, // a turn ended and its answer has not finished
  responseActive: false,
  assistantSpoke: false,
  lastTurn: null, // {speechEndAt, stoppedAt}
  userTurns: new Map(), // item id -> element
  answers: new Map(), // item id -> {el, text, turn, firstDeltaAt, latency}
  dropAudio: new Set(), // items cut by a barge-in: late deltas are not played
  latencies: [],
};

// --- settings ------------------------------------------------------------------------

function readSettings() {
  return {
    transport: document.querySelector("input[name=transport]:checked").value,
    mode: document.querySelector("input[name=mode]:checked").value,
    threshold: Number($("vad-threshold").value),
    silenceMs: Number($("vad-silence").value),
    voice: $("voice").value,
    instructions: $("instructions").value.trim(),
  };
}

function turnDetection(s) {
  if (s.mode === "ptt") return null;
  return {
    type: "server_vad",
    threshold: s.threshold,
    prefix_padding_ms: 300,
    silence_duration_ms: s.silenceMs,
    create_response: true,
    interrupt_response: true,
  };
}

function sessionConfig(s) {
  const session = {
    type: "realtime",
    output_modalities: ["audio"],
    audio: {
      input: {
        format: { type: "audio/pcm", rate: RATE },
        // User turns in the transcript come from input transcription events.
        transcription: { model: "whisper-1" },
        turn_detection: turnDetection(s),
      },
      output: { format: { type: "audio/pcm", rate: RATE }, voice: s.voice },
    },
  };
  if (s.instructions) session.instructions = s.instructions;
  return session;
}

function restoreSettings() {
  let saved = {};
  try {
    saved = JSON.parse(localStorage.getItem(SETTINGS_KEY) ?? "{}");
  } catch {
    saved = {};
  }
  if (saved.transport) {
    document.querySelector(`input[name=transport][value=${saved.transport}]`).checked = true;
  }
  if (saved.mode) document.querySelector(`input[name=mode][value=${saved.mode}]`).checked = true;
  if (saved.threshold) $("vad-threshold").value = saved.threshold;
  if (saved.silenceMs) $("vad-silence").value = saved.silenceMs;
  if (saved.voice) $("voice").value = saved.voice;
  if (saved.instructions) $("instructions").value = saved.instructions;
}

function onSettingsChanged(what) {
  const s = readSettings();
  localStorage.setItem(SETTINGS_KEY, JSON.stringify(s));
  $("vad-threshold-value").textContent = s.threshold.toFixed(2);
  $("vad-settings").hidden = s.mode === "ptt";
  $("talk").hidden = s.mode !== "ptt";
  if (!app.ready) return; // applied at the next connect, through the client secret
  if (what === "turns") {
    setMicLive(s.mode !== "ptt");
    send({ type: "session.update", session: { type: "realtime", audio: { input: { turn_detection: turnDetection(s) } } } });
    if (s.mode === "ptt") send({ type: "input_audio_buffer.clear" });
  } else if (what === "voice") {
    send({ type: "session.update", session: { type: "realtime", audio: { output: { voice: s.voice } } } });
  } else if (what === "instructions") {
    send({ type: "session.update", session: { type: "realtime", instructions: s.instructions } });
  }
}

// --- connection ----------------------------------------------------------------------

async function connect() {
  app.phase = "connecting";
  const attempt = ++app.attempt;
  const cancelled = () => app.attempt !== attempt || app.phase !== "connecting";
  setNotice("");
  updateState();
  $("connect").textContent = "Cancel";
  const settings = readSettings();
  let context = null;
  let mic = null;
  try {
    context = await openAudio();
    if (cancelled()) throw new Cancelled();
    const webrtc = settings.transport === "webrtc";
    // Over WebRTC the server plays the audio on the call's track: no jitter buffer here.
    const player = webrtc ? null : new Player(context);
    player?.addEventListener("started", (e) => onPlaybackStarted(e.detail.item));
    player?.addEventListener("finished", (e) => onPlaybackFinished(e.detail));
    player?.addEventListener("state", (e) => {
      $("stat-underruns").textContent = e.detail.underruns;
      document.body.dataset.underruns = e.detail.underruns;
      updateState();
    });
    // The worklet meters the level; over WebRTC the track itself carries the audio.
    mic = new Microphone(context, { onChunk, onLevel });
    await mic.start();
    if (cancelled()) throw new Cancelled();
    Object.assign(app, { context, player, mic, transport: settings.transport });
    app.outputNode = player?.node ?? null;
    setMicLive(settings.mode !== "ptt");
    const secret = await createClientSecret({
      base: BASE,
      apiKey: $("api-key").value.trim(),
      session: sessionConfig(settings),
    });
    if (cancelled()) throw new Cancelled();
    const conn = webrtc ? new RealtimeCall() : new RealtimeConnection();
    app.conn = conn;
    conn.addEventListener("event", (e) => onServerEvent(e.detail));
    conn.addEventListener("close", (e) => onClosed(e.detail));
    conn.addEventListener("reconnecting", () => setReconnecting(true));
    conn.addEventListener("reconnected", () => setReconnecting(false));
    const protocol = await conn.open({ base: BASE, key: secret.value, stream: mic.stream });
    if (cancelled()) throw new Cancelled();
    if (webrtc) playCall(conn.remoteStream);
    document.body.dataset.protocol = protocol;
    app.phase = "connected";
    $("connect").textContent = "Disconnect";
    updateState();
  } catch (err) {
    if (err instanceof Cancelled || app.attempt !== attempt) {
      if (app.context !== context) {
        mic?.stop(); // set up by an attempt cancelled meanwhile
        context?.close();
      }
      return;
    }
    teardown();
    if (err instanceof AuthError) {
      setNotice(`This server needs an API key. ${err.message}`, "error");
      $("api-key").focus();
    } else if (err?.name === "NotAllowedError") {
      setNotice("Microphone access was denied.", "error");
    } else {
      setNotice(err?.message ?? String(err), "error");
    }
  }
}

class Cancelled extends Error {}

// WebRTC: the assistant's audio plays from the call's track through an <audio>
// element (browsers cancel echo for it), and is tapped for the level, unplayed.
function playCall(stream) {
  const el = document.createElement("audio");
  el.autoplay = true;
  el.srcObject = stream;
  el.hidden = true;
  document.body.append(el);
  app.audioEl = el;
  app.outputNode = app.context.createMediaStreamSource(stream);
}

// The microphone's track is live, or muted (push to talk over WebRTC, not held).
function setMicLive(live) {
  if (app.transport !== "webrtc") return;
  for (const track of app.mic?.stream?.getAudioTracks() ?? []) track.enabled = live;
}

function teardown() {
  app.attempt++; // a connect still in flight gives up
  app.mic?.stop();
  app.player?.close();
  app.context?.close();
  app.audioEl?.remove();
  const conn = app.conn;
  Object.assign(app, {
    phase: "disconnected",
    context: null,
    mic: null,
    player: null,
    conn: null,
    outputNode: null,
    audioEl: null,
    serverPlaying: null,
    ready: false,
    reconnecting: false,
    queued: [],
    userSpeaking: false,
    pttHeld: false,
    awaiting: false,
    responseActive: false,
  });
  conn?.close();
  $("connect").textContent = "Connect";
  $("voice").disabled = false;
  setMeter(0, 0);
  updateState();
}

function onClosed({ code, reason }) {
  if (app.phase === "disconnected") return;
  teardown();
  if (code !== 1000) setNotice(`Disconnected (${code}${reason ? `: ${reason}` : ""}).`, "error");
}

// Meanwhile the microphone keeps running and its audio is dropped (sendAudio), and
// the answer in flight plays on from the jitter buffer: what it missed comes with the
// session when it is back.
function setReconnecting(reconnecting) {
  app.reconnecting = reconnecting;
  updateState();
}

function send(event) {
  app.conn?.send(event);
  if (!QUIET_EVENTS.has(event.type)) log("→", event);
}

// --- microphone ----------------------------------------------------------------------

function onChunk(pcm) {
  const at = performance.now();
  if (!app.ready) {
    app.queued.push({ pcm, at });
    if (app.queued.length > MAX_QUEUED_CHUNKS) app.queued.shift();
    return;
  }
  sendAudio(pcm, at);
}

function sendAudio(pcm, at) {
  if (app.transport === "webrtc") return; // the call's track carries the microphone
  // Reconnecting: dropped, not queued (the server hears a gap rather than late audio),
  // and not counted, so the input clock stays the server's.
  if (!app.conn?.isOpen) return;
  if (readSettings().mode === "ptt") {
    if (!app.pttHeld) return;
    app.pttSamples += pcm.length;
  }
  send({ type: "input_audio_buffer.append", audio: pcmToBase64(pcm) });
  app.sentSamples += pcm.length;
  app.sentLog.push({ end: app.sentSamples, at });
  if (app.sentLog.length > 6000) app.sentLog.splice(0, 3000); // keep about a minute
}

// When the sample at `sample` on the input audio clock was captured (performance.now()).
function captureTime(sample) {
  const log = app.sentLog;
  let lo = 0;
  let hi = log.length - 1;
  if (hi < 0 || sample > log[hi].end || sample < log[0].end - 2 * RATE) return null;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (log[mid].end >= sample) hi = mid;
    else lo = mid + 1;
  }
  return log[lo].at - ((log[lo].end - sample) * 1000) / RATE;
}

function onLevel({ rms, peak }) {
  setMeter(rms, peak);
}

function setMeter(rms, peak) {
  const db = (v) => (v > 0 ? 20 * Math.log10(v) : -Infinity);
  const pct = (v) => Math.max(0, Math.min(100, ((db(v) + 60) / 60) * 100));
  $("meter-fill").style.width = `${pct(rms)}%`;
  $("meter-peak").style.left = `${pct(peak)}%`;
  const level = db(rms);
  $("meter-db").textContent = level > -90 ? `${level.toFixed(0)} dBFS` : "silent";
}

// --- push to talk --------------------------------------------------------------------

function pttDown() {
  // Not while reconnecting: its commit would be dropped (realtime.js).
  if (!app.ready || app.reconnecting || app.pttHeld || readSettings().mode !== "ptt") return;
  if (app.responseActive) send({ type: "response.cancel" });
  if (app.player?.active) bargeIn();
  if (app.serverPlaying) send({ type: "output_audio_buffer.clear" }); // the server's playout
  send({ type: "input_audio_buffer.clear" });
  app.pttHeld = true;
  app.pttSamples = 0;
  app.pttDownAt = performance.now();
  setMicLive(true);
  $("talk").classList.add("held");
  updateState();
}

function pttUp() {
  if (!app.pttHeld) return;
  app.pttHeld = false;
  setMicLive(false);
  $("talk").classList.remove("held");
  // Over WebRTC the track's audio is counted by the server, not here: hold time.
  const held = app.transport === "webrtc" ? performance.now() - app.pttDownAt >= 100 : false;
  if (held || app.pttSamples >= RATE / 10) {
    const now = performance.now();
    app.lastTurn = { speechEndAt: now, stoppedAt: now };
    app.awaiting = true;
    send({ type: "input_audio_buffer.commit" });
    send({ type: "response.create" });
  } else {
    send({ type: "input_audio_buffer.clear" });
  }
  updateState();
}

// --- server events -------------------------------------------------------------------

function onServerEvent(ev) {
  if (!QUIET_EVENTS.has(ev.type)) log("←", ev);
  switch (ev.type) {
    case "session.created":
      app.ready = true;
      for (const { pcm, at } of app.queued) sendAudio(pcm, at);
      app.queued = [];
      break;
    case "input_audio_buffer.speech_started":
      app.userSpeaking = true;
      userTurn(ev.item_id);
      if (app.player?.active) bargeIn(); // over WebRTC the server stops its playout
      break;
    case "input_audio_buffer.speech_stopped": {
      app.userSpeaking = false;
      const now = performance.now();
      const silenceMs = readSettings().silenceMs;
      const endMs = ev.audio_end_ms - silenceMs; // the speech ended a silence window earlier
      const at = captureTime(Math.round((endMs * RATE) / 1000));
      app.lastTurn = { speechEndAt: at ?? now - silenceMs, stoppedAt: now };
      app.awaiting = true;
      break;
    }
    case "input_audio_buffer.committed":
      userTurn(ev.item_id);
      break;
    case "conversation.item.input_audio_transcription.delta": {
      const el = userTurn(ev.item_id);
      const text = el.querySelector(".text");
      if (el.classList.contains("pending")) text.textContent = "";
      el.classList.remove("pending");
      text.textContent += ev.delta;
      break;
    }
    case "conversation.item.input_audio_transcription.completed": {
      const el = userTurn(ev.item_id);
      el.classList.remove("pending");
      el.querySelector(".text").textContent = ev.transcript.trim() || "(silence)";
      break;
    }
    case "conversation.item.input_audio_transcription.failed": {
      const el = userTurn(ev.item_id);
      el.classList.remove("pending");
      el.querySelector(".text").textContent = "(not transcribed)";
      break;
    }
    case "response.created":
      app.responseActive = true;
      break;
    case "response.output_item.added":
      if (ev.item?.type === "message" && ev.item.role === "assistant") {
        answer(ev.item.id);
        app.responseItems.set(ev.response_id, ev.item.id);
      }
      break;
    case "output_audio_buffer.started": {
      app.serverPlaying = ev.response_id;
      const item = app.responseItems.get(ev.response_id);
      if (item) {
        answer(item).firstDeltaAt ??= performance.now();
        app.assistantSpoke = true;
        $("voice").disabled = true;
        onPlaybackStarted(item);
      }
      break;
    }
    case "output_audio_buffer.stopped":
    case "output_audio_buffer.cleared": {
      if (app.serverPlaying === ev.response_id) app.serverPlaying = null;
      const a = app.answers.get(app.responseItems.get(ev.response_id));
      if (a && ev.type === "output_audio_buffer.stopped") a.el.dataset.played = "whole";
      app.responseItems.delete(ev.response_id);
      break;
    }
    case "response.output_audio.delta": {
      if (app.dropAudio.has(ev.item_id) || !app.player) break;
      const a = answer(ev.item_id);
      a.firstDeltaAt ??= performance.now();
      app.assistantSpoke = true;
      $("voice").disabled = true; // the server refuses a new voice once it has spoken
      app.player.push(ev.item_id, base64ToPcm(ev.delta));
      break;
    }
    case "response.output_audio.done":
      app.player?.end(ev.item_id);
      break;
    case "response.output_audio_transcript.delta":
    case "response.output_text.delta":
      appendAnswer(ev.item_id, ev.delta);
      break;
    case "response.output_audio_transcript.done":
      setAnswer(ev.item_id, ev.transcript);
      break;
    case "response.output_text.done":
      setAnswer(ev.item_id, ev.text);
      break;
    case "response.done": {
      app.responseActive = false;
      app.awaiting = false;
      const status = ev.response?.status;
      for (const item of ev.response?.output ?? []) {
        app.player?.end(item.id);
        if (status !== "completed" && app.answers.has(item.id)) {
          app.answers.get(item.id).el.dataset.status = status;
        }
      }
      break;
    }
    case "conversation.item.truncated": {
      const a = app.answers.get(ev.item_id);
      if (a) {
        a.el.classList.add("cut");
        a.el.dataset.truncatedMs = ev.audio_end_ms;
        if (app.transport === "webrtc") a.el.dataset.playedMs = ev.audio_end_ms; // the server's count
        note(a, `interrupted at ${(ev.audio_end_ms / 1000).toFixed(1)} s`);
      }
      break;
    }
    case "error":
      setNotice(ev.error?.message ?? "error", "error");
      break;
    default:
      break;
  }
  updateState();
}

// Speech during playback: stop the audio now, then tell the server how much of each
// cut item was heard, so the conversation holds only what the user heard.
async function bargeIn() {
  const player = app.player;
  for (const item of player.pending) app.dropAudio.add(item);
  const cut = await player.flush();
  for (const { item, playedMs } of cut) {
    if (playedMs === null) continue; // the worklet did not answer: nothing is playing
    const ms = Math.floor(playedMs);
    send({ type: "conversation.item.truncate", item_id: item, content_index: 0, audio_end_ms: ms });
    const a = app.answers.get(item);
    if (a) a.el.dataset.playedMs = ms;
  }
  updateState();
}

function onPlaybackStarted(item) {
  const a = app.answers.get(item);
  if (!a || a.latency != null || !a.turn) return;
  const heard = performance.now() + (app.context?.outputLatency ?? 0) * 1000;
  const { speechEndAt, stoppedAt } = a.turn;
  a.latency = Math.max(0, Math.round(heard - speechEndAt));
  a.el.dataset.latencyMs = a.latency;
  const chip = note(a, `latency ${a.latency} ms`, "latency");
  chip.title =
    `end of speech → first audio: ${a.latency} ms` +
    `\n  turn detection: ${Math.round(stoppedAt - speechEndAt)} ms` +
    `\n  server to first audio: ${Math.round((a.firstDeltaAt ?? heard) - stoppedAt)} ms` +
    `\n  jitter buffer and output: ${Math.round(heard - (a.firstDeltaAt ?? heard))} ms`;
  app.latencies.push(a.latency);
  const sorted = [...app.latencies].sort((x, y) => x - y);
  const mid = sorted.length / 2;
  const median = Math.round(
    sorted.length % 2 ? sorted[Math.floor(mid)] : (sorted[mid - 1] + sorted[mid]) / 2,
  );
  $("stat-turns").textContent = app.latencies.length;
  $("stat-last").textContent = `${a.latency} ms`;
  $("stat-median").textContent = `${median} ms`;
}

function onPlaybackFinished({ item, playedMs }) {
  const a = app.answers.get(item);
  if (a) a.el.dataset.playedMs = Math.round(playedMs);
  updateState();
}

// --- transcript ----------------------------------------------------------------------

function bubble(role, id) {
  $("transcript").querySelector(".empty")?.remove();
  const el = document.createElement("div");
  el.className = `turn ${role}`;
  el.dataset.itemId = id;
  el.innerHTML = `<div class="who"></div><div class="text"></div><div class="meta"></div>`;
  el.querySelector(".who").textContent = role === "user" ? "You" : "Parley";
  $("transcript").append(el);
  scrollDown();
  return el;
}

function userTurn(id) {
  let el = app.userTurns.get(id);
  if (!el) {
    el = bubble("user", id);
    el.classList.add("pending");
    el.querySelector(".text").textContent = "…";
    app.userTurns.set(id, el);
  }
  return el;
}

function answer(id) {
  let a = app.answers.get(id);
  if (!a) {
    a = { el: bubble("assistant", id), text: "", turn: app.lastTurn, firstDeltaAt: null, latency: null };
    app.lastTurn = null;
    app.answers.set(id, a);
  }
  return a;
}

function appendAnswer(id, delta) {
  const a = answer(id);
  a.text += delta;
  a.el.querySelector(".text").textContent = a.text;
  scrollDown();
}

function setAnswer(id, text) {
  const a = answer(id);
  a.text = text;
  a.el.querySelector(".text").textContent = text;
}

function note(a, text, kind = "") {
  const span = document.createElement("span");
  span.className = `chip ${kind}`;
  span.textContent = text;
  a.el.querySelector(".meta").append(span);
  return span;
}

function scrollDown() {
  const t = $("transcript");
  t.scrollTop = t.scrollHeight;
}

// --- status, notices, log ------------------------------------------------------------

function updateState() {
  let state = app.phase;
  if (app.phase === "connected") {
    if (!app.ready) state = "connecting";
    else if (app.reconnecting) state = "reconnecting";
    else if (app.userSpeaking || app.pttHeld) state = "user speaking";
    else if (app.player?.active || app.serverPlaying) state = "assistant speaking";
    else if (app.awaiting) state = "thinking";
    else state = "listening";
  }
  const slug = state.replace(" ", "-");
  if (document.body.dataset.state !== slug) {
    document.body.dataset.state = slug;
    $("state").textContent = state === "reconnecting" ? "reconnecting…" : state;
  }
}

function setNotice(text, kind = "") {
  const el = $("notice");
  el.textContent = text;
  el.className = `notice ${kind}`;
  el.hidden = !text;
}

function log(direction, event) {
  const li = document.createElement("li");
  const detail = { ...event };
  delete detail.type;
  delete detail.event_id;
  const summary = JSON.stringify(detail);
  li.innerHTML = `<span class="dir"></span> <b></b> <code></code>`;
  li.querySelector(".dir").textContent = direction;
  li.querySelector("b").textContent = event.type;
  li.querySelector("code").textContent = summary.length > 160 ? `${summary.slice(0, 160)}…` : summary;
  const list = $("log");
  list.append(li);
  while (list.children.length > LOG_LIMIT) list.firstChild.remove();
}

// --- wiring --------------------------------------------------------------------------

function init() {
  window.parley = app; // a handle for the browser console (and the tests)
  restoreSettings();
  onSettingsChanged("init");
  // A page that goes away ends its session (1000): a resumable one would otherwise
  // hold its seat for the resume window, and a reloaded page cannot take it back.
  window.addEventListener("pagehide", () => app.conn?.close());
  $("connection").addEventListener("submit", (e) => {
    e.preventDefault(); // Enter in the key field connects
    if (app.phase === "disconnected") connect();
    else teardown();
  });
  for (const radio of document.querySelectorAll("input[name=transport]")) {
    radio.addEventListener("change", () => onSettingsChanged("transport"));
  }
  for (const radio of document.querySelectorAll("input[name=mode]")) {
    radio.addEventListener("change", () => onSettingsChanged("turns"));
  }
  $("vad-threshold").addEventListener("input", () => {
    $("vad-threshold-value").textContent = Number($("vad-threshold").value).toFixed(2);
  });
  $("vad-threshold").addEventListener("change", () => onSettingsChanged("turns"));
  $("vad-silence").addEventListener("change", () => onSettingsChanged("turns"));
  $("voice").addEventListener("change", () => onSettingsChanged("voice"));
  $("instructions").addEventListener("change", () => onSettingsChanged("instructions"));
  const talk = $("talk");
  talk.addEventListener("pointerdown", (e) => {
    talk.setPointerCapture(e.pointerId);
    pttDown();
  });
  talk.addEventListener("pointerup", pttUp);
  talk.addEventListener("pointercancel", pttUp);
  const typing = (e) => e.target.closest?.("input:not([type=radio]), textarea, select");
  window.addEventListener("keydown", (e) => {
    if (e.code === "Space" && !e.repeat && !typing(e) && readSettings().mode === "ptt") {
      e.preventDefault();
      pttDown();
    }
  });
  window.addEventListener("keyup", (e) => {
    if (e.code === "Space" && app.pttHeld) {
      e.preventDefault();
      pttUp();
    }
  });
}

init();
