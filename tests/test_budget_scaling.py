"""bench/experiments/budget_scaling.py: real trainings at two budgets, their held-out WER, the fit, resuming."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.conftest import load_bench
from tests.test_train import TINY, write_manifest

REPO = Path(__file__).resolve().parents[1]


def test_fit_solves_for_the_target() -> None:
    bench = load_bench("experiments/budget_scaling")
    # 50% at 1 step, 40% at 2: -10 points per doubling reaches 10% at 2**4 steps.
    assert bench.needed_steps(*bench.log2_fit([(1, 0.5), (2, 0.4)]), 0.10) == pytest.approx(16.0)
    assert bench.needed_steps(*bench.log2_fit([(1, 0.5), (4, 0.5)]), 0.10) == math.inf


def test_trains_each_budget_once_and_fits_the_held_out_wer(
    tmp_path: Path, speech_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("experiments/budget_scaling")
    data, out = tmp_path / "data", tmp_path / "scaling"
    data.mkdir()
    write_manifest(data / "train.jsonl", speech_dir, copies=3)
    for split in ("dev", "test_seen_voices", "test_unseen_voices"):
        write_manifest(data / f"{split}.jsonl", speech_dir, count=4)
    base = ["--config", str(TINY), "--data", str(data), "--out", str(out)]
    base += ["--set", "train.valid_decode_max=4"]
    args = [*base, "--minutes", "0.05", "0.15"]
    assert bench.main(args) == 0
    printed = capsys.readouterr().out
    assert printed.count("trained ") == 2
    wers, rates = [], []
    for minutes in ("0.05", "0.15"):
        run = out / f"m{minutes}"
        seen = json.loads((run / "eval_test_seen_voices" / "summary.json").read_text())
        facts = bench.training_facts(run)
        assert facts["minutes"] >= float(minutes) - 0.05
        wers.append((facts["steps"], seen["wer"]["rate"]))
        rates.append(facts["steps"] / facts["minutes"])
        row = next(line for line in printed.splitlines() if line.startswith(f"| {minutes} min"))
        assert f"| {facts['steps']} |" in row and f"{100 * seen['wer']['rate']:.2f}%" in row
    need = bench.needed_steps(*bench.log2_fit(wers), 0.10)
    line = next(line for line in printed.splitlines() if line.startswith("test_seen_voices:"))
    if math.isfinite(need):
        hours = need / (sum(rates) / 2) / 60
        assert f"{need:,.0f} steps, {hours:,.0f} h" in line
    else:
        assert "inf steps" in line

    stamps = {p: p.stat().st_mtime for p in out.glob("m*/last.pt")}
    assert bench.main(args) == 0  # finished runs and their evaluations are reused
    assert "trained " not in capsys.readouterr().out
    assert {p: p.stat().st_mtime for p in out.glob("m*/last.pt")} == stamps

    # A published bundle joins as a point with its metrics.json's steps, and is not trained.
    published = tmp_path / "models" / "default"
    shutil.copytree(out / "m0.15" / "best_bundle", published)
    facts = {"steps": 10_000, "epochs": 9.0, "minutes": 75.0}
    (published / "metrics.json").write_text(json.dumps({"monotonic": {"training": facts}}))
    assert bench.main([*base, "--minutes", "0.05", "--known", str(published)]) == 0
    printed = capsys.readouterr().out
    assert "trained " not in printed
    row = next(line for line in printed.splitlines() if "models/default" in line)
    assert row.startswith("| 75 min, models/default | 10000 | 9.0 | 133 |")
    assert "fitted to the 2 largest runs: 0.05 min here, 75 min, models/default" in printed

    with pytest.raises(SystemExit, match="--known .*published bundle"):
        bench.main([*args, "--known", str(out / "m0.05" / "best_bundle")])  # no metrics.json
