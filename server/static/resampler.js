// Streaming sample-rate converter: windowed-sinc low-pass FIR evaluated at
// fractional positions. Decimating without this filter folds everything above
// the new Nyquist frequency back into the speech band, so never skip it.
// Shared by the capture worklet (microphone) and the page (file streaming).

export class SincResampler {
  // zeroCrossings: sinc lobes per side; more = sharper transition, more work.
  constructor(inRate, outRate, zeroCrossings = 16) {
    this.step = inRate / outRate; // input samples per output sample
    // cut off a little below the lower Nyquist frequency to leave a transition band
    this.fc = Math.min(1, outRate / inRate) * 0.92; // relative to the input Nyquist
    this.width = zeroCrossings / this.fc; // kernel half-width in input samples
    this.buffer = new Float32Array(0);
    this.offset = 0; // absolute index of buffer[0]
    this.time = 0; // absolute input position of the next output sample
    this.identity = inRate === outRate;
  }

  kernel(t) {
    if (t === 0) return this.fc;
    const x = Math.PI * this.fc * t;
    const w = (Math.PI * (t + this.width)) / this.width; // Blackman window over [-width, width]
    const window = 0.42 - 0.5 * Math.cos(w) + 0.08 * Math.cos(2 * w);
    return ((this.fc * Math.sin(x)) / x) * window;
  }

  // Feed input samples; returns the output samples that are complete so far.
  process(input) {
    if (this.identity) return Float32Array.from(input);
    const joined = new Float32Array(this.buffer.length + input.length);
    joined.set(this.buffer);
    joined.set(input, this.buffer.length);
    const end = this.offset + joined.length; // first absolute index not yet received
    const out = [];
    while (this.time + this.width < end) {
      const first = Math.max(Math.ceil(this.time - this.width), 0);
      const last = Math.floor(this.time + this.width);
      let sum = 0;
      for (let k = first; k <= last; k++) {
        sum += joined[k - this.offset] * this.kernel(this.time - k);
      }
      out.push(sum);
      this.time += this.step;
    }
    const keepFrom = Math.max(Math.ceil(this.time - this.width), this.offset);
    this.buffer = joined.slice(keepFrom - this.offset);
    this.offset = keepFrom;
    return Float32Array.from(out);
  }

  // Pad with silence so the last input samples reach the output.
  flush() {
    return this.process(new Float32Array(Math.ceil(this.width) + 1));
  }
}

// Float [-1, 1] -> little-endian Int16 PCM (the pcm_s16le encoding).
export function toInt16(samples) {
  const out = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    out[i] = Math.round(s < 0 ? s * 32768 : s * 32767);
  }
  return out;
}
