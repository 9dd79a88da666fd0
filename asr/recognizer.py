"""A loaded model ready to recognise: offline transcription and streaming sessions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asr.config import Config
from asr.events import Event
from asr.lm import TokenLM
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
    lm: TokenLM | None = None  # for shallow fusion (decode.lm_weight)

    def set_search(self, beam: int | None = None, lm_weight: float | None = None) -> None:
        """Override the bundle's beam size and LM weight (None keeps them), checking both."""
        decode = self.config.decode
        if beam is not None:
            if beam < 1:
                raise ValueError(f"--beam must be >= 1, got {beam}")
            decode.beam_size = beam
        if lm_weight is not None:
            if lm_weight < 0:
                raise ValueError(f"--lm-weight must be >= 0, got {lm_weight}")
            decode.lm_weight = lm_weight
        if decode.lm_weight > 0 and self.lm is None:
            raise ValueError(
                f"decode.lm_weight is {decode.lm_weight} but the bundle has no language model "
                "(lm.npz): make one with `asr lm`, or set the weight to 0"
            )

    def stream(self, sample_rate: int) -> StreamingSession:
        return StreamingSession(self.model, self.tokenizer, self.config, sample_rate, self.lm)

    def transcribe_segments(self, samples: np.ndarray, sample_rate: int) -> list[Event]:
        session = self.stream(sample_rate)
        events = session.accept(samples) + session.finish()
        return [e for e in events if e.final]

    def transcribe(self, samples: np.ndarray, sample_rate: int) -> str:
        return " ".join(e.text for e in self.transcribe_segments(samples, sample_rate) if e.text)
