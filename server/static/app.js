// Browser page: microphone or file -> /v1/stream -> partial and final text; an input level
// meter; the transcript copied, or downloaded as text or SRT (made by the server's formatter).
import { SincResampler, toInt16 } from "./resampler.js";

const MIC_FRAME_MS = 50;
const FILE_FRAME_MS = 100;
const METER_MS = 50;
const FLOOR_DB = -60; // the meter's bottom: quieter is shown as silent
const $ = (id) => document.getElementById(id);

// The finals of the last stream and how much audio it sent: what copy and download give.
const transcript = { results: [], samples: 0, rate: 16000 };
const DOWNLOADS = ["copy", "download-txt", "download-srt"];

function setState(text) {
  $("state").textContent = text;
}

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

function clearTranscript(rate) {
  $("finals").replaceChildren();
  $("partial").textContent = "";
  showError("");
  Object.assign(transcript, { results: [], samples: 0, rate });
  DOWNLOADS.forEach((id) => ($(id).disabled = true));
  $("copied").textContent = "";
}

// Peak level of the latest audio in dB full scale, so a user sees the input works before any
// text arrives.
function showLevel(samples) {
  let peak = 0;
  for (const v of samples) peak = Math.max(peak, Math.abs(v));
  const db = Math.max(FLOOR_DB, 20 * Math.log10(peak || 1e-12));
  $("level").value = db;
  $("level-db").textContent = db > FLOOR_DB ? `${Math.round(db)} dB` : "silent";
}

function showResult(message) {
  if (!message.final) {
    $("partial").textContent = message.text;
    return;
  }
  $("partial").textContent = "";
  if (!message.text) return;
  transcript.results.push(message);
  DOWNLOADS.forEach((id) => ($(id).disabled = false));
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

function modeName() {
  const finals = $("finals-mode").value === "two-pass" ? "Whisper (two-pass)" : "streaming (one-pass)";
  const live = $("streaming-decoder").value === "whisper" ? "Whisper" : "LSTM";
  return `${finals} finals, ${live} live text`;
}

// What the served model offers (GET /readyz): two-pass finals and Whisper's streaming
// decoder are selectable where available, and chosen at first where they are its default.
async function loadModes() {
  const response = await fetch(new URL("/readyz", location.href));
  const ready = await response.json();
  const twoPass = ready.two_pass;
  if (twoPass) {
    const option = $("finals-mode").querySelector('option[value="two-pass"]');
    option.disabled = !twoPass.available;
    if (twoPass.available && twoPass.default) $("finals-mode").value = "two-pass";
  }
  const decoders = ready.streaming_decoder;
  if (decoders) {
    for (const option of $("streaming-decoder").options) {
      option.disabled = !decoders.available.includes(option.value);
    }
    $("streaming-decoder").value = decoders.default;
  }
}

loadModes().catch(() => {}); // the page still streams one-pass without it

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
        start.two_pass = $("finals-mode").value === "two-pass";
        start.streaming_decoder = $("streaming-decoder").value;
        ws.send(JSON.stringify(start));
      };
      ws.onerror = () => showError("connection failed");
      ws.onmessage = (event) => {
        const message = JSON.parse(event.data);
        switch (message.type) {
          case "ready":
            setState(`streaming at ${this.sampleRate} Hz, ${modeName()}`);
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
    if (this.ws.readyState !== WebSocket.OPEN) return;
    this.ws.send(pcm);
    transcript.samples += pcm.byteLength / 2; // Int16
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

// The level meter of a capture: an analyser on the source, read every METER_MS.
function startMeter(context, source) {
  const analyser = context.createAnalyser();
  analyser.fftSize = 2048;
  source.connect(analyser);
  const samples = new Float32Array(analyser.fftSize);
  return setInterval(() => {
    analyser.getFloatTimeDomainData(samples);
    showLevel(samples);
  }, METER_MS);
}

async function startMic() {
  const media = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  });
  const context = new AudioContext();
  const rate = targetRate(context.sampleRate);
  clearTranscript(rate);
  const source = context.createMediaStreamSource(media);
  mic = { media, context, source, meter: startMeter(context, source) }; // the level shows at once
  const connection = new Connection(rate);
  try {
    await context.audioWorklet.addModule("/static/capture-worklet.js");
    await connection.open();
  } catch (err) {
    await releaseMic();
    throw err;
  }
  const node = new AudioWorkletNode(context, "capture", {
    processorOptions: { outputRate: rate, frameMs: MIC_FRAME_MS },
  });
  const flushed = new Promise((resolve) => {
    node.port.onmessage = (event) => (event.data === "flushed" ? resolve() : connection.send(event.data));
  });
  source.connect(node);
  node.connect(context.destination); // keeps the node rendering; it outputs silence
  Object.assign(mic, { node, connection, flushed });
  connection.closed.then(() => mic && releaseMic());
}

async function releaseMic() {
  const { media, context, source, meter } = mic;
  mic = null;
  clearInterval(meter);
  showLevel([]);
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
  const decoder = new AudioContext();
  const audio = await decoder.decodeAudioData(await file.arrayBuffer());
  await decoder.close();
  const mono = new Float32Array(audio.length);
  for (let c = 0; c < audio.numberOfChannels; c++) {
    audio.getChannelData(c).forEach((v, i) => (mono[i] += v / audio.numberOfChannels));
  }
  const rate = targetRate(audio.sampleRate);
  clearTranscript(rate);
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
    const chunk = samples.subarray(i * frame, (i + 1) * frame);
    showLevel(chunk);
    connection.send(toInt16(chunk).buffer);
  }
  showLevel([]);
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

// -- copy and download ---------------------------------------------------------

function transcriptText() {
  return transcript.results.map((r) => r.text).join(" ");
}

async function copyText() {
  const text = transcriptText();
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
  } else {
    // plain http to another host: the clipboard API is off, copy a selection instead
    const range = document.createRange();
    range.selectNodeContents($("finals"));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    if (!document.execCommand("copy")) throw new Error("the browser refused to copy");
    getSelection().removeAllRanges();
  }
  $("copied").textContent = "copied";
}

// The transcript in ``format``, from the server's /v1/format (the same formatter as
// `asr transcribe` and POST /v1/transcribe), saved as transcript.<format>.
async function download(format) {
  const headers = { "Content-Type": "application/json" };
  const token = new URLSearchParams(location.search).get("token");
  if (token) headers.Authorization = `Bearer ${token}`;
  const body = {
    text: transcriptText(),
    duration: transcript.samples / transcript.rate,
    segments: transcript.results,
  };
  const url = new URL(`/v1/format?format=${format}`, location.href);
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  if (!response.ok) {
    const error = await response.json();
    throw new Error(`${error.code}: ${error.message}`);
  }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(await response.blob());
  link.download = `transcript.${format}`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

for (const [id, action] of [
  ["copy", copyText],
  ["download-txt", () => download("txt")],
  ["download-srt", () => download("srt")],
]) {
  $(id).addEventListener("click", async () => {
    try {
      await action();
    } catch (err) {
      showError(err.message || String(err));
    }
  });
}
