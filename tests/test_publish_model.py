"""The model card's corpus figures are counted from the corpus it was trained on."""

from __future__ import annotations

import json
from pathlib import Path

from training.recipes.publish_model import corpus_facts, status


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_corpus_facts_count_the_manifests(tmp_path: Path) -> None:
    plan = {"hours": 8.0, "seed": 0, "jobs": 2, "aug_prob": 0.5, "test_size": 2, "dev_size": 1}
    (tmp_path / "plan.json").write_text(json.dumps(plan | {"engines": ["espeak=0.5", "piper"]}))
    train = [
        {"engine": "espeak", "voice": "en-us+m1", "duration": 1800.0, "aug": []},
        {"engine": "espeak", "voice": "en-gb+f2", "duration": 900.0, "aug": [{"kind": "noise"}]},
        {"engine": "espeak", "voice": "en-us+m1", "duration": 900.0, "aug": []},
        {"engine": "piper", "voice": "joe", "duration": 3600.0, "aug": [{"kind": "speed"}]},
    ]
    write_jsonl(tmp_path / "train.jsonl", train)
    write_jsonl(tmp_path / "dev.jsonl", train[:1])
    write_jsonl(tmp_path / "test_seen_voices.jsonl", train[:2])
    write_jsonl(tmp_path / "test_unseen_voices.jsonl", train[:3])

    facts = corpus_facts(tmp_path)
    assert facts["train_utterances"] == 4
    assert facts["train_hours"] == 2.0
    assert facts["augmented"] == 0.5
    assert facts["voices"] == {"espeak": 2, "piper": 1}
    assert facts["sizes"] == {"dev": 1, "test_seen_voices": 2, "test_unseen_voices": 3}
    assert facts["command"].startswith("python -m training.recipes.synth_corpus --out data/synth")
    assert "--aug-prob 0.5" in facts["command"]
    assert facts["command"].endswith("--engines espeak=0.5 piper")
    plan["text"] = ["fortune", "austen=0.6", "everyday=0.4"]
    (tmp_path / "plan.json").write_text(json.dumps(plan | {"engines": ["kokoro"]}))
    assert corpus_facts(tmp_path)["command"].endswith(
        "--engines kokoro --text fortune austen=0.6 everyday=0.4"
    )


def test_status_says_whether_targets_are_reached() -> None:
    history = [{"epoch": 1, "valid_loss": 2.0}, {"epoch": 2, "valid_loss": 1.0}]
    training = {"minutes": 80.0, "history": history}
    good = {
        "test_seen_voices": {"wer": {"rate": 0.05}},
        "test_unseen_voices": {"wer": {"rate": 0.1}},
    }
    bad = {"test_seen_voices": {"wer": {"rate": 0.5}}, "test_unseen_voices": {"wer": {"rate": 0.1}}}
    assert status(good, training).startswith("It reaches the targets")
    text = status(bad, training)
    assert (
        "does not yet reach" in text and "still falling at the last epoch (2.000 -> 1.000)" in text
    )
    assert "validated only once" in status(bad, {**training, "history": history[:1]})
    wobble = [*history, {"epoch": 3, "valid_loss": 1.01}]
    assert "levelled off" in status(bad, {**training, "history": wobble})
    rose = [*history, {"epoch": 3, "valid_loss": 1.1}]
    assert "lowest at epoch 2 and then rose" in status(bad, {**training, "history": rose})
