"""One typed configuration shared by training, serving and evaluation.

Every part of the system reads its settings from :class:`Config`; a model
bundle stores the same structure in ``config.json`` so that a model is always
served with exactly the frontend and decoder settings it was trained with.
Unknown keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from asr.whisper_encoder import Streaming

FORMAT_VERSION = 1

AttentionKind = Literal["monotonic", "softmax", "chunkwise"]


@dataclass
class FeatureConfig:
    """Log-mel filterbank frontend (kaldi-native-fbank), shared by batch and stream."""

    sample_rate: int = 16000
    num_mel_bins: int = 80
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    dither: float = 0.0


@dataclass
class EncoderConfig:
    """Unidirectional LSTM stack; ``reductions[i]`` frames are stacked before layer i (LAS pyramid)."""

    layers: int = 4
    units: int = 256
    reductions: list[int] = field(default_factory=lambda: [2, 2, 1, 1])
    dropout: float = 0.1


@dataclass
class AttentionConfig:
    """Attention between decoder state and encoder memory."""

    kind: AttentionKind = "monotonic"
    dim: int = 128
    chunk_width: int = 4  # MoChA chunk width w (chunkwise only)
    noise_std: float = 1.0  # pre-sigmoid noise, training mode only
    init_r: float = -4.0
    init_g: float | None = None  # None -> 1/sqrt(dim)


@dataclass
class DecoderConfig:
    embed_dim: int = 128
    units: int = 256
    layers: int = 1
    dropout: float = 0.1
    # Feed the last context c(i-1) into the LSTM with the last token (Bahdanau's input
    # feeding). Off, the LSTM sees tokens only, so training runs it over the whole target
    # at once and computes every step's attention energies in one batch: only the
    # alignment recurrence stays a loop over output steps.
    context_feedback: bool = True


@dataclass
class TokenizerConfig:
    """Targets: sentencepiece pieces or a plain symbol list (phones, characters)."""

    kind: Literal["sentencepiece", "symbols"] = "sentencepiece"
    vocab_size: int = 256
    model_type: Literal["unigram", "bpe"] = "unigram"


@dataclass
class WhisperConfig:
    """The pretrained Whisper-base encoder as the front end (``model.frontend: whisper``)."""

    teacher: str = "models/whisper-base"  # the imported weights (`asr import-whisper`)
    # the encoder the recognizer reads (training): a distilled student's directory, or the
    # teacher's for the masked teacher; a bundle carries its own copy
    encoder: str = ""
    # log10 mel-power floor: a constant, since Whisper's "utterance maximum - 8" cannot stream
    floor: float = -7.0
    chunk: int = 8  # encoder states (20 ms each) decided together: 160 ms
    left_context: int = 500  # states before a chunk that it attends to (10 s)
    int8: bool = False  # serve the encoder's convolutions and linear layers in int8
    # how int8 quantises: "rows", each state's activations apart (exact in any batch, and the
    # convolutions too); "dynamic", torch's per call and stream, linear layers only, as
    # bundles trained before "rows" (2026-11) had their frames made
    quantization: Literal["rows", "dynamic"] = "dynamic"
    # a saved bundle carries the full-attention teacher too (41 MB), so that two-pass finals
    # can be asked for (--two-pass) even where decode.two_pass leaves them off by default
    carry_teacher: bool = False

    def streaming(self) -> Streaming:
        return Streaming(chunk=self.chunk, left_context=self.left_context)


@dataclass
class ModelConfig:
    # "fbank": 80-dim filterbank (models trained from scratch); "whisper": the pretrained
    # Whisper-base encoder under the streaming mask (asr.frontend)
    frontend: Literal["fbank", "whisper"] = "fbank"
    features: FeatureConfig = field(default_factory=FeatureConfig)
    whisper: WhisperConfig = field(default_factory=WhisperConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    ctc_weight: float = 0.0  # auxiliary CTC loss on the encoder (0 disables the head)
    # Monotonic kinds with a CTC head: weight of the loss that pulls each token's expected
    # boundary onto the state where CTC's best path emits it (CTC-synchronous training).
    alignment_weight: float = 0.0
    alignment_window: int = 1  # states either side of the CTC position that count as a hit
    # States after the CTC spike that each boundary is trained towards: each one costs a
    # state of latency (40 ms in the default model) and lets the token see that much more
    # of its word through the unidirectional encoder.
    alignment_delay: int = 0
    # Only CTC spikes at least this probable guide the attention: early in training the CTC
    # path is arbitrary, and following it would only hold the attention back.
    alignment_min_posterior: float = 0.5


@dataclass
class DecodeConfig:
    """Search and endpointing, used identically offline and in streaming."""

    beam_size: int = 1
    max_tokens_per_state: int = (
        6  # tokens one encoder state may select in a row; then the scan moves on
    )
    max_tokens: int = 200  # hard cap per segment
    max_segment_s: float = 30.0  # force an endpoint after this much audio in one segment
    endpoint_silence_s: float = 0.0  # close a segment after this much trailing silence (0: off)
    endpoint_on_eos: bool = True  # close a segment when the decoder emits end-of-sentence
    silence_threshold_db: float = -45.0  # frame energy below this counts as silence
    # Whisper front end: a quiet chunk after this much quiet (asr.frontend.PauseRestart) starts
    # the stream afresh, as every utterance the model learnt from began with nothing before
    # it: the Whisper encoder forgets what came before, the LAS encoder's state resets and
    # the segment ends there (0: one context for the whole stream)
    restart_pause_s: float = 0.0
    # Whisper front end: recompute each segment's final, at its endpoint, from the
    # full-attention teacher over that segment, with the same LAS layers and decoder (the
    # streaming pass still gives the partials); a bundle saved with it carries the teacher
    two_pass: bool = False
    # Shallow fusion: add this times the bundle's token n-gram log-probabilities (lm.npz,
    # made by `asr lm`) to the decoder's at every step. 0: the acoustic model alone.
    lm_weight: float = 0.0
    # Joint CTC/attention scoring (asr.ctc_prefix): each step's scores are (1 - w) times the
    # attention decoder's log-probabilities plus w times the CTC head's prefix scores over
    # the states up to the one the step selected (relative to CTC's likeliest token;
    # end-of-sentence is left to attention). 0: the attention decoder alone.
    ctc_weight: float = 0.0
    # Partials from a greedy search without the LM, so they come as fast as greedy decoding
    # does (a beam's partials wait until all its hypotheses agree); each final comes from a
    # second search with beam_size and lm_weight over its segment's encoder states, run
    # alongside as they arrive (over the teacher's states with two_pass, at the segment's
    # end). Finals may then differ from the last partial.
    greedy_partials: bool = False
    # Digital silence (seconds) after the last sample when a stream finishes: every training
    # utterance ends in some, and a clip cut right after its last word otherwise loses that
    # word's end to the encoders' chunk (the final then costs one more chunk of encoding)
    end_pad_s: float = 0.0

    def __post_init__(self) -> None:
        if self.end_pad_s < 0:
            raise ValueError(f"decode.end_pad_s must be at least 0, got {self.end_pad_s}")

    def greedy(self) -> DecodeConfig:
        """These settings searched greedily without the LM (the search partials come from);
        joint CTC scoring stays, being the model's own."""
        return dataclasses.replace(self, beam_size=1, lm_weight=0.0)


