"""Prometheus metrics, one registry per app so several apps can live in one process (tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0)


class Metrics:
    """What an operator needs to see whether the server keeps up with real time."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.active_sessions = Gauge("asr_active_sessions", "Open streaming sessions", registry=r)
        self.sessions = Counter("asr_sessions", "Streaming sessions accepted", registry=r)
        self.audio_seconds = Counter(
            "asr_audio_seconds", "Seconds of audio received (stream and HTTP)", registry=r
        )
        self.compute_seconds = Counter(
            "asr_compute_seconds", "Seconds the model thread spent on recognition", registry=r
        )
        self.rtf = Gauge(
            "asr_real_time_factor",
            "Compute seconds per audio second since start (below 1: faster than real time)",
            registry=r,
        )
        self.batch_size = Histogram(
            "asr_batch_size",
            "Streaming steps per executor hop",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )
        self.step_latency = Histogram(
            "asr_step_latency_seconds",
            "Audio frame queued -> its events ready (queue wait + compute)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.first_result_latency = Histogram(
            "asr_first_result_seconds",
            "Session ready -> first partial or final sent",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.final_latency = Histogram(
            "asr_final_latency_seconds",
            "Stop received -> end sent",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.http_latency = Histogram(
            "asr_transcribe_latency_seconds",
            "POST /v1/transcribe request duration",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.errors = Counter("asr_errors", "Errors by kind", ["kind"], registry=r)
        self.model_restarts = Counter(
            "asr_model_restarts",
            "Replacement model processes started after one died (attempts, failed ones too)",
            registry=r,
        )
        self.live_processes = Gauge(
            "asr_model_processes_live", "Model processes that take sessions", registry=r
        )

        self._audio_total = 0.0
        self._compute_total = 0.0

    def add_audio(self, seconds: float) -> None:
        self.audio_seconds.inc(seconds)
        self._audio_total += seconds

    def add_compute(self, seconds: float) -> None:
        self.compute_seconds.inc(seconds)
        self._compute_total += seconds
        if self._audio_total > 0:
            self.rtf.set(self._compute_total / self._audio_total)

    def on_batch(self, size: int, seconds: float) -> None:
        self.batch_size.observe(size)
        self.add_compute(seconds)
