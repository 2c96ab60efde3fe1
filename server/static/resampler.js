// Windowed-sinc resampling, shared by the capture and playback worklets.
//
// A table of Blackman-windowed sinc filters, one per fractional phase, low-passed
// below the lower of the two Nyquist frequencies so that downsampling does not
// alias and upsampling does not image. Each phase is normalized to unity DC gain.

export const PHASES = 256;

export class SincTable {
  constructor(inRate, outRate, taps = 32) {
    this.taps = taps;
    this.half = taps / 2;
    this.step = inRate / outRate; // input samples advanced per output sample
    const cutoff = Math.min(1, outRate / inRate) * 0.9; // of the input's Nyquist
    this.coeffs = new Float32Array((PHASES + 1) * taps);
    for (let p = 0; p <= PHASES; p++) {
      const frac = p / PHASES;
      let sum = 0;
      for (let k = 0; k < taps; k++) {
        // Tap k reads input sample i - half + 1 + k for an output at i + frac.
        const d = k - this.half + 1 - frac;
        const x = Math.PI * cutoff * d;
        const sinc = d === 0 ? 1 : Math.sin(x) / x;
        const w =
          Math.abs(d) >= this.half
            ? 0
            : 0.42 + 0.5 * Math.cos((Math.PI * d) / this.half) +
              0.08 * Math.cos((2 * Math.PI * d) / this.half);
        const h = sinc * w;
        this.coeffs[p * taps + k] = h;
        sum += h;
      }
      for (let k = 0; k < taps; k++) this.coeffs[p * taps + k] /= sum;
    }
  }
}

// Push-style resampler: feed blocks in, get the resampled block out (capture side).
export class StreamResampler {
  constructor(inRate, outRate, taps = 32) {
    this.table = new SincTable(inRate, outRate, taps);
    const { half } = this.table;
    this.buf = new Float32Array(8192);
    this.len = half - 1; // leading zeros: the first output has its history
    this.t = half - 1; // input position of the next output sample
    this.out = new Float32Array(8192);
  }

  process(input) {
    const { half, taps, step, coeffs } = this.table;
    if (this.len + input.length > this.buf.length) {
      const bigger = new Float32Array(2 * (this.len + input.length));
      bigger.set(this.buf.subarray(0, this.len));
      this.buf = bigger;
    }
    this.buf.set(input, this.len);
    this.len += input.length;
    const buf = this.buf;
    let n = 0;
    for (;;) {
      const i = Math.floor(this.t);
      if (i + half >= this.len) break; // needs input i + half
      const row = Math.round((this.t - i) * PHASES) * taps;
      const base = i - half + 1;
      let acc = 0;
      for (let k = 0; k < taps; k++) acc += buf[base + k] * coeffs[row + k];
      if (n === this.out.length) {
        const bigger = new Float32Array(2 * n);
        bigger.set(this.out);
        this.out = bigger;
      }
      this.out[n++] = acc;
      this.t += step;
    }
    const keep = Math.floor(this.t) - half + 1; // oldest sample still needed
    if (keep > 0) {
      buf.copyWithin(0, keep, this.len);
      this.len -= keep;
      this.t -= keep;
    }
    return this.out.subarray(0, n);
  }
}
