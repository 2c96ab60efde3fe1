// The page's audio: microphone capture and assistant playback, each an AudioWorklet
// in one AudioContext running at the device's rate. Both sides resample to and from
// the protocol's 24 kHz pcm16 themselves (resampler.js), so this works whatever rate
// the browser picks.

export const RATE = 24000; // the protocol's default: audio/pcm, 24 kHz, mono, 16-bit
export const CHUNK_MS = 20;

const here = (name) => new URL(name, import.meta.url).href;

export async function openAudio() {
  const context = new AudioContext({ latencyHint: "interactive" });
  await context.audioWorklet.addModule(here("capture-worklet.js"));
  await context.audioWorklet.addModule(here("playback-worklet.js"));
  if (context.state === "suspended") await context.resume();
  return context;
}

// Capture: getUserMedia with the browser's echo cancellation, noise suppression and
// gain control (needed with loudspeakers: the assistant must not hear itself), then
// the capture worklet. `onChunk(Int16Array)` gets 20 ms of 24 kHz audio at a time;
// `onLevel({rms, peak})` about 20 times a second.
export class Microphone {
  constructor(context, { onChunk, onLevel }) {
    this.context = context;
    this.onChunk = onChunk;
    this.onLevel = onLevel;
    this.stream = null;
    this.node = null;
  }

  async start() {
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: {
        channelCount: 1,
        echoCancellation: true,
        noiseSuppression: true,
        autoGainControl: true,
      },
    });
    const source = this.context.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(this.context, "parley-capture", {
      numberOfInputs: 1,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { targetRate: RATE, chunkMs: CHUNK_MS },
    });
    this.node.port.onmessage = ({ data }) => {
      if (data.type === "chunk") this.onChunk(data.pcm);
      else if (data.type === "level") this.onLevel(data);
    };
    source.connect(this.node);
    // The node writes silence; connected so that every browser keeps pulling it.
    this.node.connect(this.context.destination);
  }

  stop() {
    this.node?.disconnect();
    for (const track of this.stream?.getTracks() ?? []) track.stop();
    this.node = null;
    this.stream = null;
  }
}

// Playback: a jitter buffer in the playback worklet. `push(item, pcm)` queues an
// assistant item's audio; `end(item)` says it is complete; `flush()` stops at once
// and resolves with what each cut item had played ([{item, playedMs}]).
export class Player extends EventTarget {
  constructor(context) {
    super();
    this.node = new AudioWorkletNode(context, "parley-playback", {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { sourceRate: RATE, prebufferMs: 60 },
    });
    this.node.connect(context.destination);
    this.pending = new Set(); // items queued and not yet played out or flushed
    this.underruns = 0;
    this.flushes = new Map();
    this.nextFlush = 1;
    this.node.port.onmessage = ({ data }) => this.onMessage(data);
  }

  get active() {
    return this.pending.size > 0;
  }

  push(item, pcm) {
    this.pending.add(item);
    this.node.port.postMessage({ type: "push", item, pcm }, [pcm.buffer]);
  }

  end(item) {
    this.node.port.postMessage({ type: "end", item });
  }

  flush(timeoutMs = 250) {
    const id = this.nextFlush++;
    const cut = [...this.pending];
    this.pending.clear();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.flushes.delete(id);
        resolve(cut.map((item) => ({ item, playedMs: null }))); // the worklet did not answer
      }, timeoutMs);
      this.flushes.set(id, (items) => {
        clearTimeout(timer);
        resolve(items);
      });
      this.node.port.postMessage({ type: "flush", id });
    });
  }

  onMessage(data) {
    if (data.type === "flushed") {
      this.flushes.get(data.id)?.(data.items);
      this.flushes.delete(data.id);
    } else if (data.type === "finished") {
      this.pending.delete(data.item);
    } else if (data.type === "state") {
      this.underruns = data.underruns;
    }
    this.dispatchEvent(new CustomEvent(data.type, { detail: data }));
  }

  close() {
    this.node.disconnect();
  }
}

export function pcmToBase64(pcm) {
  const bytes = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

export function base64ToPcm(b64) {
  const binary = atob(b64);
  const bytes = new Uint8Array(binary.length & ~1); // whole 16-bit samples only
  for (let i = 0; i < bytes.length; i++) bytes[i] = binary.charCodeAt(i);
  return new Int16Array(bytes.buffer);
}