@dataclass
class SpecAugmentConfig:
    """Masks on CMVN-normalised features in training (masked values become 0, the mean)."""

    freq_masks: int = 2
    freq_width: int = 15  # maximum width of one frequency mask (mel bins)
    time_masks: int = 2
    time_width: int = 40  # maximum width of one time mask (frames)
    time_ratio: float = 0.1  # ... and at most this fraction of the utterance


@dataclass
class TrainConfig:
    train_manifest: str = ""
    valid_manifest: str = ""
    tokenizer: str = ""  # .model (sentencepiece) or .txt (symbols); empty: trained from texts
    output_dir: str = "exp"
    # where frames are cached (runs over the same front end may share one; training.cache_frames
    # fills it ahead in parallel shards); empty: OUTPUT/features
    feature_cache: str = ""
    epochs: int = 10
    max_batch_seconds: float = 120.0  # bucketed batches hold at most this much (padded) audio
    lr: float = 1e-3
    warmup_steps: int = 500
    final_lr_ratio: float = 0.05  # cosine decay after warmup ends at lr * final_lr_ratio
    weight_decay: float = 1e-6
    grad_clip: float = 5.0
    label_smoothing: float = 0.0
    specaugment: bool = True
    spec: SpecAugmentConfig = field(default_factory=SpecAugmentConfig)
    seed: int = 0
    num_workers: int = 0
    threads: int = 0  # torch intra-op threads per process (0: torch's default)
    log_every: int = 10
    checkpoint_every: int = 200  # steps between mid-epoch checkpoints (0: epoch ends only)
    valid_decode_max: int = 300  # utterances decoded for the validation WER (0: all)
    max_steps: int = 0  # stop after this many optimizer steps (0: no limit)
    max_minutes: float = 0.0  # stop after this much training time, resumes included (0: none)
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
    teacher_share: float = 0.0
    # a model bundle to start from: its weights, tokenizer and CMVN (its model settings must
    # be these, or narrower: its model is then widened to these, training.widen), so training
    # goes on from a published model, e.g. after the machine and the checkpoints that trained
    # it are gone; empty: random weights
    init: str = ""

    def __post_init__(self) -> None:
        if self.lr_schedule == "minutes" and self.max_minutes <= 0:
            raise ValueError("train.lr_schedule=minutes needs train.max_minutes > 0")
        if not 0.0 <= self.teacher_share <= 1.0:
            raise ValueError(f"train.teacher_share must be within 0..1, got {self.teacher_share}")


