"""The streaming session: audio in, partial and final events out, with a persistent pointer.

Each :meth:`StreamingSession.accept` resamples the new audio, extends the
filterbank frames, runs the encoder on them from its carried state, and hands
the new encoder states to the search one at a time, so every decision (token,
endpoint) happens at the same state whatever the chunking. Feeding a whole
file at once is therefore offline decoding: the two give the same transcript.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch

from asr.audio import HopLoudness, StreamResampler, check_sample_rate, check_samples
from asr.config import Config, DecodeConfig
from asr.decoding import Segment, SegmentSearch, search_states
from asr.events import Event
from asr.final_pass import FinalsInBackground, PendingFinal, write_finals
from asr.frontend import Frontend, PauseRestart, frames_of_each
from asr.lm import TokenLM
from asr.model import Seq2Seq
from asr.spelled_pass import SpelledPass
from asr.speller import Policy, SpellerModel, SpellerOptions
from asr.tokenizer import Tokenizer
from asr.whisper_encoder import WhisperEncoder
from asr.whisper_finals import FinalText, WhisperFinals

_MKLDNN_SWITCH = threading.Lock()
TWO_PASS_MAX_SEGMENT_S = 30.0  # Whisper's positions end at 30 s


def two_pass_teacher(frontend: Frontend, decode: DecodeConfig) -> WhisperEncoder:
    """The full-attention encoder that two-pass finals read (loaded on first use); a ValueError
    naming what is missing or which setting stops them."""
    teacher = frontend.full_attention()
    check_whisper_window(decode, "two-pass finals")
    return teacher


def check_whisper_window(decode: DecodeConfig, what: str) -> None:
    """A ValueError unless a segment fits Whisper's 30 s window, which ``what`` reads."""
    if decode.max_segment_s > TWO_PASS_MAX_SEGMENT_S:
        raise ValueError(
            f"{what} cover at most {TWO_PASS_MAX_SEGMENT_S:g} s: "
            f"set decode.max_segment_s <= {TWO_PASS_MAX_SEGMENT_S:g}"
        )


@contextmanager
def _native_lstm() -> Iterator[None]:
    """Run the encoder's LSTMs on PyTorch's native CPU kernel rather than oneDNN's.

    oneDNN re-lays out the LSTM weights on every call, which for the few frames
    of a streaming chunk costs 2-3x the arithmetic. The switch is process-wide,
    so concurrent sessions take a lock (every session then runs the same kernel,
    which keeps streaming and offline results identical).
    """
    with _MKLDNN_SWITCH:
        previous = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = False
        try:
            yield
        finally:
            torch.backends.mkldnn.enabled = previous


def step_sessions(
    sessions: Sequence[StreamingSession],
    inputs: Sequence[np.ndarray | None],
    background: FinalsInBackground | None = None,
) -> list[list[Event] | Exception]:
    """One step of many sessions of one model: new audio for each (None: finish it).

    The front end and the search run per session; the encoder runs once for all of
    them (``Encoder.forward_streams``). A session's bad input becomes its own
    outcome (the exception) and leaves the others untouched. A session listed more
    than once has its inputs taken in order, one per round.

    Whisper's finals of the segments that close in a round are written as one batch: in
    the step (``background`` None), or by ``background`` beside the steps, each session
    then getting its finals with a later step's events (its finish waits for them).
    """
    outcomes: list[list[Event] | Exception] = [[] for _ in sessions]
    rounds: list[list[int]] = []
    seen: dict[int, int] = {}
    for k, session in enumerate(sessions):
        count = seen[id(session)] = seen.get(id(session), -1) + 1
        if count == len(rounds):
            rounds.append([])
        rounds[count].append(k)
    for members in rounds:
        results = _step_round(
            [sessions[k] for k in members], [inputs[k] for k in members], background
        )
        for k, outcome in zip(members, results):
            outcomes[k] = outcome
    return outcomes


