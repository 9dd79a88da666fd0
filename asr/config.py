"""One typed configuration shared by training, serving and evaluation.

Every part of the system reads its settings from :class:`Config`; a model
bundle stores the same structure in ``config.json`` so that a model is always
served with exactly the frontend and decoder settings it was trained with.
Unknown keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from asr.whisper_encoder import Streaming
from asr.whisper_features import silence_value

FORMAT_VERSION = 1

AttentionKind = Literal["monotonic", "softmax", "chunkwise"]
# what writes the streaming pass's text (partials and one-pass finals): the model's own LSTM
# decoder, or Whisper's decoder under the bundle's learnt monotonic policy (asr.speller)
StreamingDecoder = Literal["lstm", "whisper"]
# how Whisper's decoder writes numbers: its numerals ("673"), or spelled as said
Numbers = Literal["digits", "words"]
# acoustic changes of the student's input in distillation (training/augment.py)
AugmentKind = Literal["warp", "colour", "reverb", "noise"]


@dataclass(frozen=True)
class Bounds:
    """The values a number setting may take. A 0 learning rate, a negative count or a CTC
    weight of 2 would otherwise train nonsense silently or fail deep inside a run."""

    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None

    def holds(self, value: float) -> bool:
        return not (
            (self.at_least is not None and not value >= self.at_least)
            or (self.above is not None and not value > self.above)
            or (self.at_most is not None and not value <= self.at_most)
            or (self.below is not None and not value < self.below)
        )

    def __str__(self) -> str:
        if self.at_least is not None and self.at_most is not None:
            return f"within {self.at_least:g}..{self.at_most:g}"
        words = ("at least", "above", "at most", "below")
        limits = (self.at_least, self.above, self.at_most, self.below)
        return " and ".join(f"{w} {v:g}" for w, v in zip(words, limits) if v is not None)


def bounded(
    default: Any,
    *,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
) -> Any:
    """A dataclass field whose value (each item of a list) :class:`Checked` keeps within
    bounds; a callable default is a factory."""
    metadata = {"bounds": Bounds(at_least, above, at_most, below)}
    if callable(default):
        return field(default_factory=default, metadata=metadata)
    return field(default=default, metadata=metadata)


class Checked:
    """Checks every :func:`bounded` field whenever a section is made (config file, override,
    bundle or code), so train, serve and eval refuse the same values, naming the key."""

    SECTION: ClassVar[str]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            bounds = f.metadata.get("bounds")
            value = getattr(self, f.name)
            values = value if isinstance(value, list) else [value]
            if bounds is not None and not all(bounds.holds(v) for v in values):
                each = "each " if isinstance(value, list) else ""
                raise ValueError(f"{self.SECTION}.{f.name} must {each}be {bounds}, got {value!r}")


@dataclass
class FeatureConfig(Checked):
    """Log-mel filterbank frontend (kaldi-native-fbank), shared by batch and stream."""

    SECTION: ClassVar[str] = "model.features"

    sample_rate: int = bounded(16000, at_least=1)
    num_mel_bins: int = bounded(80, at_least=1)
    frame_length_ms: float = bounded(25.0, above=0)
    frame_shift_ms: float = bounded(10.0, above=0)
    dither: float = bounded(0.0, at_least=0)


@dataclass
class EncoderConfig(Checked):
    """Unidirectional LSTM stack; ``reductions[i]`` frames are stacked before layer i (LAS pyramid)."""

    SECTION: ClassVar[str] = "model.encoder"

    layers: int = bounded(4, at_least=1)
    units: int = bounded(256, at_least=1)
    reductions: list[int] = bounded(lambda: [2, 2, 1, 1], at_least=1)  # each factor
    dropout: float = bounded(0.1, at_least=0, below=1)


@dataclass
class AttentionConfig(Checked):
    """Attention between decoder state and encoder memory."""

    SECTION: ClassVar[str] = "model.attention"

    kind: AttentionKind = "monotonic"
    dim: int = bounded(128, at_least=1)
    chunk_width: int = bounded(4, at_least=1)  # MoChA chunk width w (chunkwise only)
    noise_std: float = bounded(1.0, at_least=0)  # pre-sigmoid noise, training mode only
    init_r: float = -4.0
    init_g: float | None = None  # None -> 1/sqrt(dim)


@dataclass
class DecoderConfig(Checked):
    SECTION: ClassVar[str] = "model.decoder"

    embed_dim: int = bounded(128, at_least=1)
    units: int = bounded(256, at_least=1)
    layers: int = bounded(1, at_least=1)
    dropout: float = bounded(0.1, at_least=0, below=1)
    # Feed the last context c(i-1) into the LSTM with the last token (Bahdanau's input
    # feeding). Off, the LSTM sees tokens only, so training runs it over the whole target
    # at once and computes every step's attention energies in one batch: only the
    # alignment recurrence stays a loop over output steps.
    context_feedback: bool = True


@dataclass
class TokenizerConfig(Checked):
    """Targets: sentencepiece pieces or a plain symbol list (phones, characters)."""

    SECTION: ClassVar[str] = "model.tokenizer"

    kind: Literal["sentencepiece", "symbols"] = "sentencepiece"
    vocab_size: int = bounded(256, at_least=1)
    model_type: Literal["unigram", "bpe"] = "unigram"


@dataclass
class WhisperConfig(Checked):
    """The pretrained Whisper-base encoder as the front end (``model.frontend: whisper``)."""

    SECTION: ClassVar[str] = "model.whisper"

    teacher: str = "models/whisper-base"  # the imported weights (`asr import-whisper`)
    # the encoder the recognizer reads (training): a distilled student's directory, or the
    # teacher's for the masked teacher; a bundle carries its own copy
    encoder: str = ""
    # log10 mel-power floor: a constant, since Whisper's "utterance maximum - 8" cannot stream
    floor: float = -7.0
    chunk: int = bounded(8, at_least=1)  # encoder states (20 ms each) decided together: 160 ms
    left_context: int = bounded(500, at_least=0)  # states before a chunk that it attends to (10 s)
    # states of silence a stream is encoded from before its audio (a whole number of chunks;
    # asr.whisper_encoder.Streaming): its first chunk then has a past to attend to
    prime: int = bounded(0, at_least=0)
    int8: bool = False  # serve the encoder's convolutions and linear layers in int8
    # how int8 quantises: "rows", each state's activations apart (exact in any batch, and the
    # convolutions too); "dynamic", torch's per call and stream, linear layers only, as
    # bundles trained before "rows" (2026-11) had their frames made
    quantization: Literal["rows", "dynamic"] = "dynamic"
    # a saved bundle carries the full-attention teacher too (41 MB), so that two-pass finals
    # can be asked for (--two-pass) even where decode.two_pass leaves them off by default
    carry_teacher: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prime % self.chunk:
            raise ValueError(
                f"model.whisper.prime must be a whole number of chunks ({self.chunk} states), "
                f"got {self.prime}"
            )

    def streaming(self) -> Streaming:
        return Streaming(self.chunk, self.left_context, self.prime, silence_value(self.floor))


@dataclass
class ModelConfig(Checked):
    SECTION: ClassVar[str] = "model"

    # "fbank": 80-dim filterbank (models trained from scratch); "whisper": the pretrained
    # Whisper-base encoder under the streaming mask (asr.frontend)
    frontend: Literal["fbank", "whisper"] = "fbank"
    features: FeatureConfig = field(default_factory=FeatureConfig)
    whisper: WhisperConfig = field(default_factory=WhisperConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    ctc_weight: float = bounded(
        0.0, at_least=0, at_most=1
    )  # auxiliary CTC loss on the encoder (0 disables the head)
    # Monotonic kinds with a CTC head: weight of the loss that pulls each token's expected
    # boundary onto the state where CTC's best path emits it (CTC-synchronous training).
    alignment_weight: float = bounded(0.0, at_least=0)
    alignment_window: int = bounded(
        1, at_least=0
    )  # states either side of the CTC position that count as a hit
    # States after the CTC spike that each boundary is trained towards: each one costs a
    # state of latency (40 ms in the default model) and lets the token see that much more
    # of its word through the unidirectional encoder.
    alignment_delay: int = bounded(0, at_least=0)
    # Only CTC spikes at least this probable guide the attention: early in training the CTC
    # path is arbitrary, and following it would only hold the attention back.
    alignment_min_posterior: float = bounded(0.5, at_least=0, at_most=1)


@dataclass
class WhisperFinalsConfig(Checked):
    """Whisper's own decoder writing two-pass finals (asr.whisper_finals), with the rules
    Whisper relies on to stay quiet on segments without speech and to stop looping."""

    SECTION: ClassVar[str] = "decode.whisper_finals"
    # keys of earlier versions (in the configs runs saved): at the value they always had
    # unless set, dropped; set, refused with what replaced them
    RETIRED: ClassVar[dict[str, tuple[Any, str]]] = {
        "padding_s": (0.0, "window_s pads a shorter segment up to that length in all"),
    }

    # the beam of segments of at most beam_max_s seconds; longer ones are decoded greedily
    # (1: greedy throughout). Dev split (100 utterances, window_s 10): 15.8% WER greedy,
    # 12.3% with a beam of 5; one thread: a 6 s segment's final with the beam takes about
    # what a 10 s segment's greedy one does, so a long segment's final does not wait for it
    beam_size: int = bounded(5, at_least=1)
    beam_max_s: float = bounded(6.0, at_least=0)
    max_tokens: int = bounded(224, at_least=1, at_most=440)  # per segment (Whisper: 448 / 2)
    # a segment whose probability of <|nocaptions|> at the first step is above this, and
    # whose text the audio hardly explains (its log-probability per token reading the
    # segment is less than min_audio_gain above its log-probability reading encoded
    # silence: Whisper writes "you" for silence, noise and breath with a high probability
    # either way) says nothing. Whisper's own rule (average log-probability below -1) also
    # dropped short, clear utterances ("Zulu Papa"): 16.81% WER on the dev split, 16.32%
    # with this one
    no_speech_threshold: float = bounded(0.6, at_least=0, at_most=1)
    min_audio_gain: float = 0.5
    # a text whose zlib compression ratio is above this is a loop: it is cut where the
    # repeats begin (asr.whisper_decoder.loop_start), or dropped if none is found
    compression_ratio_threshold: float = bounded(2.4, above=0)
    # read the segment's states, then the encoded silence after them up to Whisper's 30 s
    # (as Whisper learnt to read its padded window), or the segment's states alone
    silence_after: bool = True
    # a segment shorter than this many seconds is encoded with Whisper's own padding after it
    # (zero frames once scaled, as its transcribe fills its 30 s window) up to this length,
    # so that its states attend as in Whisper's training; 30: Whisper's whole window, 0:
    # the segment alone. Dev split (100 utterances, greedy): 16.3% WER at 0, 15.8% at 10,
    # 14.6% at 30; with a beam of 5: 16.3%, 12.3% and 12.1%; 12.3% at 15. The encoder's
    # cost grows with it (a 2 s segment's final: about 0.25 s at 0, 0.5 s at 10 with the beam)
    window_s: float = bounded(10.0, at_least=0, at_most=30)
    # "bfloat16": the decoder's linear layers, memories and caches in bfloat16 and its output
    # projection in 4 bits with the likeliest tokens' logits again in float32
    # (WhisperTextDecoder.in_bfloat16), where oneDNN has bfloat16 kernels (else float32),
    # and the teacher encoding the segment with its fc1 layers in int8
    # (asr.whisper_finals.reduced_teacher); "float32": both in float32
    precision: Literal["float32", "bfloat16"] = "bfloat16"
    # "digits": numbers as Whisper writes them ("673", "$5", "50%"); "words": spelled as
    # said ("six hundred seventy three"), its tokens with digits, currency or per cent
    # signs suppressed, as spoken-form references (TIMIT's, WSJ's) write them
    numbers: Numbers = "digits"


@dataclass
class DecodeConfig(Checked):
    """Search and endpointing, used identically offline and in streaming."""

    SECTION: ClassVar[str] = "decode"

    beam_size: int = bounded(1, at_least=1)
    # tokens one encoder state may select in a row; then the scan moves on
    max_tokens_per_state: int = bounded(6, at_least=1)
    max_tokens: int = bounded(200, at_least=1)  # hard cap per segment
    # force an endpoint after this much audio in one segment
    max_segment_s: float = bounded(30.0, above=0)
    endpoint_silence_s: float = bounded(
        0.0, at_least=0
    )  # close a segment after this much trailing silence (0: off)
    endpoint_on_eos: bool = True  # close a segment when the decoder emits end-of-sentence
    silence_threshold_db: float = -45.0  # frame energy below this counts as silence
    # Whisper front end: a quiet chunk after this much quiet (asr.frontend.PauseRestart) starts
    # the stream afresh, as every utterance the model learnt from began with nothing before
    # it: the Whisper encoder forgets what came before, the LAS encoder's state resets and
    # the segment ends there (0: one context for the whole stream)
    restart_pause_s: float = bounded(0.0, at_least=0)
    # Whisper front end: recompute each segment's final, at its endpoint, from the
    # full-attention teacher over that segment, with the same LAS layers and decoder (the
    # streaming pass still gives the partials); a bundle saved with it carries the teacher
    two_pass: bool = False
    # Shallow fusion: add this times the bundle's token n-gram log-probabilities (lm.npz,
    # made by `asr lm`) to the decoder's at every step. 0: the acoustic model alone.
    lm_weight: float = bounded(0.0, at_least=0)
    # Joint CTC/attention scoring (asr.ctc_prefix): each step's scores are (1 - w) times the
    # attention decoder's log-probabilities plus w times the CTC head's prefix scores over
    # the states up to the one the step selected (relative to CTC's likeliest token;
    # end-of-sentence is left to attention). 0: the attention decoder alone; below 1, since
    # the search still needs attention's scores (asr.ctc_prefix.check_weight)
    ctc_weight: float = bounded(0.0, at_least=0, below=1)
    # Partials from a greedy search without the LM, so they come as fast as greedy decoding
    # does (a beam's partials wait until all its hypotheses agree); each final comes from a
    # second search with beam_size and lm_weight over its segment's encoder states, run
    # alongside as they arrive (over the teacher's states with two_pass, at the segment's
    # end). Finals may then differ from the last partial.
    greedy_partials: bool = False
    # Digital silence (seconds) after the last sample when a stream finishes: every training
    # utterance ends in some, and a clip cut right after its last word otherwise loses that
    # word's end to the encoders' chunk (the final then costs one more chunk of encoding).
    # Whisper's streaming pass streams at least restart_pause_s, as a pause ends a segment
    end_pad_s: float = bounded(0.0, at_least=0)
    # two-pass finals from Whisper's own decoder, where the bundle carries it
    whisper_finals: WhisperFinalsConfig = field(default_factory=WhisperFinalsConfig)
    # "whisper": the text shown while audio streams, and one-pass finals, are Whisper's
    # decoder reading the streaming student's states, each token let out when the bundle's
    # learnt policy (speller_policy.safetensors) says its audio has arrived; the LSTM search
    # still runs beside it, its end of sentence no longer ending a segment (segments end at
    # endpoints alone). Cased and punctuated, better read (held-out one-pass WER 39.7% real,
    # 14.4 / 16.1% synthetic, against the LSTM's 64.9 / 28.8 / 32.2%) but later in the tail
    # (word latency p50 / p95 0.18 / 0.75 s against 0.18 / 0.34) and dearer (one stream's
    # real-time factor 0.101 against 0.041: each candidate boundary is a step of Whisper's
    # decoder)
    streaming_decoder: StreamingDecoder = "lstm"
    # hypotheses of the beam of Whisper's streaming decoder, each with its own pointer
    # (1: greedy); the partials show the best one, which may change. Under the previous
    # policy a beam of 3 read real speech a little better held out (37.7% against 38.9%),
    # the synthetic sets a little worse, at 1.65x the cost (the research record)
    speller_beam: int = bounded(1, at_least=1)
    # Whisper's streaming decoder: a segment whose speller has said something and then let
    # nothing out for this long is read again from its start, every token from the states
    # so far, and goes on from there (the decoder, having let out a sentence it misheard,
    # finds the end of text likeliest at every boundary after it, and an open segment waits
    # on the end; 0: it waits for the segment's endpoint)
    speller_stall_s: float = bounded(0.0, at_least=0)

    def greedy(self) -> DecodeConfig:
        """These settings searched greedily without the LM (the search partials come from);
        joint CTC scoring stays, being the model's own."""
        return dataclasses.replace(self, beam_size=1, lm_weight=0.0)


