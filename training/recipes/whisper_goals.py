"""Issue #17's goals for the second-generation model, judged on the figures of its
metrics.json: each goal met, missed or not measured. No measuring and no Markdown here:
whisper_publish gathers the figures, whisper_card renders the verdicts."""

from __future__ import annotations

from typing import Any

from training.recipes.gather import REAL, SYNTHETIC, TITLES

# issue #17's goals
WER_GOALS = {"test_seen_voices": 0.10, "test_unseen_voices": 0.15, "test_short": 0.15}
GAP_GOAL_POINTS = 1.5  # monotonic - softmax, WER points
REAL_GOALS = {"streaming": 0.20, "two_pass": 0.12}
RTF_GOAL = 0.1
LATENCY_GOAL_MS = 400.0  # p95 of final latency under load, and of word latency
SIZE_GOAL_MB = 120.0
LOAD_CLIENTS = 50
LATENCY_UTTERANCES = 200


def columns_of(metrics: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """Each results column's summaries per split, as metrics.json keeps them."""
    first, fused = metrics["first_gen"], metrics["monotonic"].get("fusion")
    return {
        "first_gen": first and first["eval"],
        "streaming": metrics["monotonic"]["eval"],
        "two_pass": metrics["monotonic"]["eval_two_pass"],
        "softmax": metrics["softmax"]["eval"],
        "fused": fused and fused["eval"],
        "two_pass_fused": fused and fused["eval_two_pass"],
    }


def goal_figures(metrics: dict[str, Any]) -> dict[str, Any]:
    """The figures issue #17's goals are judged on, from metrics.json (None: not measured)."""
    columns = columns_of(metrics)
    stream, soft, two_pass = columns["streaming"], columns["softmax"], columns["two_pass"]
    assert stream is not None and soft is not None and two_pass is not None
    synthetic = [s for s in SYNTHETIC if s in stream]
    real = None
    if REAL in stream:
        real = {"streaming": stream[REAL]["wer"]["rate"], "two_pass": two_pass[REAL]["wer"]["rate"]}
        # two-pass finals as served: Whisper's decoder's, where they were measured
        served = metrics.get("whisper_finals", {}).get("eval", {}).get(REAL, {}).get("wer", {})
        if "two-pass" in served:
            real["two_pass"] = served["two-pass"]["rate"]
    load = None
    if metrics["load"] is not None:
        paced = metrics["load"]["paced"]
        final = paced["final_latency"]
        load = {"p95_ms": final and final["p95_ms"], "errors": paced["errors"]}
    word = None
    if metrics["word_latency"] is not None:
        # the streaming pass: the greedy search the partials come from, when it was measured
        one_pass = [m for m in metrics["word_latency"]["models"] if not m["two_pass"]]
        row = next((m for m in one_pass if m.get("greedy")), one_pass[0])
        word = row["latency_ms"] and row["latency_ms"]["p95"]
    return {
        "wer": {s: stream[s]["wer"]["rate"] for s in synthetic},
        "softmax_wer": {s: soft[s]["wer"]["rate"] for s in synthetic},
        "real": real,
        "rtf": metrics["rtf"] and metrics["rtf"]["rtf"],
        "load": load,
        "word_p95_ms": word,
        "word_timed": metrics["word_latency"] is None or word is not None,
        "megabytes": metrics["megabytes"],
    }


def _goal(goal: str, figure: str, met: bool | None) -> dict[str, Any]:
    return {"goal": goal, "figure": figure, "met": met}


def _at_most(
    goal: str, value: float | None, limit: float, show: str, missing: str = "not measured"
) -> dict[str, Any]:
    """A goal met when ``value`` <= ``limit`` (``show`` formats it); None: not measured."""
    if value is None:
        return _goal(goal, missing, None)
    return _goal(goal, show.format(value), value <= limit)


def _percent(rate: float | None) -> float | None:
    return None if rate is None else 100 * rate


def evaluate_goals(fig: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal of issue #17 with its measured figure and met (True / False; None: not
    measured), from :func:`goal_figures`' figures."""
    goals = [
        _at_most(
            f"{TITLES[split]}: WER <= {100 * limit:.0f}%",
            _percent(fig["wer"].get(split)),
            100 * limit,
            "{:.2f}%",
            "no such split",
        )
        for split, limit in WER_GOALS.items()
    ]
    for split, rate in fig["wer"].items():
        gap = round(100 * (rate - fig["softmax_wer"][split]), 6)
        text = f"monotonic within {GAP_GOAL_POINTS:g} points of softmax ({TITLES[split]})"
        goals.append(_at_most(text, gap, GAP_GOAL_POINTS, "{:+.2f} points"))
    for column, limit in REAL_GOALS.items():
        goals.append(
            _at_most(
                f"real speech, {column.replace('_', '-')}: WER <= {100 * limit:.0f}%",
                None if fig["real"] is None else 100 * fig["real"][column],
                100 * limit,
                "{:.2f}%",
                "not measured (no --real)",
            )
        )
    text = f"one stream on one thread: real-time factor <= {RTF_GOAL:g}"
    goals.append(_at_most(text, fig["rtf"], RTF_GOAL, "{:.3f}"))
    text = (
        f"`bench/load.py --no-two-pass --clients {LOAD_CLIENTS}`: p95 final latency <= "
        f"{LATENCY_GOAL_MS:.0f} ms, no errors"
    )
    load = fig["load"]
    if load is None:
        goals.append(_goal(text, "not measured", None))
    else:
        p95 = load["p95_ms"]
        shown_p95 = "no final latency" if p95 is None else f"p95 {p95:.0f} ms"
        met = p95 is not None and p95 <= LATENCY_GOAL_MS and not load["errors"]
        goals.append(_goal(text, f"{shown_p95}, {load['errors']} errors", met))
    text = f"word latency p95 <= {LATENCY_GOAL_MS:.0f} ms (streaming pass)"
    missing = "not measured" if fig.get("word_timed", True) else "no word right to time"
    goals.append(_at_most(text, fig["word_p95_ms"], LATENCY_GOAL_MS, "{:.0f} ms", missing))
    text = f"bundle <= {SIZE_GOAL_MB:.0f} MB on disk"
    goals.append(_at_most(text, fig["megabytes"], SIZE_GOAL_MB, "{:.1f} MB"))
    return goals
