"""Server parts without a server: message parsing, the batching worker, settings."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from asr.events import Event
from server.batching import BatchWorker
from server.protocol import (
    CLOSE_CODES,
    MAX_CONTROL_DEPTH,
    CloseCode,
    ErrorCode,
    ProtocolError,
    Result,
    Start,
    Stop,
    json_depth,
    parse_client_message,
    schemas,
)
from server.settings import Settings
from server.supervision import restart_delay

LIMIT = 4096  # control frame bytes, as the server's default


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("{oops", ErrorCode.BAD_JSON),
        ('"start"', ErrorCode.INVALID_MESSAGE),
        ('{"sample_rate": 16000}', ErrorCode.UNKNOWN_TYPE),
        ('{"type": "startx", "sample_rate": 16000}', ErrorCode.UNKNOWN_TYPE),
        ('{"type": ["start"]}', ErrorCode.UNKNOWN_TYPE),
        ('{"type": "start", "sample_rate": 7999}', ErrorCode.UNSUPPORTED_SAMPLE_RATE),
        ('{"type": "start", "sample_rate": 48001}', ErrorCode.UNSUPPORTED_SAMPLE_RATE),
        # strict types: no coercion from strings, floats or bools; a wrong type is not an
        # unsupported value
        ('{"type": "start", "sample_rate": "fast"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "start", "sample_rate": "16000"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "start", "sample_rate": 16000.0}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "start", "sample_rate": true}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "start", "sample_rate": null}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "start", "sample_rate": [16000]}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "start", "sample_rate": NaN}', ErrorCode.BAD_JSON),
        ('{"type": "start", "sample_rate": 16000, "encoding": 1}', ErrorCode.INVALID_MESSAGE),
        (
            '{"type": "start", "sample_rate": 16000, "encoding": ["f32le"]}',
            ErrorCode.INVALID_MESSAGE,
        ),
        ('{"type": "stop", "now": true}', ErrorCode.INVALID_MESSAGE),
        (
            '{"type": "start", "sample_rate": 16000, "encoding": "opus"}',
            ErrorCode.UNSUPPORTED_ENCODING,
        ),
        ('{"type": "start"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "start", "sample_rate": 16000, "rate": 1}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "start", "sample_rate": 16000, "two_pass": "true"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "start", "sample_rate": 16000, "two_pass": 1}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "start", "sample_rate": 16000, "two_pass": 0}', ErrorCode.INVALID_MESSAGE),
    ],
)
def test_bad_client_messages_get_typed_codes(text, code):
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(text, LIMIT)
    assert caught.value.code == code
    assert caught.value.close_code in (1003, 1007)


def test_client_messages_dispatch_on_type():
    start = parse_client_message(
        '{"type": "start", "sample_rate": 8000, "encoding": "f32le"}', LIMIT
    )
    assert start == Start(sample_rate=8000, encoding="f32le")
    assert start.two_pass is None  # the model's default
    for value in (True, False):
        text = json.dumps({"type": "start", "sample_rate": 16000, "two_pass": value})
        assert parse_client_message(text, LIMIT).two_pass is value
    assert parse_client_message('{"type": "stop"}', LIMIT) == Stop()


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("{}", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('{"a": "[[[[{{{{"}', 1),  # brackets inside strings do not nest
        ('{"a": "quote \\" [[[", "b": [[]]}', 3),  # nor after an escaped quote
        ('{"a": "backslash \\\\", "b": [[]]}', 3),  # an escaped backslash ends no string
        ("[" * 100_000, 100_000),  # counted without recursion
        ("16000", 0),
    ],
)
def test_json_depth(text, depth):
    assert json_depth(text) == depth


def test_deep_and_long_control_frames_are_refused_before_parsing():
    deep = "[" * 100_000 + "]" * 100_000  # 200 kB: the JSON parser would recurse 100,000 times
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(deep, LIMIT)
    assert (caught.value.code, caught.value.close_code) == (ErrorCode.BAD_JSON, 1007)
    nested = (
        '{"type": "start", "sample_rate": 16000, "x": '
        + "[" * MAX_CONTROL_DEPTH
        + "]" * MAX_CONTROL_DEPTH
        + "}"
    )
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(nested, LIMIT)
    assert caught.value.code == ErrorCode.BAD_JSON
    assert "nests deeper" in caught.value.message
    long = '{"type": "start", "sample_rate": 16000, "pad": "' + "x" * LIMIT + '"}'
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(long, LIMIT)
    assert (caught.value.code, caught.value.close_code) == (ErrorCode.CONTROL_TOO_LARGE, 1009)
    # the limit counts bytes: 2,048 two-byte characters exceed 4,096 bytes
    wide = '{"type": "stop", "x": "' + "é" * (LIMIT // 2) + '"}'
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(wide, LIMIT)
    assert caught.value.code == ErrorCode.CONTROL_TOO_LARGE


def test_restart_delay_doubles_up_to_its_cap():
    delays = [restart_delay(n, 1.0, 60.0) for n in range(9)]
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


def protocol_close_table() -> dict[int, set[str]]:
    """The "Errors and close codes" table of docs/protocol.md: close code -> the error codes
    in its row (an error code is a backquoted name; other backquoted words there are message
    types)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "protocol.md").read_text()
    section = text[text.index("## Errors and close codes") :].split("\n## ")[0]
    rows = [line for line in section.splitlines() if re.match(r"\| \d{4} \|", line)]
    names = {code.value for code in ErrorCode}
    table = {}
    for row in rows:
        close, cell = row.strip("|").split("|", 1)
        table[int(close)] = set(re.findall(r"`([a-z_]+)`", cell)) & names
    return table