@torch.inference_mode()  # no_grad's bookkeeping too is per op: a few percent of serving
def _step_round(
    sessions: Sequence[StreamingSession],
    inputs: Sequence[np.ndarray | None],
    background: FinalsInBackground | None,
) -> list[list[Event] | Exception]:
    outcomes: list[list[Event] | Exception] = [[] for _ in sessions]
    audio: dict[int, np.ndarray] = {}
    for k, (session, samples) in enumerate(zip(sessions, inputs)):
        try:
            audio[k] = session._audio(samples)
        except Exception as err:
            outcomes[k] = err
    streams = [sessions[k]._frames for k in audio]
    finishing = [inputs[k] is None for k in audio]
    frames: dict[int, np.ndarray] = {}
    for k, got in zip(audio, frames_of_each(streams, list(audio.values()), finishing)):
        if isinstance(got, ValueError):
            outcomes[k] = got
        else:
            frames[k] = got
    encoded: dict[int, torch.Tensor] = {}
    ready = [k for k, f in frames.items() if len(f)]
    if ready:
        model = sessions[ready[0]].model
        if any(sessions[k].model is not model for k in ready):
            raise ValueError("step_sessions needs sessions of one model")
        with _native_lstm():
            split = [
                sessions[k]._encode_restarts(
                    model.encoder.normalize(torch.from_numpy(frames[k]).unsqueeze(0))
                )
                for k in ready
            ]
            states, carried = model.encoder.forward_streams(
                [rest for _, rest in split], [sessions[k]._encoder_state for k in ready]
            )
        for k, (done, _), out, state in zip(ready, split, states, carried):
            encoded[k] = torch.cat([*done, out], dim=1) if done else out
            sessions[k]._encoder_state = state
    decoded: dict[int, list[Event | PendingFinal]] = {}
    for k in frames:
        try:
            decoded[k] = sessions[k]._decode(encoded.get(k), frames[k])
        except Exception as err:
            outcomes[k] = err
    if background is None:
        for k, outcome in write_finals(decoded).items():
            outcomes[k] = outcome
    else:
        for k, events in decoded.items():
            outcomes[k] = background.exchange(sessions[k], events, sessions[k].finished)
    return outcomes


def _joined(parts: list[Segment], segment: Segment, offset: int = 0) -> Segment:
    """The tokens of a second search's ``parts`` as ``segment``'s final (their selecting
    states moved by ``offset``: a search over the segment's states alone counts from 0)."""
    tokens = [t for part in parts for t in part.tokens]
    positions = [p + offset if p >= 0 else p for part in parts for p in part.positions]
    return Segment(tokens, positions, segment.start, segment.end)


def _raise_or_return(outcome: list[Event] | Exception) -> list[Event]:
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


