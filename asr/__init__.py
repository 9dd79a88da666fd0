"""Streaming speech recognition with hard monotonic attention (Raffel et al., ICML 2017)."""

from asr.bundle import load_model, save_bundle
from asr.config import Config
from asr.recognizer import Recognizer
from asr.streaming import StreamingSession

__all__ = ["Config", "Recognizer", "StreamingSession", "load_model", "save_bundle"]