@dataclass
class DistillConfig:
    """Distillation of a streaming student from the full-attention Whisper teacher
    (``asr distill``); the student's mask is ``model.whisper``'s."""

    train_manifests: list[str] = field(default_factory=list)  # unlabelled audio (text unused)
    valid_manifest: str = ""  # held-out audio for the student-teacher distance
    cache_dir: str = "data/teacher"  # teacher outputs, computed once per utterance
    lr: float = 1e-4
    warmup_steps: int = 200
    final_lr_ratio: float = 0.1
    max_batch_seconds: float = 60.0
    epochs: int = 1
    # stop after this many steps (0: no limit); the schedule runs over the epochs regardless
    max_steps: int = 0
    # training time, resumes included (0: no limit); with a limit the schedule runs over it
    max_minutes: float = 0.0
    # the student's state t + delay learns the teacher's state t: delay states (20 ms each)
    # of extra lookahead
    delay: int = 0
    adapter_rank: int = 0  # 0: train every weight; r > 0: low-rank adapters on the linears
    # a student to start from (a directory or file written by asr distill), so a student can
    # go on learning from wider audio; empty: the teacher's own weights
    init: str = ""
    # share of utterances given a random position phase, so the student learns the wrap of
    # Whisper's 30 s position table that long streams go through
    position_offset_share: float = 0.5
    # the student's forward under bfloat16 autocast; weights, the loss and validation stay
    # float32 (bench/distill_precision.py: 0.4-0.5 of float32's step time here, same distance)
    precision: Literal["float32", "bfloat16"] = "float32"
    seed: int = 0
    threads: int = 0
    log_every: int = 10
    valid_every: int = 200
    checkpoint_every: int = 50


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

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path, overrides: list[str] | None = None) -> Config:
        """Read JSON or YAML, then apply ``section.key=value`` overrides."""
        path = Path(path)
        text = path.read_text()
        data = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
        data = data or {}
        for item in overrides or []:
            apply_override(data, item)
        try:
            return cls.from_dict(data)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None


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
    node[parts[-1]] = yaml.safe_load(raw)


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where or 'config'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
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