@dataclass(frozen=True)
class SessionOptions:
    """What one streaming session may choose over its model's decode settings (None: the
    model's). Made once from a request (a server ``start``, a command's flags) and passed
    through unchanged to :meth:`asr.recognizer.Recognizer.stream`, which checks it."""

    two_pass: bool | None = None
    streaming_decoder: StreamingDecoder | None = None

    def __post_init__(self) -> None:
        choices = typing.get_args(StreamingDecoder)
        if self.streaming_decoder is not None and self.streaming_decoder not in choices:
            raise ValueError(
                f"streaming_decoder must be one of {', '.join(choices)}, "
                f"got {self.streaming_decoder!r}"
            )

    def applied(self, decode: DecodeConfig) -> DecodeConfig:
        """``decode`` with this session's choices (a copy; the shared config is untouched)."""
        chosen = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return dataclasses.replace(decode, **chosen) if chosen else decode


@dataclass
class SpecAugmentConfig(Checked):
    """Masks on CMVN-normalised features in training (masked values become 0, the mean)."""

    SECTION: ClassVar[str] = "train.spec"

    freq_masks: int = bounded(2, at_least=0)
    freq_width: int = bounded(15, at_least=0)  # maximum width of one frequency mask (mel bins)
    time_masks: int = bounded(2, at_least=0)
    time_width: int = bounded(40, at_least=0)  # maximum width of one time mask (frames)
    time_ratio: float = bounded(
        0.1, at_least=0, at_most=1
    )  # ... and at most this fraction of the utterance