class StreamingSession:
    """One audio stream. Not thread-safe: one caller at a time."""

    def __init__(
        self,
        model: Seq2Seq,
        tokenizer: Tokenizer,
        config: Config,
        sample_rate: int,
        frontend: Frontend,
        lm: TokenLM | None = None,
        whisper: WhisperFinals | None = None,
        speller: tuple[SpellerModel, Policy] | None = None,
    ) -> None:
        """``whisper``: with two-pass finals, Whisper's decoder writes them (else the model's
        own decoder reads the teacher's states). ``speller``: Whisper's decoder and the learnt
        policy that spell the streaming pass where ``decode.streaming_decoder`` asks for it."""
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.sample_rate = check_sample_rate(sample_rate)
        self._resampler = StreamResampler(self.sample_rate, frontend.sample_rate)
        decode = config.decode
        restart = decode.restart_pause_s
        self._frames = frontend.stream(
            PauseRestart(restart, decode.silence_threshold_db) if restart > 0 else None
        )
        self._teacher = two_pass_teacher(frontend, decode) if decode.two_pass else None
        self._whisper = whisper if self._teacher is not None else None
        # finals written beside the steps (asr.final_pass.FinalsInBackground): how many are
        # being written, and those written that a step has not handed out yet
        self._finals_waiting = 0
        self._finals_written: list[Event | Exception] = []
        if self._teacher is not None:
            self._frames.keep = True  # type: ignore[attr-defined]
        self._encoder_state = model.encoder.initial_state(1)
        self._frames_encoded = 0  # front-end frames through the LAS encoder so far
        if restart > 0 and frontend.encoder is not None:
            chunk = config.model.whisper.chunk
            if chunk % model.encoder.reduction:
                raise ValueError(
                    f"decode.restart_pause_s needs model.whisper.chunk ({chunk}) to be a "
                    f"multiple of the encoder's reduction ({model.encoder.reduction})"
                )
        self._restarts: deque[int] = deque()  # encoder states at which a segment must begin
        self._lm = lm
        # greedy partials: the search that runs as audio comes is greedy without the LM, and
        # each final comes from a search with the beam and the LM over its segment's states
        # (where Whisper's decoder spells the streaming pass, the search only finds where
        # segments end, greedily)
        spelled = decode.streaming_decoder == "whisper"
        self._decode_finals = (
            not spelled
            and decode.greedy_partials
            and (decode.beam_size > 1 or decode.lm_weight > 0)
        )
        greedy = self._decode_finals or spelled
        self._search = SegmentSearch(model, decode.greedy() if greedy else decode, lm)
        # That search runs alongside the greedy one (two-pass finals search the teacher's
        # states instead), fed each state once the greedy segment surely holds it, so that
        # a final costs at its end only the segment's last few states, not the whole segment
        self._finals: SegmentSearch | None = None
        if self._decode_finals and self._teacher is None:
            self._finals = SegmentSearch(model, decode, lm)
        # states (and their keys) the finals' search awaits
        self._finals_unfed: deque[tuple[torch.Tensor, torch.Tensor]] = deque()
        self._finals_parts: list[Segment] = []  # what it ended inside the greedy segment
        self._loudness = HopLoudness(int(round(frontend.sample_rate * frontend.frame_seconds)))
        self._hop_db: deque[float] = deque()  # loudness of frames not yet in a state
        self._frames_per_state = model.encoder.reduction
        self._spelled: SpelledPass | None = None
        if spelled:
            if speller is None:
                raise ValueError(
                    "decode.streaming_decoder 'whisper' needs Whisper's decoder and a learnt "
                    "policy (the bundle's speller_policy.safetensors)"
                )
            check_whisper_window(decode, "Whisper's streaming decoder's segments")
            stall = round(decode.speller_stall_s / frontend.frame_seconds)  # student states
            options = SpellerOptions(beam=decode.speller_beam, stall=stall)
            self._spelled = SpelledPass(*speller, self._frames_per_state, options)
        self.state_seconds = self._frames_per_state * frontend.frame_seconds
        self._silent_states = 0
        self._segment = 0
        self._partial: list[int] = []
        self._finished = False
        self.audio_seconds = 0.0

    # -- public -----------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def retained_states(self) -> int:
        """Encoder states held in memory (bounded: older ones are dropped)."""
        return self._search.retained_states

    @property
    def energy_evaluations(self) -> int:
        return self._search.evaluations

    def accept(self, samples: np.ndarray) -> list[Event]:
        """Feed audio at the session's rate (float, clipped to [-1, 1], or int16); new events."""
        return _raise_or_return(step_sessions([self], [samples])[0])

    def finish(self) -> list[Event]:
        """Flush the audio pipeline and the decoder; return the last events."""
        return _raise_or_return(step_sessions([self], [None])[0])

    # -- pipeline ---------------------------------------------------------------
    def _audio(self, samples: np.ndarray | None) -> np.ndarray:
        """Validate and resample new audio to the front end's rate (maybe no samples yet);
        None flushes (finish): the resampler's tail."""
        if self._finished:
            raise ValueError(
                "finish() called twice"
                if samples is None
                else "accept() after finish(): start a new session"
            )
        if samples is None:
            self._finished = True
            decode = self.config.decode
            pad_s = decode.end_pad_s
            if self._spelled is not None:  # Whisper's pass ends its last segment as a pause
                # ends one mid-stream; its adapters read a memory that stops sooner as speech
                # cut off, and wait on it (the close then loses the last word)
                pad_s = max(pad_s, decode.restart_pause_s)
            pad = round(pad_s * self._resampler.dst)
            audio16k = np.concatenate([self._resampler.flush(), np.zeros(pad, np.float32)])
        else:
            x = check_samples(samples, clip=True)  # validates before any state changes
            self.audio_seconds += len(x) / self.sample_rate
            audio16k = self._resampler.process(x)
        self._hop_db.extend(self._loudness.add(audio16k).tolist())
        return audio16k

    def _encode_restarts(self, feats: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The LAS encoder over new normalised frames [1, T, F] up to the front end's last
        restart among them, its state starting afresh at each (as the Whisper encoder's
        context did, and as every training utterance begins): (the encoder states made so
        far, the frames after the last restart, for the caller to encode with other streams').
        Each restart is also where the search must begin a segment."""
        encoder = self.model.encoder
        done = []
        for frame in self._frames.take_restarts():
            cut = frame - self._frames_encoded
            if cut > 0:
                out, self._encoder_state = encoder(feats[:, :cut], self._encoder_state)
                done.append(out)
                feats = feats[:, cut:]
                self._frames_encoded = frame
            self._encoder_state = encoder.initial_state(1)
            self._restarts.append(frame // encoder.reduction)
        self._frames_encoded += feats.shape[1]
        return done, feats

    def _decode(self, states: torch.Tensor | None, heard: np.ndarray) -> list[Event | PendingFinal]:
        """Search the new encoder states [1, n, D] one at a time (``heard``: the front end's
        new frames, which Whisper's decoder spells where it writes the streaming pass);
        after finish, end the stream."""
        events: list[Event | PendingFinal] = []
        if self._spelled is not None:
            self._spelled.add(heard)
        if states is not None:
            for state in states[0]:
                events += self._on_state(state.unsqueeze(0))
        search = self._search
        if self._finished:
            while search.segment_start < search.states_seen:
                events += self._final(search.advance(complete=True))
            if self._spelled is not None:
                events += self._spelled_final(search.states_seen)
        elif self._spelled is not None and self._spelled.read_until(search.states_seen):
            events.append(self._spelled_event("partial", search.states_seen))
        return events

    def _on_state(self, state: torch.Tensor) -> list[Event | PendingFinal]:
        search = self._search
        decode = self.config.decode
        events: list[Event | PendingFinal] = []
        if self._restarts and self._restarts[0] == search.states_seen:
            # the encoders started afresh here after a pause: so does the segment
            self._restarts.popleft()
            events += self._endpoint()
        keys = self.model.decoder.attention.keys(state)
        search.append(state, keys)
        if self._finals is not None:
            self._finals_unfed.append((state, keys))
        silent = self._state_is_silent()
        self._silent_states = self._silent_states + 1 if silent else 0
        while True:
            segment = search.advance(complete=False)
            if segment is None:
                break
            events += self._final(segment)
        prefix = search.stable_prefix()
        if prefix != self._partial and self._spelled is None:
            self._partial = prefix
            positions = search.best_positions[: len(prefix)]
            events.append(
                self._event("partial", prefix, search.segment_start, search.states_seen, positions)
            )
        self._feed_finals(search.undecided_from)
        # Forced endpoints, checked at every state so that chunking cannot move them.
        start, said = search.segment_start, search.best_tokens
        if self._spelled is not None:  # its segments end at endpoints alone
            start, said = self._spelled.start, self._spelled.tokens
        seconds_in_segment = (search.states_seen - start) * self.state_seconds
        trailing_silence = self._silent_states * self.state_seconds
        if (
            decode.endpoint_silence_s > 0 and trailing_silence >= decode.endpoint_silence_s and said
        ) or seconds_in_segment >= decode.max_segment_s:
            events += self._endpoint()
        return events

    def _endpoint(self) -> list[Event | PendingFinal]:
        """End the segment after the states seen so far; the next one begins there."""
        search = self._search
        events = self._final(search.end_segment())
        if self._spelled is not None:
            events += self._spelled_final(search.states_seen)
        search.restart_at(search.states_seen)
        if self._finals is not None:  # the next segment starts there for both searches
            self._feed_finals(search.states_seen, decode=False)
            self._finals.restart_at(search.states_seen)
            self._finals_parts = []
        # The next segment needs trailing silence of its own: without this, one
        # token decoded in the same pause would close it again at once.
        self._silent_states = 0
        return events

    def _final(self, segment: Segment | None) -> list[Event | PendingFinal]:
        """The final of a segment the search ended (None: it heard nothing): the streaming
        pass's, or Whisper's to be written (:class:`PendingFinal`). Where Whisper's decoder
        spells the streaming pass, the search's segments only say whether it heard words:
        the spelled segments end at endpoints alone (:meth:`_spelled_final`)."""
        self._partial = []
        if self._spelled is not None:
            self._spelled.heard |= segment is not None and bool(segment.tokens)
            return []
        if segment is None:
            return []
        if segment.tokens and self._whisper is not None:
            first = self._event(
                "final", segment.tokens, segment.start, segment.end, segment.positions
            )
            pending = self._pending_final(first, segment.start, segment.end)
            if pending is not None:
                return [pending]
        if self._teacher is not None:
            segment = self._second_pass(segment)
        elif self._finals is not None:  # (an empty greedy segment may hold the beam's words)
            segment = self._final_from_beam(segment)
        if not segment.tokens:
            return []
        event = self._event("final", segment.tokens, segment.start, segment.end, segment.positions)
        self._segment += 1
        return [event]

    def _pending_final(self, first: Event, start: int, end: int) -> PendingFinal | None:
        """With Whisper's finals, the segment of encoder states [start, end) to be written by
        them, ``first`` (the streaming pass's final) its fallback; else None."""
        if self._whisper is None:
            return None
        mel = self._segment_mel(start, end)
        if len(mel) < 2:
            return None
        self._segment += 1
        return PendingFinal(self, start, end, first.segment, mel, first)

    def _spelled_final(self, closes_at: int) -> list[Event | PendingFinal]:
        """Close the spelled pass's segment before encoder state ``closes_at``: its final
        (or Whisper's to be written), none if it said nothing."""
        assert self._spelled is not None
        start = self._spelled.start
        first = self._spelled_event("final", closes_at)
        if not first.tokens:
            return []
        pending = self._pending_final(first, start, closes_at)
        if pending is not None:
            return [pending]
        self._segment += 1
        return [first]

    def _spelled_event(self, kind: str, until: int) -> Event:
        """The spelled pass's event of its open segment, from the encoder states before
        ``until``: a partial of its tokens so far (ending at the audio heard), or its final,
        closing the segment there (ending at its last token). Each token is timed at its
        boundary."""
        spelled = self._spelled
        assert spelled is not None
        start = spelled.start
        if kind == "final":
            tokens, boundaries = spelled.close(until)
            end = boundaries[-1] if boundaries else until * self._frames_per_state
        else:
            tokens, boundaries = spelled.tokens, spelled.boundaries
            end = until * self._frames_per_state
        per_state = self.state_seconds / self._frames_per_state
        return Event(
            kind=kind,  # type: ignore[arg-type]
            segment=self._segment,
            text=spelled.text(tokens),
            tokens=spelled.pieces(tokens),
            start=self._seconds(start),
            end=round(end * per_state, 3),
            token_times=[round(b * per_state, 3) for b in boundaries],
        )

    def _feed_finals(self, before: int, decode: bool = True) -> None:
        """Give the finals' search the states before ``before`` it has not had, and search
        them (unless ``decode`` is false: states the greedy search skipped)."""
        finals = self._finals
        if finals is None:
            return
        count = min(before - finals.states_seen, len(self._finals_unfed))
        fed = [self._finals_unfed.popleft() for _ in range(max(count, 0))]
        if not fed:
            return
        finals.append(torch.cat([s for s, _ in fed]), torch.cat([k for _, k in fed]))
        while decode:
            part = finals.advance(complete=False)
            if part is None:
                break
            self._finals_parts.append(part)

    def _final_from_beam(self, segment: Segment) -> Segment:
        """The greedy segment's final from the finals' search: its remaining states, then the
        search run to the segment's end as over complete memory."""
        finals = self._finals
        assert finals is not None
        self._feed_finals(segment.end)
        while finals.segment_start < segment.end:
            part = finals.advance(complete=True)
            if part is not None:
                self._finals_parts.append(part)
        parts, self._finals_parts = self._finals_parts, []
        return _joined(parts, segment)

    def _second_pass(self, segment: Segment) -> Segment:
        """The segment again, from the full-attention teacher over its log-mel frames, through
        the same LAS layers (from a fresh state, as training runs each utterance) and decoder."""
        assert self._teacher is not None
        mel = self._segment_mel(segment.start, segment.end)
        if not segment.tokens or len(mel) < 2:
            return segment  # the streaming pass heard nothing here: no second look
        states, _ = self._teacher(mel.unsqueeze(0))
        memory, lengths = self.model.encode(states, torch.tensor([states.shape[1]]))
        return self._decode_again(segment, memory[0, : int(lengths[0])])

    def _segment_mel(self, start: int, end: int) -> torch.Tensor:
        """The log-mel frames of the audio of encoder states [start, end) (kept for the second
        pass)."""
        mel_per_state = 2 * self._frames_per_state
        return self._frames.mel_between(  # type: ignore[attr-defined]
            start * mel_per_state, end * mel_per_state
        )

    def _written(self, pending: PendingFinal, text: FinalText) -> Event:
        """The final Whisper wrote for a pending segment: its cased, punctuated text (empty
        where it heard no speech), each token timed by its alignment; the first pass's final
        where Whisper's text failed its loop check."""
        if text.fallback:
            return pending.fallback
        start = self._seconds(pending.start)
        step = self.state_seconds / self._frames_per_state  # the teacher's states
        end = self._seconds(pending.end)
        times = [min(round(start + e * step, 3), end) for e in text.ends]
        return Event(
            kind="final",
            segment=pending.number,
            text=text.text,
            tokens=text.pieces,
            start=start,
            end=max(times, default=end),
            token_times=times,
        )

    def _decode_again(self, segment: Segment, states: torch.Tensor) -> Segment:
        """The segment's final from a search over all of its (teacher's) encoder ``states`` at
        once, with the beam and the language model of decode."""
        found = search_states(self.model, states, self.config.decode, self._lm)
        return _joined(found, segment, offset=segment.start)

    def _event(
        self,
        kind: str,
        tokens: list[int],
        start: int,
        end: int,
        positions: list[int],
    ) -> Event:
        """An event over encoder states [start, end); ``positions``: the state that selected
        each token. A final ends at its last token's state; a partial at the audio heard."""
        if kind == "final" and positions and positions[-1] >= 0:
            end = min(end, positions[-1] + 1)
        # A token can be shown once the state that selected it is complete; one that no state
        # selected (the search never emits such a token, but the type allows it) gets the end.
        emitted = [min(p + 1, end) if p >= 0 else end for p in positions]
        return Event(
            kind=kind,  # type: ignore[arg-type]
            segment=self._segment,
            text=self.tokenizer.decode(tokens),
            tokens=self.tokenizer.pieces(tokens),
            start=self._seconds(start),
            end=self._seconds(end),
            token_times=[self._seconds(state) for state in emitted],
        )

    def _seconds(self, states: int) -> float:
        return round(states * self.state_seconds, 3)

    # -- trailing-silence detection ----------------------------------------------
    def _state_is_silent(self) -> bool:
        n = min(self._frames_per_state, len(self._hop_db))
        loudest = max((self._hop_db.popleft() for _ in range(n)), default=-120.0)
        return loudest < self.config.decode.silence_threshold_db
