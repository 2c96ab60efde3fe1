// Assistant audio playback: a jitter buffer of 24 kHz samples, resampled to the
// context's rate as it plays.
//
// Messages in:
//   {type: "push", item, pcm: Int16Array}  audio of an assistant item, in order
//   {type: "end", item}                    no more audio for that item
//   {type: "flush", id}                    stop now (a 4 ms fade), drop what is queued
// Messages out:
//   {type: "started", item}                the item's first sample reached the output
//   {type: "finished", item, playedMs}     the item played to its end
//   {type: "flushed", id, items: [{item, playedMs}]}  what each cut item had played
//   {type: "state", active, bufferedMs, underruns}
//
// Playback of an item starts once `prebufferMs` is queued (or the item's audio has
// ended). If the queue runs dry mid-item, the output decays to silence instead of
// stepping to it, the prebuffer grows (up to 300 ms) and playback resumes with a
// short fade-in: no clicks at chunk boundaries, and no gap unless the network
// really starves the buffer.

import { PHASES, SincTable } from "./resampler.js";

const MAX_PREBUFFER_MS = 300;

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { sourceRate = 24000, prebufferMs = 60 } = options.processorOptions ?? {};
    this.sourceRate = sourceRate;
    this.table = new SincTable(sourceRate, sampleRate);
    this.prebuffer = Math.round((sourceRate * prebufferMs) / 1000);
    this.ring = new Float32Array(1 << 16);
    this.mask = this.ring.length - 1;
    this.end = 0; // absolute index one past the last queued sample
    this.floor = 0; // samples below this read as silence (flushed or played out)
    this.pos = 0; // absolute source position of the next output sample
    this.segments = []; // {item, start, end, ended, started}, unfinished, in order
    this.mode = "idle"; // idle | playing | starved | flushing
    this.gain = 0;
    this.target = 0;
    this.ramp = 1 / (0.004 * sampleRate);
    this.last = 0;
    this.flushId = null;
    this.underruns = 0;
    this.sinceState = 0;
    this.wasActive = false;
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  ms(samples) {
    return (samples * 1000) / this.sourceRate;
  }

  onMessage(msg) {
    if (msg.type === "push") {
      this.write(msg.item, msg.pcm);
    } else if (msg.type === "end") {
      for (const seg of this.segments) if (seg.item === msg.item) seg.ended = true;
    } else if (msg.type === "flush") {
      if (this.mode === "playing") {
        this.mode = "flushing";
        this.target = 0;
        this.flushId = msg.id;
      } else {
        this.finishFlush(msg.id);
      }
    }
  }

  write(item, pcm) {
    const lo = Math.max(this.floor, Math.floor(this.pos) - this.table.half + 1);
    const need = this.end + pcm.length - lo;
    if (need > this.ring.length) {
      let size = this.ring.length;
      while (size < need) size *= 2;
      const bigger = new Float32Array(size);
      for (let j = lo; j < this.end; j++) bigger[j & (size - 1)] = this.ring[j & this.mask];
      this.ring = bigger;
      this.mask = size - 1;
    }
    for (let k = 0; k < pcm.length; k++) this.ring[(this.end + k) & this.mask] = pcm[k] / 32768;
    const last = this.segments[this.segments.length - 1];
    if (last && last.item === item && !last.ended) {
      last.end += pcm.length;
    } else {
      this.segments.push({
        item,
        start: this.end,
        end: this.end + pcm.length,
        ended: false,
        started: false,
      });
    }
    this.end += pcm.length;
  }

  moreExpected() {
    const last = this.segments[this.segments.length - 1];
    return last !== undefined && !last.ended;
  }

  finishFlush(id) {
    const items = this.segments.map((seg) => ({
      item: seg.item,
      playedMs: this.ms(Math.max(0, Math.min(this.pos, seg.end) - seg.start)),
    }));
    this.segments = [];
    this.pos = this.end;
    this.floor = this.end;
    this.mode = "idle";
    this.gain = 0;
    this.target = 0;
    this.flushId = null;
    this.port.postMessage({ type: "flushed", id, items });
    this.postState();
  }

  postState() {
    const active = this.segments.length > 0;
    this.wasActive = active;
    this.sinceState = 0;
    this.port.postMessage({
      type: "state",
      active,
      bufferedMs: this.ms(Math.max(0, this.end - this.pos)),
      underruns: this.underruns,
    });
  }

  process(_inputs, outputs) {
    const channels = outputs[0];
    const out = channels[0];
    const { half, taps, step, coeffs } = this.table;
    if (this.mode === "idle" || this.mode === "starved") {
      const buffered = this.end - this.pos;
      if (buffered > 0 && (buffered >= this.prebuffer || !this.moreExpected())) {
        this.mode = "playing";
        this.target = 1;
      }
    }
    for (let n = 0; n < out.length; n++) {
      let rendered = false;
      if (this.mode === "playing" || this.mode === "flushing") {
        const i = Math.floor(this.pos);
        if (i + half >= this.end && this.moreExpected() && this.mode === "playing") {
          this.mode = "starved";
          this.underruns++;
          this.gain = 0;
          this.prebuffer = Math.min(
            Math.round(this.prebuffer * 1.5),
            (this.sourceRate * MAX_PREBUFFER_MS) / 1000,
          );
        } else if (i >= this.end) {
          this.mode = "idle"; // played out
          this.pos = this.end;
          this.floor = this.end;
          this.gain = 0;
        } else {
          const row = Math.round((this.pos - i) * PHASES) * taps;
          const base = i - half + 1;
          let acc = 0;
          for (let k = 0; k < taps; k++) {
            const j = base + k;
            if (j >= this.floor && j < this.end) acc += this.ring[j & this.mask] * coeffs[row + k];
          }
          if (this.gain < this.target) this.gain = Math.min(this.target, this.gain + this.ramp);
          else if (this.gain > this.target) this.gain = Math.max(this.target, this.gain - this.ramp);
          out[n] = acc * this.gain;
          this.last = out[n];
          this.pos += step;
          rendered = true;
          if (this.mode === "flushing" && this.gain === 0) this.finishFlush(this.flushId);
        }
      }
      if (!rendered) {
        this.last *= 0.99; // decay, never a step, to silence
        out[n] = this.last;
      }
    }
    for (let c = 1; c < channels.length; c++) channels[c].set(out);
    for (const seg of this.segments) {
      if (!seg.started && this.pos > seg.start) {
        seg.started = true;
        this.port.postMessage({ type: "started", item: seg.item });
      }
    }
    while (this.segments.length && this.segments[0].ended && this.pos >= this.segments[0].end) {
      const seg = this.segments.shift();
      if (!seg.started) this.port.postMessage({ type: "started", item: seg.item });
      this.port.postMessage({
        type: "finished",
        item: seg.item,
        playedMs: this.ms(seg.end - seg.start),
      });
    }
    this.sinceState += out.length;
    const active = this.segments.length > 0;
    if (active !== this.wasActive || (active && this.sinceState >= sampleRate / 10)) {
      this.postState();
    }
    return true;
  }
}

registerProcessor("parley-playback", PlaybackProcessor);
