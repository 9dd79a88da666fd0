// Browser page: microphone or file -> /v1/stream -> partial and final text.
import { SincResampler, toInt16 } from "./resampler.js";

const MIC_FRAME_MS = 50;
const FILE_FRAME_MS = 100;
const $ = (id) => document.getElementById(id);

function setState(text) {
  $("state").textContent = text;
}

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

function clearTranscript() {
  $("finals").replaceChildren();
  $("partial").textContent = "";
  showError("");
}

function showResult(message) {
  if (!message.final) {
    $("partial").textContent = message.text;
    return;
  }
  $("partial").textContent = "";
  if (!message.text) return;
  const span = document.createElement("span");
  span.className = "final";
  span.textContent = message.text;
  if ($("finals").childElementCount) $("finals").append(" ");
  $("finals").append(span);
}

function streamUrl() {
  const url = new URL("/v1/stream", location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const token = new URLSearchParams(location.search).get("token");
  if (token) url.searchParams.set("token", token); // browsers cannot set headers on WebSockets
  return url;
}

// The rate to declare: 16 kHz (resampled here, a third of the bandwidth of
// 48 kHz) or the device rate when the user asks and the server accepts it.
function targetRate(deviceRate) {
  const deviceOk = deviceRate >= 8000 && deviceRate <= 48000;
  return $("rate").value === "device" && deviceOk ? deviceRate : 16000;
}

// One /v1/stream session speaking the typed JSON protocol.
class Connection {
  constructor(sampleRate) {
    this.sampleRate = sampleRate;
    this.ws = null;
    this.closed = null;
  }

  // Resolves once the server answered "ready".
  open() {
    setState("connecting");
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(streamUrl());
      ws.binaryType = "arraybuffer";
      this.ws = ws;
      this.closed = new Promise((done) => {
        ws.onclose = (event) => {
          setState(`closed (${event.code}${event.reason ? " " + event.reason : ""})`);
          reject(new Error(`connection closed (${event.code})`));
          done(event);
        };
      });
      ws.onopen = () => {
        const start = { type: "start", sample_rate: this.sampleRate, encoding: "pcm_s16le" };
        ws.send(JSON.stringify(start));
      };
      ws.onerror = () => showError("connection failed");
      ws.onmessage = (event) => {
        const message = JSON.parse(event.data);
        switch (message.type) {
          case "ready":
            setState(`streaming at ${this.sampleRate} Hz`);
            resolve();
            break;
          case "partial":
          case "final":
            showResult(message);
            break;
          case "end":
            setState("ended");
            break;
          case "error":
            showError(`${message.code}: ${message.message}`);
            break;
        }
      };
    });
  }

  send(pcm) {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(pcm);
  }

  // Ask for the last finals and wait for the server to close.
  async stop() {
    if (this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify({ type: "stop" }));
      setState("stopping");
    }
    await this.closed;
  }
}

let mic = null; // the running microphone capture, if any

async function startMic() {
  clearTranscript();
  const media = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  });
  const context = new AudioContext();
  await context.audioWorklet.addModule("/static/capture-worklet.js");
  const rate = targetRate(context.sampleRate);
  const connection = new Connection(rate);
  try {
    await connection.open();
  } catch (err) {
    media.getTracks().forEach((t) => t.stop());
    await context.close();
    throw err;
  }
  const node = new AudioWorkletNode(context, "capture", {
    processorOptions: { outputRate: rate, frameMs: MIC_FRAME_MS },
  });
  const flushed = new Promise((resolve) => {
    node.port.onmessage = (event) => (event.data === "flushed" ? resolve() : connection.send(event.data));
  });
  const source = context.createMediaStreamSource(media);
  source.connect(node);
  node.connect(context.destination); // keeps the node rendering; it outputs silence
  mic = { media, context, node, source, connection, flushed };
  connection.closed.then(() => mic && releaseMic());
}

async function releaseMic() {
  const { media, context, source } = mic;
  mic = null;
  source.disconnect();
  media.getTracks().forEach((t) => t.stop());
  await context.close();
  $("mic").textContent = "Start microphone";
}

async function stopMic() {
  const { node, connection, flushed } = mic;
  node.port.postMessage("flush"); // the resampler's tail and the last partial frame
  await flushed;
  await releaseMic();
  await connection.stop();
}

$("mic").addEventListener("click", async () => {
  const button = $("mic");
  button.disabled = true;
  try {
    if (mic) {
      await stopMic();
    } else {
      await startMic();
      button.textContent = "Stop";
    }
  } catch (err) {
    showError(err.message || String(err));
  } finally {
    button.disabled = false;
  }
});

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Decode a file, convert it to the declared rate, send it in real time.
async function streamFile(file) {
  clearTranscript();
  const decoder = new AudioContext();
  const audio = await decoder.decodeAudioData(await file.arrayBuffer());
  await decoder.close();
  const mono = new Float32Array(audio.length);
  for (let c = 0; c < audio.numberOfChannels; c++) {
    audio.getChannelData(c).forEach((v, i) => (mono[i] += v / audio.numberOfChannels));
  }
  const rate = targetRate(audio.sampleRate);
  const resampler = new SincResampler(audio.sampleRate, rate);
  const head = resampler.process(mono);
  const tail = resampler.flush();
  const samples = new Float32Array(head.length + tail.length);
  samples.set(head);
  samples.set(tail, head.length);
  const connection = new Connection(rate);
  await connection.open();
  const frame = Math.round((rate * FILE_FRAME_MS) / 1000);
  const started = performance.now();
  for (let i = 0; i * frame < samples.length; i++) {
    await sleep(started + i * FILE_FRAME_MS - performance.now());
    connection.send(toInt16(samples.subarray(i * frame, (i + 1) * frame)).buffer);
  }
  await connection.stop();
}

$("send-file").addEventListener("click", async () => {
  const file = $("file").files[0];
  if (!file) {
    showError("pick an audio file first");
    return;
  }
  $("send-file").disabled = true;
  try {
    await streamFile(file);
  } catch (err) {
    showError(err.message || String(err));
  } finally {
    $("send-file").disabled = false;
  }
});