def test_protocol_doc_and_schemas_list_every_error_code_with_its_close_code():
    """Every typed error of the protocol is in the protocol's table, on its close code's row,
    and every close code the server uses has a row; /v1/schemas serves the same mapping."""
    table = protocol_close_table()
    used = {v for k, v in vars(CloseCode).items() if k.isupper()}
    assert set(table) == used
    listed = {(name, close) for close, names in table.items() for name in names}
    assert listed == {(code.value, close) for code, close in CLOSE_CODES.items()}
    assert set(CLOSE_CODES) == set(ErrorCode)
    served = schemas()
    assert served["close_codes"] == {code.value: close for code, close in CLOSE_CODES.items()}
    assert set(served["server"]["$defs"]["ErrorCode"]["enum"]) == set(served["close_codes"])


def test_result_carries_the_final_flag():
    event = Event("final", 2, "hi there", ["▁hi", "▁there"], 0.5, 1.25, [0.84, 1.25])
    result = Result.from_event(event).model_dump()
    assert result == {
        "type": "final",
        "segment": 2,
        "text": "hi there",
        "tokens": ["▁hi", "▁there"],
        "start": 0.5,
        "end": 1.25,
        "final": True,
        "token_times": [0.84, 1.25],
    }


class Recorder:
    """A stand-in stream that records which thread ran it and can be told to fail."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.threads: set[str] = set()
        self.samples = 0

    def accept(self, samples: np.ndarray) -> list[Event]:
        self.threads.add(threading.current_thread().name)
        if self.fail:
            raise ValueError("bad audio")
        self.samples += len(samples)
        return [Event("partial", 0, str(self.samples))]

    def finish(self) -> list[Event]:
        return [Event("final", 0, str(self.samples))]


def test_worker_batches_sessions_and_isolates_failures():
    sizes: list[int] = []

    async def main():
        worker = BatchWorker(max_size=8, max_wait_s=0.05, on_batch=lambda n, _: sizes.append(n))
        worker.start()
        streams = [Recorder(fail=(i == 3)) for i in range(6)]
        outcomes = await asyncio.gather(
            *(worker.accept(s, np.zeros(10, np.float32)) for s in streams), return_exceptions=True
        )
        finals = await worker.finish(streams[0])
        await worker.close()
        return streams, outcomes, finals

    streams, outcomes, finals = asyncio.run(main())
    assert sizes[0] == 6  # one executor hop for all six sessions
    assert isinstance(outcomes[3], ValueError)
    assert [o[0].text for i, o in enumerate(outcomes) if i != 3] == ["10"] * 5
    assert finals[0].final and finals[0].text == "10"
    assert all(s.threads == {"asr-model_0"} for s in streams)  # never on the event loop


def test_worker_respects_max_batch_size():
    sizes: list[int] = []

    async def main():
        worker = BatchWorker(max_size=4, max_wait_s=0.01, on_batch=lambda n, _: sizes.append(n))
        worker.start()
        await asyncio.gather(
            *(worker.accept(Recorder(), np.zeros(1, np.float32)) for _ in range(10))
        )
        # a batch is counted after its outcomes are delivered: the last may lag the gather
        for _ in range(100):
            if sum(sizes) == 10:
                break
            await asyncio.sleep(0.01)
        await worker.close()

    asyncio.run(main())
    assert max(sizes) == 4 and sum(sizes) == 10


def test_settings_validation_and_origins():
    with pytest.raises(ValueError, match="max_sessions"):
        Settings(max_sessions=0)
    settings = Settings(allowed_origins=["https://app.example/"])
    assert settings.origin_allowed(None)  # non-browser clients send no Origin
    assert settings.origin_allowed("https://app.example")
    assert not settings.origin_allowed("https://evil.example")
    assert Settings().origin_allowed("https://anything.example")


def test_worker_runs_finish_steps_first_and_alone():
    """After stop a client waits on finish(); audio steps of other sessions can wait a little,
    and do not join its batch (it would wait for their encoder work)."""
    order: list[str] = []
    sizes: list[int] = []

    class Named(Recorder):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def accept(self, samples):
            order.append(f"accept {self.name}")
            return super().accept(samples)

        def finish(self):
            order.append(f"finish {self.name}")
            return super().finish()

    async def main():
        worker = BatchWorker(max_size=8, max_wait_s=0.0, on_batch=lambda n, _: sizes.append(n))
        worker.start()
        steps = [worker.accept(Named(str(i)), np.zeros(1, np.float32)) for i in range(3)]
        await asyncio.gather(*steps, worker.finish(Named("x")))
        for _ in range(100):  # the last batch is counted just after its outcomes
            if sum(sizes) == 4:
                break
            await asyncio.sleep(0.01)
        await worker.close()

    asyncio.run(main())
    assert order[0] == "finish x"
    assert order[1:] == ["accept 0", "accept 1", "accept 2"]
    assert sizes == [1, 3]


def test_the_audio_that_comes_with_stop_runs_with_the_finish():
    """The last audio and the finish go ahead of other sessions' audio in one batch; the
    events of both come back, and bad last audio is the error."""
    sizes: list[int] = []

    async def main():
        worker = BatchWorker(max_size=8, max_wait_s=0.0, on_batch=lambda n, _: sizes.append(n))
        worker.start()
        others = [Recorder() for _ in range(3)]
        queued = [worker.accept(r, np.zeros(1, np.float32)) for r in others]
        last = Recorder()
        results = await asyncio.gather(*queued, worker.finish(last, np.zeros(5, np.float32)))
        bad = Recorder(fail=True)
        with pytest.raises(ValueError, match="bad audio"):
            await worker.finish(bad, np.zeros(5, np.float32))
        await worker.close()
        return results[-1], bad

    events, bad = asyncio.run(main())
    assert [(e.kind, e.text) for e in events] == [("partial", "5"), ("final", "5")]
    assert sizes[:2] == [2, 3]  # the last audio with its finish first, then the others
    assert bad.threads  # it ran on the model thread