@dataclass
class TrainConfig(Checked):
    SECTION: ClassVar[str] = "train"

    train_manifest: str = ""
    valid_manifest: str = ""
    tokenizer: str = ""  # .model (sentencepiece) or .txt (symbols); empty: trained from texts
    output_dir: str = "exp"
    # where frames are cached (runs over the same front end may share one; training.cache_frames
    # fills it ahead in parallel shards); empty: OUTPUT/features
    feature_cache: str = ""
    epochs: int = bounded(10, at_least=1)
    # bucketed batches hold at most this much (padded) audio
    max_batch_seconds: float = bounded(120.0, above=0)
    lr: float = bounded(1e-3, above=0)
    warmup_steps: int = bounded(500, at_least=0)
    # cosine decay after warmup ends at lr * final_lr_ratio
    final_lr_ratio: float = bounded(0.05, at_least=0, at_most=1)
    weight_decay: float = bounded(1e-6, at_least=0)
    grad_clip: float = bounded(5.0, above=0)  # gradients are clipped to this norm
    label_smoothing: float = bounded(0.0, at_least=0, below=1)
    specaugment: bool = True
    spec: SpecAugmentConfig = field(default_factory=SpecAugmentConfig)
    seed: int = bounded(0, at_least=0)  # numpy seeds cannot be negative
    num_workers: int = bounded(0, at_least=0)
    threads: int = bounded(0, at_least=0)  # torch intra-op threads per process (0: torch's default)
    log_every: int = bounded(10, at_least=0)  # 0: every step
    # steps between mid-epoch checkpoints (0: epoch ends only)
    checkpoint_every: int = bounded(200, at_least=0)
    # utterances decoded for the validation WER (0: all)
    valid_decode_max: int = bounded(300, at_least=0)
    max_steps: int = bounded(0, at_least=0)  # stop after this many optimizer steps (0: no limit)
    max_minutes: float = bounded(
        0.0, at_least=0
    )  # stop after this much training time, resumes included (0: none)
    # "steps": the cosine runs over epochs (or max_steps); "minutes": over max_minutes of
    # training time, so a run given a time budget ends at the low learning rate on any machine.
    lr_schedule: Literal["steps", "minutes"] = "steps"
    # "bfloat16": matrix products and LSTMs in bfloat16 under autocast (weights, losses and
    # attention stay float32); on a CPU with AVX512-BF16 a step of the default model takes
    # about 0.6 of float32's time (bench/train.py prints both).
    precision: Literal["float32", "bfloat16"] = "float32"
    # Whisper front end: the share of training batches that read the full-attention teacher's
    # states (model.whisper.teacher) instead of the student's, so the layers over them also
    # know what two-pass finals feed them; validation reads the student's. 0: student only.
    teacher_share: float = bounded(0.0, at_least=0, at_most=1)
    # a model bundle to start from: its weights, tokenizer and CMVN (its model settings must
    # be these, or narrower: its model is then widened to these, training.widen), so training
    # goes on from a published model, e.g. after the machine and the checkpoints that trained
    # it are gone; empty: random weights
    init: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.lr_schedule == "minutes" and self.max_minutes <= 0:
            raise ValueError("train.lr_schedule=minutes needs train.max_minutes > 0")


