"""A loaded model ready to recognise: offline transcription and streaming sessions."""

from __future__ import annotations

import argparse
import math
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from asr.config import Config, Numbers, SessionOptions, StreamingDecoder
from asr.ctc_prefix import check_weight
from asr.events import Event
from asr.formats import plain_text
from asr.frontend import Frontend, load_frontend
from asr.lm import TokenLM
from asr.model import Seq2Seq
from asr.speller import Policy, SpellerModel, bundle_adapter, bundle_policy
from asr.streaming import StreamingSession, check_whisper_window, two_pass_teacher
from asr.tokenizer import Tokenizer
from asr.whisper_decoder import load_decoder
from asr.whisper_finals import WhisperFinals
from asr.whisper_text import WhisperVocabulary

OFFLINE_CHUNK_S = 5.0  # seconds of audio per step of offline transcription
# the most end-of-stream silence a command may ask for: training utterances end in well
# under a second of it, and more only costs memory and time
MAX_END_PAD_S = 10.0


def check_beam(beam: int, flag: str = "--beam") -> int:
    """The one check of a beam size, wherever it is set: a command's --beam (or ``flag``), or
    the server's settings before any model process loads (a bad one there would fail every
    load)."""
    if beam < 1:
        raise ValueError(f"{flag} must be >= 1, got {beam}")
    return beam


def check_lm_weight(weight: float) -> float:
    """The one check of an LM weight given on a command line (--lm-weight), by set_search or
    by the server's settings before any model process loads (NaN and infinity fail too)."""
    if not 0 <= weight < math.inf:
        raise ValueError(f"--lm-weight must be a finite number >= 0, got {weight}")
    return weight


