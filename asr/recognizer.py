"""A loaded model ready to recognise: offline transcription and streaming sessions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asr.config import Config
from asr.events import Event
from asr.model import Seq2Seq
from asr.streaming import StreamingSession
from asr.tokenizer import Tokenizer


@dataclass
class Recognizer:
    """Model, tokenizer and config of one bundle. Offline decoding is a session fed all at once,
    so it gives exactly the transcript streaming gives."""

    config: Config
    model: Seq2Seq
    tokenizer: Tokenizer

    def stream(self, sample_rate: int) -> StreamingSession:
        return StreamingSession(self.model, self.tokenizer, self.config, sample_rate)

    def transcribe_segments(self, samples: np.ndarray, sample_rate: int) -> list[Event]:
        session = self.stream(sample_rate)
        events = session.accept(samples) + session.finish()
        return [e for e in events if e.final]

    def transcribe(self, samples: np.ndarray, sample_rate: int) -> str:
        return " ".join(e.text for e in self.transcribe_segments(samples, sample_rate) if e.text)