@dataclass
class DistillConfig(Checked):
    """Distillation of a streaming student from the full-attention Whisper teacher
    (``asr distill``); the student's mask is ``model.whisper``'s."""

    SECTION: ClassVar[str] = "distill"

    train_manifests: list[str] = field(default_factory=list)  # unlabelled audio (text unused)
    valid_manifest: str = ""  # held-out audio for the student-teacher distance
    cache_dir: str = "data/teacher"  # teacher outputs, computed once per utterance
    lr: float = bounded(1e-4, above=0)
    warmup_steps: int = bounded(200, at_least=0)
    final_lr_ratio: float = bounded(0.1, at_least=0, at_most=1)
    max_batch_seconds: float = bounded(60.0, above=0)
    epochs: int = bounded(1, at_least=1)
    # stop after this many steps (0: no limit); the schedule runs over the epochs regardless
    max_steps: int = bounded(0, at_least=0)
    # training time, resumes included (0: no limit); with a limit the schedule runs over it
    max_minutes: float = bounded(0.0, at_least=0)
    # the student's state t + delay learns the teacher's state t: delay states (20 ms each)
    # of extra lookahead
    delay: int = bounded(0, at_least=0)
    adapter_rank: int = bounded(
        0, at_least=0
    )  # 0: train every weight; r > 0: low-rank adapters on the linears
    # a student to start from (a directory or file written by asr distill), so a student can
    # go on learning from wider audio; empty: the teacher's own weights
    init: str = ""
    # share of utterances given a random position phase, so the student learns the wrap of
    # Whisper's 30 s position table that long streams go through
    position_offset_share: float = bounded(0.5, at_least=0, at_most=1)
    # the student's forward under bfloat16 autocast; weights, the loss and validation stay
    # float32 (bench/distill_precision.py: 0.4-0.5 of float32's step time here, same distance)
    precision: Literal["float32", "bfloat16"] = "float32"
    # the decoder-level loss: Whisper's frozen decoder, teacher-forced on the teacher's own
    # greedy transcript of each English clip, reads the student's states; its token
    # distributions are pulled towards those it gives reading the teacher's (KL over the
    # teacher's ``kl_top`` likeliest tokens), beside the state distance, with this weight
    # (0: the state distance alone). ``decoder``: the bundle whose whisper_decoder and
    # tokenizer read them
    kl_weight: float = bounded(0.0, at_least=0)
    kl_top: int = bounded(16, at_least=1)
    decoder: str = ""
    # the state distance's weight (0: the decoder-level loss alone)
    distance_weight: float = bounded(1.0, at_least=0)
    # acoustic augmentation of the student's input (training/augment.py): each listed kind
    # (vocal tract warp, microphone colour and level, room reverberation, noise) is applied
    # to each training utterance with probability augment_share; the target stays the
    # teacher's states of the clean audio. Empty: none
    augment: list[AugmentKind] = field(default_factory=list)
    augment_share: float = bounded(0.3, at_least=0, at_most=1)
    seed: int = bounded(0, at_least=0)
    threads: int = bounded(0, at_least=0)
    # steps between log lines, validations and checkpoints
    log_every: int = bounded(10, at_least=1)
    valid_every: int = bounded(200, at_least=1)
    checkpoint_every: int = bounded(50, at_least=1)


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    format_version: int = FORMAT_VERSION

    # --- (de)serialisation -------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        return _build(cls, data, "")

    def differences(self, other: Config, keys: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
        """The settings under ``keys`` (dotted prefixes: "model", "train.lr") whose values
        differ: name -> (this config's value, ``other``'s)."""
        mine, theirs = _flat(self.to_dict()), _flat(other.to_dict())
        return {
            name: (value, theirs[name])
            for name, value in mine.items()
            if value != theirs[name] and any(name == k or name.startswith(k + ".") for k in keys)
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path, overrides: list[str] | None = None) -> Config:
        """Read JSON or YAML, then apply ``section.key=value`` overrides."""
        path = Path(path)
        text = path.read_text()
        try:
            data = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML: {_yaml_problem(err)}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON: {err}") from None
        data = data or {}
        for item in overrides or []:
            apply_override(data, item)
        try:
            return cls.from_dict(data)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections as dotted names: {"model.encoder.units": 256, ...}."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def apply_override(data: dict[str, Any], item: str) -> None:
    """Set ``a.b.c=value`` in a nested dict; the value is parsed as YAML (numbers, lists, ...)."""
    if "=" not in item:
        raise ValueError(f"override {item!r} is not of the form section.key=value")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"override {item!r}: {part!r} is not a section")
    try:
        node[parts[-1]] = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise ValueError(f"override {item!r}: not a valid value: {_yaml_problem(err)}") from None