@dataclass
class Recognizer:
    """Model, tokenizer and config of one bundle. Offline decoding is a session fed the whole
    signal, so it gives exactly the transcript streaming gives."""

    config: Config
    model: Seq2Seq
    tokenizer: Tokenizer
    lm_file: Path | None = None  # the bundle's lm.npz, if it has one
    # for shallow fusion; read from lm_file only once decode.lm_weight > 0 asks for it, so
    # greedy serving does not pay the second it takes to index the n-grams
    lm: TokenLM | None = None
    frontend: Frontend | None = None  # None: built from config.model (fbank needs no files)
    # Whisper's decoder and tokenizer (whisper_decoder.safetensors, whisper_tokenizer.json),
    # if the bundle carries them: two-pass finals are then Whisper's (asr.whisper_finals)
    whisper_files: tuple[Path, Path] | None = None
    root: Path | None = None  # the bundle's directory (None: a model made in code)
    _whisper_finals: WhisperFinals | None = field(default=None, init=False, repr=False)
    _speller: tuple[SpellerModel, Policy] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.frontend is None:
            self.frontend = load_frontend(self.config.model)

    def set_search(
        self,
        beam: int | None = None,
        lm_weight: float | None = None,
        two_pass: bool | None = None,
        ctc_weight: float | None = None,
        end_pad: float | None = None,
        final_beam: int | None = None,
        final_window: float | None = None,
        final_beam_max: float | None = None,
        streaming_decoder: StreamingDecoder | None = None,
        final_numbers: Numbers | None = None,
        speller_beam: int | None = None,
        speller_stall: float | None = None,
    ) -> None:
        """Override the bundle's beam size, LM weight, two-pass finals, joint CTC weight,
        end-of-stream silence, the beam, window, beam's longest segment and numbers of
        Whisper's finals, what writes the streaming pass, and the beam and stall of Whisper's
        streaming decoder (None keeps them), checking each."""
        assert self.frontend is not None
        decode = self.config.decode
        if streaming_decoder is not None:
            SessionOptions(streaming_decoder=streaming_decoder)  # one of the choices
            if streaming_decoder == "whisper":
                self.speller()  # fails now, naming what is missing
            decode.streaming_decoder = streaming_decoder
        if two_pass is not None:
            if two_pass:
                two_pass_teacher(self.frontend, decode)  # fails now, naming what is missing
            decode.two_pass = two_pass
        if beam is not None:
            decode.beam_size = check_beam(beam)
        if speller_beam is not None:
            decode.speller_beam = check_beam(speller_beam, "--speller-beam")
        if speller_stall is not None:
            if speller_stall < 0:
                raise ValueError(f"--speller-stall must be at least 0 s, got {speller_stall}")
            decode.speller_stall_s = speller_stall
        if final_beam is not None:
            check_beam(final_beam, "--final-beam")
            decode.whisper_finals = replace(decode.whisper_finals, beam_size=final_beam)
        if final_window is not None:
            if not 0 <= final_window <= 30:
                raise ValueError(f"--final-window must be 0 to 30 seconds, got {final_window}")
            decode.whisper_finals = replace(decode.whisper_finals, window_s=final_window)
        if final_numbers is not None:
            if final_numbers not in typing.get_args(Numbers):
                raise ValueError(f"--final-numbers must be digits or words, got {final_numbers!r}")
            decode.whisper_finals = replace(decode.whisper_finals, numbers=final_numbers)
        if final_beam_max is not None:
            if final_beam_max < 0:
                raise ValueError(f"--final-beam-max must be at least 0 s, got {final_beam_max}")
            decode.whisper_finals = replace(decode.whisper_finals, beam_max_s=final_beam_max)
        if lm_weight is not None:
            decode.lm_weight = check_lm_weight(lm_weight)
        if ctc_weight is not None:
            check_weight(ctc_weight, self.model.ctc is not None, "--ctc-weight")
            decode.ctc_weight = ctc_weight
        if end_pad is not None:
            if not 0 <= end_pad <= MAX_END_PAD_S:
                raise ValueError(f"--end-pad must be 0 to {MAX_END_PAD_S:g} seconds, got {end_pad}")
            decode.end_pad_s = end_pad
        if decode.lm_weight > 0 and self.lm is None:
            if self.lm_file is None:
                raise ValueError(
                    f"decode.lm_weight is {decode.lm_weight} but the bundle has no language model "
                    "(lm.npz): make one with `asr lm`, or set the weight to 0"
                )
            lm = TokenLM.load(self.lm_file)
            if lm.vocab_size != self.tokenizer.vocab_size:
                raise ValueError(
                    f"{self.lm_file}: vocabulary {lm.vocab_size} does not match the tokenizer's "
                    f"{self.tokenizer.vocab_size} (train it again with `asr lm`)"
                )
            self.lm = lm

    def option_problems(self) -> dict[str, str]:
        """Why a session cannot choose what an option offers beyond the LSTM's one pass
        (``two_pass`` finals; the ``streaming_decoder`` "whisper"), by option, for each it
        cannot. What they need is loaded now (once), so a session that asks later does not
        wait for it."""
        problems = {
            "two_pass": self.two_pass_problem(),
            "streaming_decoder": self._problem(self.speller),
        }
        return {option: problem for option, problem in problems.items() if problem is not None}

    def two_pass_problem(self) -> str | None:
        """Why this model cannot give two-pass finals, or None when it can (the teacher and
        Whisper's decoder loaded now, once)."""
        assert self.frontend is not None
        frontend, decode = self.frontend, self.config.decode
        return self._problem(lambda: (two_pass_teacher(frontend, decode), self.whisper_finals()))

    @staticmethod
    def _problem(load: Callable[[], object]) -> str | None:
        try:
            load()
        except (ValueError, FileNotFoundError) as err:
            return str(err)
        return None

    def speller(self) -> tuple[SpellerModel, Policy]:
        """Whisper's decoder and the bundle's learnt policy, which spell the streaming pass
        where ``decode.streaming_decoder`` is "whisper", shared by every session (loaded on
        first use); an error naming what the bundle lacks. The decoder, its rules and the
        encoded silence are the finals' (:meth:`whisper_finals`), in the precision of
        ``decode.whisper_finals.precision``: one copy in memory, and in bfloat16 a third
        cheaper than float32 on the dev splits at the same WER, though the policy learnt on
        float32 readings (the research record). A bundle whose streaming pass reads with
        adapters (``speller_adapter.safetensors``) gives it a decoder of its own."""
        assert self.frontend is not None
        if self._speller is None:
            finals = self.whisper_finals()
            if finals is None or self.root is None:
                raise ValueError(
                    "the streaming decoder 'whisper' needs a bundle of the Whisper front end "
                    "that carries Whisper's decoder (whisper_decoder.safetensors)"
                )
            check_whisper_window(self.config.decode, "Whisper's streaming decoder's segments")
            policy = bundle_policy(self.root)
            adapter = bundle_adapter(self.root)
            if adapter is None:
                model = SpellerModel(
                    finals.decoder, finals.rules, finals.vocabulary, finals.silence
                )
            else:  # a decoder of its own: the finals read with Whisper's as it is
                assert self.whisper_files is not None
                bfloat16 = finals.decoder.projection is not None  # the finals' packed copy
                model = SpellerModel.load(
                    *self.whisper_files, finals.silent_states, adapter, bfloat16
                )
            self._speller = (model, policy)
        return self._speller

    def whisper_finals(self) -> WhisperFinals | None:
        """Whisper's final pass, shared by every session (loaded on first use), or None where
        the bundle has no Whisper decoder: its two-pass finals come from its own decoder."""
        assert self.frontend is not None
        if self.whisper_files is None:
            return None
        if self._whisper_finals is None:
            decoder_file, tokenizer_file = self.whisper_files
            decoder, rules = load_decoder(decoder_file)
            vocabulary = WhisperVocabulary.load(tokenizer_file)
            teacher = self.frontend.full_attention()
            precision = self.config.decode.whisper_finals.precision
            self._whisper_finals = WhisperFinals(teacher, decoder, rules, vocabulary, precision)
        return self._whisper_finals

    def stream(self, sample_rate: int, options: SessionOptions | None = None) -> StreamingSession:
        """A new session. ``options`` (None: the bundle's decode settings) are this session's
        alone: it gets its own decode settings, the shared config is left as it is."""
        assert self.frontend is not None
        config = self.config
        decode = options.applied(config.decode) if options is not None else config.decode
        if decode != config.decode:
            config = replace(config, decode=decode)
        finals = self.whisper_finals() if decode.two_pass else None
        speller = self.speller() if decode.streaming_decoder == "whisper" else None
        return StreamingSession(
            self.model,
            self.tokenizer,
            config,
            sample_rate,
            self.frontend,
            self.lm,
            finals,
            speller,
        )

    def transcribe_segments(
        self,
        samples: np.ndarray,
        sample_rate: int,
        progress: Callable[[float], None] | None = None,
        options: SessionOptions | None = None,
    ) -> list[Event]:
        """The final segments of the whole signal (those with text). It is fed to the session
        in pieces of ``OFFLINE_CHUNK_S`` (any chunking gives the same result), which bounds the
        memory a long file needs and lets ``progress`` hear the seconds of audio done after
        each piece. ``options``: as in :meth:`stream`."""
        session = self.stream(sample_rate, options)
        events: list[Event] = []
        done = 0
        for piece in offline_pieces(samples, sample_rate):
            events += session.accept(piece)
            done += len(piece)
            if progress is not None:
                progress(done / sample_rate)
        events += session.finish()
        return [e for e in events if e.final and e.text]  # a final pass may hear no speech

    def transcribe(self, samples: np.ndarray, sample_rate: int) -> str:
        return plain_text(self.transcribe_segments(samples, sample_rate))

    def set_search_arguments(self, args: argparse.Namespace) -> None:
        """``set_search`` with what a command's ``add_search_arguments`` options parsed to."""
        self.set_search(
            args.beam,
            args.lm_weight,
            args.two_pass,
            args.ctc_weight,
            args.end_pad,
            args.final_beam,
            args.final_window,
            args.final_beam_max,
            args.streaming_decoder,
            args.final_numbers,
            args.speller_beam,
            args.speller_stall,
        )


