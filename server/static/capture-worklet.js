// Microphone capture: the context's rate in, 24 kHz pcm16 chunks out.
//
// Posts {type: "chunk", pcm: Int16Array} every `chunkMs` of output audio and
// {type: "level", rms, peak} (of the raw input, 0..1) about every 50 ms.

import { StreamResampler } from "./resampler.js";

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetRate = 24000, chunkMs = 20 } = options.processorOptions ?? {};
    this.resampler = new StreamResampler(sampleRate, targetRate);
    this.chunk = new Int16Array(Math.round((targetRate * chunkMs) / 1000));
    this.fill = 0;
    this.mix = new Float32Array(128);
    this.levelEvery = Math.round(sampleRate * 0.05);
    this.levelCount = 0;
    this.sumSquares = 0;
    this.peak = 0;
  }

  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true;
    let mono = channels[0];
    if (channels.length > 1) {
      if (this.mix.length !== mono.length) this.mix = new Float32Array(mono.length);
      this.mix.fill(0);
      for (const channel of channels) {
        for (let i = 0; i < channel.length; i++) this.mix[i] += channel[i] / channels.length;
      }
      mono = this.mix;
    }
    for (let i = 0; i < mono.length; i++) {
      const v = mono[i];
      this.sumSquares += v * v;
      const a = Math.abs(v);
      if (a > this.peak) this.peak = a;
    }
    this.levelCount += mono.length;
    if (this.levelCount >= this.levelEvery) {
      const rms = Math.sqrt(this.sumSquares / this.levelCount);
      this.port.postMessage({ type: "level", rms, peak: this.peak });
      this.levelCount = 0;
      this.sumSquares = 0;
      this.peak = 0;
    }
    const out = this.resampler.process(mono);
    for (let i = 0; i < out.length; i++) {
      const s = Math.max(-1, Math.min(1, out[i]));
      this.chunk[this.fill++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      if (this.fill === this.chunk.length) {
        const pcm = this.chunk.slice();
        this.port.postMessage({ type: "chunk", pcm }, [pcm.buffer]);
        this.fill = 0;
      }
    }
    return true;
  }
}

registerProcessor("parley-capture", CaptureProcessor);
