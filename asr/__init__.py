"""Streaming speech recognition with hard monotonic attention (Raffel et al., ICML 2017)."""

from asr.config import Config

__all__ = ["Config"]