def offline_pieces(samples: np.ndarray, sample_rate: int) -> Iterator[np.ndarray]:
    """The pieces of ``OFFLINE_CHUNK_S`` seconds offline transcription feeds its session (the
    server's uploads too, so that they give the same finals); an empty signal is one empty
    piece, which the session refuses."""
    step = int(OFFLINE_CHUNK_S * sample_rate)
    for begin in range(0, max(len(samples), 1), step):
        yield samples[begin : begin + step]


def add_search_arguments(parser: argparse.ArgumentParser, greedy: bool = False) -> None:
    """--beam, --lm-weight, --two-pass, --final-beam, --final-beam-max, --final-window,
    --final-numbers, --streaming-decoder, --speller-beam, --speller-stall, --ctc-weight and
    --end-pad, the search settings a command may override
    (``Recognizer.set_search_arguments(args)`` applies them);
    ``greedy``: a command that searches greedily unless told otherwise (beam 1, LM weight 0),
    not as the bundle serves."""
    if greedy:
        parser.set_defaults(beam=1, lm_weight=0.0)
    serves = "1, greedy" if greedy else "the bundle's decode.beam_size"
    fuses = "0" if greedy else "the bundle's decode.lm_weight"
    parser.add_argument("--beam", type=int, help=f"beam size (default: {serves})")
    parser.add_argument(
        "--lm-weight",
        type=float,
        help=f"shallow fusion with the bundle's lm.npz (default: {fuses})",
    )
    parser.add_argument(
        "--two-pass",
        action=argparse.BooleanOptionalAction,
        help="finals from the full-attention Whisper encoder over each segment (default: the "
        "bundle's decode.two_pass)",
    )
    parser.add_argument(
        "--final-beam",
        type=int,
        help="beam of Whisper's decoder writing two-pass finals, 1: greedy (default: the "
        "bundle's decode.whisper_finals.beam_size)",
    )
    parser.add_argument(
        "--final-beam-max",
        type=float,
        metavar="SECONDS",
        help="two-pass segments longer than this are decoded greedily, so that their finals "
        "do not wait for the beam (default: the bundle's decode.whisper_finals.beam_max_s)",
    )
    parser.add_argument(
        "--final-window",
        type=float,
        metavar="SECONDS",
        help="a two-pass segment shorter than this is encoded with Whisper's padding up to "
        "it, 0 to 30 s: longer reads better and costs more (default: the bundle's "
        "decode.whisper_finals.window_s)",
    )
    parser.add_argument(
        "--final-numbers",
        choices=typing.get_args(Numbers),
        help='two-pass finals write numbers as Whisper does (digits: "673") or spelled as '
        'said (words: "six hundred seventy three"), as spoken-form references such as '
        "TIMIT's and WSJ's are (default: the bundle's decode.whisper_finals.numbers)",
    )
    parser.add_argument(
        "--streaming-decoder",
        choices=typing.get_args(StreamingDecoder),
        help="what writes partials and one-pass finals: the model's LSTM decoder, or "
        "Whisper's decoder under the bundle's learnt monotonic policy (cased and better "
        "read, later and dearer; default: the bundle's decode.streaming_decoder)",
    )
    parser.add_argument(
        "--speller-beam",
        type=int,
        help="beam of Whisper's streaming decoder, each hypothesis with its own pointer, 1: "
        "greedy (default: the bundle's decode.speller_beam)",
    )
    parser.add_argument(
        "--speller-stall",
        type=float,
        metavar="SECONDS",
        help="Whisper's streaming decoder: a segment that said something, then nothing for "
        "this long, is read again from its start, 0: never (default: the bundle's "
        "decode.speller_stall_s)",
    )
    parser.add_argument(
        "--ctc-weight",
        type=float,
        help="joint scoring with the model's CTC head, 0 <= w < 1 (default: the bundle's "
        "decode.ctc_weight)",
    )
    parser.add_argument(
        "--end-pad",
        type=float,
        metavar="SECONDS",
        help="silence streamed through the encoders when the audio ends (default: the "
        "bundle's decode.end_pad_s)",
    )