def _yaml_problem(err: yaml.YAMLError) -> str:
    """One line for a YAML error: its problem and where (yaml's own text spans lines)."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        return f"{err.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(err).split())


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where or 'config'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key, (default, instead) in getattr(cls, "RETIRED", {}).items():
        if key in data and data[key] != default:
            raise ValueError(f"{where}{key} was retired: {instead}")
        data = {k: v for k, v in data.items() if k != key}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(repr(where + k) for k in unknown)}; "
            f"valid keys here: {', '.join(sorted(names))}"
        )
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        path = f"{where}{name}"
        if dataclasses.is_dataclass(hint):
            kwargs[name] = _build(hint, value, path + ".")
        else:
            kwargs[name] = _check(hint, value, path)
    return cls(**kwargs)


def _check(hint: Any, value: Any, path: str) -> Any:
    """Validate a leaf value against its annotation and coerce ints to floats."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Literal:
        if value not in args:
            raise ValueError(f"{path} must be one of {list(args)}, got {value!r}")
        return value
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _check(inner[0], value, path)
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{path} must be a list, got {value!r}")
        return [_check(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if hint is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as text
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if math.isfinite(number):
                return number
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{path} must be a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{path} must be an integer, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{path} must be true or false, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ValueError(f"{path} must be a string, got {value!r}")
        return value
    return value
