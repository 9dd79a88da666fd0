// AudioWorklet processor: takes the microphone at the device rate, converts it
// to the rate the page declared (windowed-sinc FIR when that differs) and
// posts whole Int16 frames of frameMs to the page, which sends them as-is.
import { SincResampler, toInt16 } from "./resampler.js";

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { outputRate, frameMs } = options.processorOptions;
    this.resampler = new SincResampler(sampleRate, outputRate); // sampleRate: worklet global
    this.frameLength = Math.round((outputRate * frameMs) / 1000);
    this.pending = new Float32Array(0);
    this.port.onmessage = (event) => {
      if (event.data === "flush") {
        this.emit(this.resampler.flush(), true);
      }
    };
  }

  emit(samples, last = false) {
    const joined = new Float32Array(this.pending.length + samples.length);
    joined.set(this.pending);
    joined.set(samples, this.pending.length);
    let start = 0;
    while (joined.length - start >= this.frameLength) {
      this.post(joined.subarray(start, start + this.frameLength));
      start += this.frameLength;
    }
    this.pending = joined.slice(start);
    if (last) {
      if (this.pending.length) this.post(this.pending);
      this.pending = new Float32Array(0);
      this.port.postMessage("flushed");
    }
  }

  post(frame) {
    const pcm = toInt16(frame);
    this.port.postMessage(pcm.buffer, [pcm.buffer]);
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (channel) this.emit(this.resampler.process(channel));
    return true;
  }
}

registerProcessor("capture", CaptureProcessor);
