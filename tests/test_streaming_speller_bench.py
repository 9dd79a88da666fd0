"""bench/streaming_speller.py on shipped held-out audio: its systems side by side, the
prototype's policy among them, and a clear error for a file that is not a policy."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import REPO, load_bench

bench = load_bench("streaming_speller")
prototype_bench = load_bench("monotonic_speller")
MANIFEST = REPO / "tests" / "data" / "heldout" / "test_seen_voices.jsonl"


def test_prototype_that_always_fires_speaks_long_before_the_ceiling(tmp_path) -> None:
    whisper = load_bench("decoder_ceiling").WhisperDecoder
    embeddings = whisper(
        prototype_bench.whisper_ct2_dir(prototype_bench.DEFAULT_CACHE, prototype_bench.WHEEL_CACHE)
    ).decoder.embed.weight.detach()
    policy = prototype_bench.Policy(embeddings)
    with torch.no_grad():
        policy.energy.r.fill_(1e4)
    path = tmp_path / "always.safetensors"
    policy.save(path)
    out = tmp_path / "figures.json"
    argv = ["--manifest", str(MANIFEST), "--limit", "2", "--json", str(out)]
    assert bench.main([*argv, "--policy", f"prototype:{path}"]) == 0
    (result,) = json.loads(out.read_text())
    rows = {row["system"]: row for row in result["rows"]}
    assert list(rows) == ["ceiling", f"prototype:{path} (silence, words)", "lstm greedy"]
    ceiling, prototype = rows["ceiling"], rows[f"prototype:{path} (silence, words)"]
    assert prototype["right_tokens"] > 0 and ceiling["right_tokens"] > 0
    # the ceiling waits for the close; the prototype says each token at its first chunk
    assert prototype["token_latency_p50_ms"] < ceiling["token_latency_p50_ms"] - 300
    assert 0 <= prototype["wer"] <= 1.5 and prototype["rtf"] > 0


def test_a_file_that_is_not_a_prototype_is_refused_by_name(capsys) -> None:
    policy_file = REPO / "models" / "default" / "speller_policy.safetensors"
    with pytest.raises(SystemExit):
        bench.main(["--manifest", str(MANIFEST), "--policy", f"prototype:{policy_file}"])
    assert f"prototype:{policy_file}" in capsys.readouterr().err
