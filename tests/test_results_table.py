"""The README's results table is the bundled model's metrics.json, the file its model card is
rendered from: one source for every figure of both."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from asr.speller import ADAPTER_FILE
from training.recipes import results_table
from training.recipes.results_table import BEGIN, END, render

REPO = Path(__file__).resolve().parents[1]
METRICS = json.loads((REPO / "models" / "default" / "metrics.json").read_text())


def readme_table(text: str) -> str:
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()


def test_the_readme_table_equals_the_bundled_models_metrics() -> None:
    table = readme_table((REPO / "README.md").read_text())
    assert table == render(METRICS)
    streaming = METRICS["monotonic"]["eval"]["test_short"]["wer"]["rate"]
    beam = METRICS["monotonic"]["fusion"]["eval"]["real"]["wer"]["rate"]
    assert f" / {100 * streaming:.1f}% | `python bench/real_speech.py --model models/def" in table
    assert f"| {100 * beam:.1f}% / " in table
    assert f"| {METRICS['rtf']['rtf']:.3f} | `python bench/streaming.py" in table
    assert f"| {METRICS['megabytes']:.1f} MB |" in table
    assert len(table.splitlines()) == 2 + len(results_table.ROWS)  # every row has its key


def test_a_key_metrics_json_lacks_leaves_its_row_out() -> None:
    metrics = copy.deepcopy(METRICS)
    metrics["load"] = None
    metrics["monotonic"]["eval"].pop("real")
    del metrics["whisper_finals"]  # every row of Whisper's finals goes with it
    del metrics["whisper_streaming"]  # and every row of the streaming pass it spells
    lines = render(metrics).splitlines()
    assert not any("bench/load.py" in line or "--two-pass" in line for line in lines)
    labels = [line.split(" | ")[0] for line in lines[2:]]  # one-pass commands say --no-two-pass
    assert not any("two-pass" in label or "Whisper" in label for label in labels)
    streaming = next(line for line in lines if line.startswith("| WER, the streaming pass ("))
    assert "| - / " in streaming  # the synthetic splits without the real recordings
    finals = len(results_table.FINALS_ROWS) + len(results_table.CAPACITY_ROWS)
    dropped = finals + len(results_table.SPELLED_ROWS)
    assert len(lines) == len(render(METRICS).splitlines()) - 1 - dropped  # and the load row


def test_check_reports_a_stale_table_and_a_run_without_it_rewrites_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "README.md"
    stale = f"# title\n\n{BEGIN}\n| old |\n{END}\n\nafter\n"
    readme.write_text(stale)
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps(METRICS))
    argv = ["--readme", str(readme), "--metrics", str(metrics)]
    assert results_table.main([*argv, "--check"]) == 1
    assert "the results table differs" in capsys.readouterr().err
    assert readme.read_text() == stale
    assert results_table.main(argv) == 0
    assert readme.read_text() == f"# title\n\n{BEGIN}\n{render(METRICS)}\n{END}\n\nafter\n"
    assert results_table.main([*argv, "--check"]) == 0


def copied(tmp_path: Path) -> tuple[Path, Path]:
    """The bundle's small files (its metrics.json and config.json with them) and the README,
    for finals_metrics to rewrite."""
    bundle = tmp_path / "bundle"
    shutil.copytree(
        REPO / "models" / "default",
        bundle,
        ignore=shutil.ignore_patterns("*.safetensors", "lm.npz"),
    )
    readme = tmp_path / "README.md"
    shutil.copy(REPO / "README.md", readme)
    return bundle, readme


def test_recording_one_benchmark_keeps_the_others_figures(tmp_path: Path) -> None:
    """finals_metrics --latency alone replaces the latency and keeps the WER and capacity."""
    from training.recipes import finals_metrics

    bundle, readme = copied(tmp_path)
    before = json.loads((bundle / "metrics.json").read_text())["whisper_finals"]
    latency = json.loads(json.dumps(before["final_latency"]))
    latency["2s"]["marker"] = 1  # told apart from the recorded figures
    (tmp_path / "latency.json").write_text(json.dumps(latency))
    args = ["--metrics", str(bundle / "metrics.json"), "--readme", str(readme)]
    assert finals_metrics.main([*args, "--latency", str(tmp_path / "latency.json")]) == 0
    after = json.loads((bundle / "metrics.json").read_text())["whisper_finals"]
    assert after["final_latency"] == latency
    assert after["eval"] == before["eval"] and after["capacity"] == before["capacity"]


def test_recording_some_rows_of_a_set_keeps_its_other_rows(tmp_path: Path) -> None:
    """finals_metrics --real with two-pass alone (bench/real_speech.py --no-whisper) replaces
    that row and keeps Whisper-base's and pocketsphinx's of the same recordings; a
    different set of recordings replaces them all."""
    from training.recipes import finals_metrics

    bundle, readme = copied(tmp_path)
    before = json.loads((bundle / "metrics.json").read_text())["whisper_finals"]["eval"]["real"]
    two_pass = dict(before["wer"]["two-pass"], errors=1, rate=1 / 607)
    bench = {"all": {k: before[k] for k in ("utterances", "minutes")}}
    bench["all"]["wer"] = {"models/default two-pass": two_pass}
    (tmp_path / "real.json").write_text(json.dumps(bench))
    args = ["--metrics", str(bundle / "metrics.json"), "--readme", str(readme)]
    assert finals_metrics.main([*args, "--real", str(tmp_path / "real.json")]) == 0
    after = json.loads((bundle / "metrics.json").read_text())["whisper_finals"]["eval"]["real"]
    assert after["wer"] == before["wer"] | {"two-pass": two_pass}
    kept = [f"{100 * before['wer'][m]['rate']:.1f}%" for m in ("one-pass", "whisper-base")]
    pocketsphinx = f"{100 * before['wer']['pocketsphinx']['rate']:.1f}%"
    assert f"| {kept[0]} / 0.2% / {kept[1]} / {pocketsphinx} |" in readme.read_text()
    bench["all"]["utterances"] = 65
    (tmp_path / "real.json").write_text(json.dumps(bench))
    assert finals_metrics.main([*args, "--real", str(tmp_path / "real.json")]) == 0
    after = json.loads((bundle / "metrics.json").read_text())["whisper_finals"]["eval"]["real"]
    assert after["wer"] == {"two-pass": two_pass}


def test_recording_the_spelled_pass_fills_its_rows_and_the_card(tmp_path: Path) -> None:
    """finals_metrics --spelled-* records the streaming pass by Whisper's decoder from the
    benchmarks' JSON (real_speech.py's one model, word_latency.py's :whisper row among
    others, streaming.py's real-time factor): the README's rows and the card's section show
    them, and recording one of them again keeps the others."""
    from training.recipes import finals_metrics

    bundle, readme = copied(tmp_path)
    metrics = json.loads((bundle / "metrics.json").read_text())
    metrics.pop("whisper_streaming", None)  # recorded afresh here
    (bundle / "metrics.json").write_text(json.dumps(metrics))
    args = ["--metrics", str(bundle / "metrics.json"), "--readme", str(readme)]

    def wer(errors: int, words: int) -> dict:
        return {"errors": errors, "reference_length": words, "rate": errors / words}

    real = {"all": {"utterances": 66, "minutes": 6.7, "wer": {"models/default": wer(300, 600)}}}
    splits = {
        "test_seen_voices": {"utterances": 200, "minutes": 9.0, "wer": {"m": wer(20, 100)}},
        "test_short": {"utterances": 200, "minutes": 4.2, "wer": {"m": wer(40, 100)}},
    }
    rows = [
        {"model": "models/default:greedy", "latency_ms": {"median": 180.0, "p95": 340.0}},
        {"model": "models/default:whisper", "latency_ms": {"median": 200.0, "p95": 1500.0}},
    ]
    capacity = {"finals": "one-pass", "streaming_decoder": "whisper", "phases": {}}
    files = {
        "real.json": real,
        "synthetic.json": splits,
        "latency.json": {"models": rows},
        "rtf.json": {"rtf": 0.25},
        "steady.json": capacity | {"load": "steady", "capacity": 25},
        "burst.json": capacity | {"load": "burst", "capacity": 20},
    }
    for name, content in files.items():
        (tmp_path / name).write_text(json.dumps(content))
    flags = ["--spelled-real", "--spelled-synthetic", "--spelled-word-latency", "--spelled-rtf"]
    given = [x for flag, name in zip(flags, files) for x in (flag, str(tmp_path / name))]
    given += ["--spelled-capacity", str(tmp_path / "steady.json"), str(tmp_path / "burst.json")]
    assert finals_metrics.main([*args, *given]) == 0
    text = readme.read_text()
    assert "unseen voices / short utterances | 50.0% / 20.0% / - / 40.0% |" in text
    assert "the streaming pass by Whisper's decoder | 200 / 1500 ms |" in text
    assert "the streaming pass by Whisper's decoder | 0.250 |" in text
    assert "same second: the streaming pass by Whisper's decoder | 25 / 20 |" in text
    card = (bundle / "README.md").read_text()
    assert "## The streaming pass by Whisper's decoder" in card and "| 66 | 50.00% |" in card
    assert "[--steady]`):\n25 / 20." in card
    assert "speller_adapter.safetensors" not in card  # this copy carries no adapters
    files["rtf.json"] = {"rtf": 0.5}
    (tmp_path / "rtf.json").write_text(json.dumps(files["rtf.json"]))
    # now it carries them: the card says so, and what they were learnt with
    save_file({"lora": torch.zeros(2)}, str(bundle / ADAPTER_FILE), metadata={"rank": "8"})
    assert finals_metrics.main([*args, "--spelled-rtf", str(tmp_path / "rtf.json")]) == 0
    spelled = json.loads((bundle / "metrics.json").read_text())["whisper_streaming"]
    assert spelled["rtf"] == 0.5 and spelled["eval"]["real"]["wer"] == wer(300, 600)
    assert spelled["adapters"] and "low-rank adapters" in (bundle / "README.md").read_text()
    assert spelled["learnt_with"] == {"adapters": {"rank": "8"}}
    assert "learnt with `asr tune-speller --rank 8`." in (bundle / "README.md").read_text()
    assert spelled["word_latency"]["model"] == "models/default:whisper"
    # the pass beside its baselines, per set (bench/streaming_speller.py --json)
    row = {"token_latency_p50_ms": 300.0, "token_latency_p95_ms": 900.0, "within_1s": 0.95}
    rows = [
        row | {"system": "ceiling", "wer": 0.1, "rtf": 0.1},
        row
        | {"system": "learnt:models/default/p.safetensors (silence, words)", "wer": 0.12}
        | {"rtf": 0.15},
        row
        | {"system": "prototype:/work/exp/p.safetensors (silence, words)", "wer": 0.3}
        | {"rtf": 0.2},
        {"system": "lstm greedy", "wer": 0.3, "rtf": 0.05, "token_latency_p50_ms": None}
        | {"token_latency_p95_ms": None, "within_1s": None},
    ]
    manifests = ["data/live/test_seen_voices.jsonl", "/elsewhere/all.jsonl"]
    baselines = [{"manifest": m, "utterances": 50, "unaligned": 0, "rows": rows} for m in manifests]
    (tmp_path / "baselines.json").write_text(json.dumps(baselines))
    assert (
        finals_metrics.main([*args, "--spelled-baselines", str(tmp_path / "baselines.json")]) == 0
    )
    spelled = json.loads((bundle / "metrics.json").read_text())["whisper_streaming"]
    assert set(spelled["baselines"]) == {"test_seen_voices", "real"} and spelled["rtf"] == 0.5
    card = (bundle / "README.md").read_text()
    assert "| learnt | 12.00% | 300 / 900 ms | 95.0% | 0.150 |" in card
    assert "| prototype | 30.00% | 300 / 900 ms | 95.0% | 0.200 |" in card
    assert "| lstm greedy | 30.00% | - | - | 0.050 |" in card


def test_capacity_of_another_streaming_pass_is_refused(tmp_path: Path) -> None:
    """The capacity rows are the default streaming pass's: bench/load.py's figures for
    --streaming-decoder whisper would overwrite them, so finals_metrics refuses them and
    keeps the recorded ones; --spelled-capacity likewise refuses the default pass's."""
    from training.recipes import finals_metrics

    bundle, readme = copied(tmp_path)
    before = (bundle / "metrics.json").read_text()
    figures = {"finals": "one-pass", "streaming_decoder": "whisper", "load": "steady"}
    (tmp_path / "spelled.json").write_text(json.dumps(figures | {"capacity": 1, "phases": {}}))
    args = ["--metrics", str(bundle / "metrics.json"), "--readme", str(readme)]
    with pytest.raises(SystemExit, match="spelled.json: measured with --streaming-decoder"):
        finals_metrics.main([*args, "--capacity", str(tmp_path / "spelled.json")])
    assert (bundle / "metrics.json").read_text() == before
    # and the other way round: the LSTM pass's figures are not the spelled pass's
    lstm = figures | {"streaming_decoder": None, "capacity": 50, "phases": {}}
    (tmp_path / "lstm.json").write_text(json.dumps(lstm))
    with pytest.raises(SystemExit, match="lstm.json: not measured with --no-two-pass"):
        finals_metrics.main([*args, "--spelled-capacity", str(tmp_path / "lstm.json")])
    assert (bundle / "metrics.json").read_text() == before
