"""The first-generation (fbank) model card, rendered from its metrics.json: greedy and
LM-fused results beside the softmax baseline, word-frequency bands, the model, the data,
the exact commands. `python -m training.recipes.publish_model` gathers the figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from asr.config import Config
from training.recipes.gather import LM_BEAM, LM_ORDER, LM_WEIGHT, SPLIT_TITLES, SPLITS


def write_card(out: Path, metrics: dict[str, Any]) -> None:
    mono, soft = metrics["monotonic"], metrics["softmax"]
    rows = []
    for split in SPLITS:
        m, s = mono["eval"][split], soft["eval"][split]
        gap = 100 * (m["wer"]["rate"] - s["wer"]["rate"])
        rows.append(
            f"| {SPLIT_TITLES[split]} | {m['utterances']} | {100 * m['wer']['rate']:.2f}% "
            f"| {100 * m['cer']['rate']:.2f}% | {100 * s['wer']['rate']:.2f}% | {gap:+.2f} |"
        )
    fused_rows = []
    for split in SPLITS:
        g, m, s = (mono["eval"][split], mono["eval_lm"][split], soft["eval_lm"][split])
        gap = 100 * (m["wer"]["rate"] - s["wer"]["rate"])
        fused_rows.append(
            f"| {SPLIT_TITLES[split]} | {100 * g['wer']['rate']:.2f}% | {100 * m['wer']['rate']:.2f}% "
            f"| {100 * m['cer']['rate']:.2f}% | {100 * s['wer']['rate']:.2f}% | {gap:+.2f} |"
        )
    bands = []
    for split in SPLITS:
        m = mono["eval"][split]["by_train_frequency"]
        s = soft["eval"][split]["by_train_frequency"]
        bands += [
            f"| {SPLIT_TITLES[split]} | {b['band']} | {100 * b['share']:.1f}% "
            f"| {100 * b['rate']:.1f}% | {100 * c['rate']:.1f}% |"
            for b, c in zip(m, s, strict=True)
        ]
    history = "\n".join(
        f"| {int(h['epoch'])} | {h['valid_loss']:.3f} | {100 * h['valid_wer']:.2f}% |"
        for h in mono["training"]["history"]
        if "valid_wer" in h
    )
    config = Config.load(out / "config.json")  # defaults fill keys older bundles lack
    model = config.model
    enc, att, dec = model.encoder, model.attention, model.decoder
    state_ms = math.prod(enc.reductions) * model.features.frame_shift_ms
    delay = model.alignment_delay
    corpus = metrics["corpus"]
    voices = ", ".join(f"{engine} ({n})" for engine, n in corpus["voices"].items())
    text = CARD.format(
        enc_layers=enc.layers,
        enc_units=enc.units,
        reduction=math.prod(enc.reductions),
        reductions=", ".join(map(str, enc.reductions)),
        state_ms=state_ms,
        dec_layers=dec.layers,
        dec_units=dec.units,
        feedback="fed its last context" if dec.context_feedback else "fed tokens only",
        kind=att.kind,
        att_dim=att.dim,
        init_r=att.init_r,
        noise=att.noise_std,
        ctc=model.ctc_weight,
        align=model.alignment_weight,
        delay=(
            f"; each boundary is trained {delay} states ({delay * state_ms:g} ms) after its "
            "spike, so a token has heard that much more of its word when it is emitted"
            if delay
            else ""
        ),
        sp_type=model.tokenizer.model_type,
        vocab=model.tokenizer.vocab_size,
        valid_decoded=config.train.valid_decode_max,
        precision=config.train.precision,
        train_utterances=f"{corpus['train_utterances']:,}",
        train_hours=corpus["train_hours"],
        augmented=100 * corpus["augmented"],
        voices=voices,
        dev=corpus["sizes"]["dev"],
        seen=corpus["sizes"]["test_seen_voices"],
        unseen=corpus["sizes"]["test_unseen_voices"],
        corpus_command=corpus["command"],
        status=status(mono["eval"], mono["training"]),
        params=metrics["parameters"] / 1e6,
        megabytes=metrics["megabytes"],
        rows="\n".join(rows),
        fused_rows="\n".join(fused_rows),
        lm_beam=LM_BEAM,
        lm_weight=LM_WEIGHT,
        lm_order=LM_ORDER,
        lm_sentences=f"{metrics['lm_sentences']:,}",
        bands="\n".join(bands),
        history=history,
        publish_command=metrics["publish_command"],
        tokenizer_note=(
            "\n`train.tokenizer=` reuses the sentencepiece model an earlier run trained on the\n"
            "same corpus; sentencepiece training is deterministic, so a run that trains its own\n"
            "(as the recipe does) gets the same pieces.\n"
            if "train.tokenizer=" in mono["training"]["command"] + soft["training"]["command"]
            else ""
        ),
        mono_command=mono["training"]["command"],
        soft_command=soft["training"]["command"],
        mono_minutes=mono["training"]["minutes"],
        soft_minutes=soft["training"]["minutes"],
        mono_steps=mono["training"]["steps"],
        mono_epochs=mono["training"]["epochs"],
        soft_epochs=soft["training"]["epochs"],
    )
    (out / "README.md").write_text(text)


TARGETS = {"test_seen_voices": 0.10, "test_unseen_voices": 0.20}
RISE = 1.02  # a last validation loss this far above the lowest counts as overfitting


def status(evals: dict[str, dict[str, Any]], training: dict[str, Any]) -> str:
    """One sentence: does the model reach the WER targets it is meant to reach, and if not,
    what its validation losses say about why."""
    missed = [s for s in SPLITS if evals[s]["wer"]["rate"] > TARGETS[s]]
    goal = ", ".join(f"{SPLIT_TITLES[s]} <= {100 * TARGETS[s]:.0f}%" for s in SPLITS)
    if not missed:
        return f"It reaches the targets (WER {goal})."
    losses = [h for h in training["history"] if "valid_loss" in h]
    lowest = min(losses, key=lambda h: h["valid_loss"])
    last = losses[-1]
    if lowest is last:
        trend = (
            f"its validation loss was still falling at the last epoch ({losses[-2]['valid_loss']:.3f}"
            f" -> {last['valid_loss']:.3f}), so a longer budget would help"
            if len(losses) > 1
            else "it validated only once"
        )
    elif last["valid_loss"] > RISE * lowest["valid_loss"]:
        trend = (
            f"its validation loss was lowest at epoch {int(lowest['epoch'])} and then rose, "
            "so the corpus limits it as much as the budget"
        )
    else:  # a wobble of the last epochs, not overfitting
        trend = (
            f"its validation loss levelled off as the learning rate decayed (lowest "
            f"{lowest['valid_loss']:.3f} at epoch {int(lowest['epoch'])}, last "
            f"{last['valid_loss']:.3f}), so the budget limits it"
        )
    return (
        f"**It does not yet reach the targets (WER {goal})**: it was trained for "
        f"{training['minutes']} minutes of one CPU core, and {trend}."
    )


CARD = """# default: the bundled monotonic-attention model

Listen-Attend-Spell with a unidirectional encoder and hard monotonic attention
(Raffel et al., 2017), trained for {mono_minutes} minutes on one core of the 2-core
development machine, from synthetic speech only. {params:.2f}M parameters, weights
{megabytes:.1f} MB. `asr transcribe`, `asr serve` and the browser page use it by default.

## Results (greedy, hard monotonic attention, through the streaming recognizer)

{status}

| held-out split | utterances | WER | CER | WER, softmax baseline | monotonic - softmax (points) |
|---|---|---|---|---|---|
{rows}

The softmax baseline has the same architecture with Bahdanau attention over the whole
utterance (offline), trained on the same data with the same budget, side by side on the
same machine. Every figure above is `asr eval` output, gathered by
`python -m training.recipes.publish_model` into `metrics.json`.

With the language model: `lm.npz` is a {lm_order}-gram over the model's tokens, trained on
all {lm_sentences} sentences of the corpus's training split, spoken or not (dev and test
sentences are never among them), and added to the decoder's scores with weight
{lm_weight} in a beam search of {lm_beam} (both chosen on the dev split). The bundle decodes
greedily by default; `asr transcribe`, `asr eval` and `asr serve` take `--beam {lm_beam}
--lm-weight {lm_weight}`. Still streaming: hard monotonic attention, through the same recognizer.

| held-out split | WER, greedy | WER, beam {lm_beam} + LM | CER, beam {lm_beam} + LM | softmax, beam {lm_beam} + LM | monotonic - softmax (points) |
|---|---|---|---|---|---|
{fused_rows}

Where the errors are: the reference words of each split by how often they occur in the
training text, with the share of them that are substituted or deleted (`asr eval
--train-manifest`). Errors on frequent words are acoustic; words seen a few times or
never must be spelt from their sound alone.

| held-out split | times in training text | share of words | word error | softmax baseline |
|---|---|---|---|---|
{bands}

## Model

Unidirectional {enc_layers} x {enc_units} LSTM encoder with a {reduction}x time pyramid
(reductions {reductions}: one state per {state_ms} ms), {dec_layers}-layer {dec_units}-unit LSTM
decoder {feedback}, {kind} attention (dim {att_dim}, r = {init_r}, pre-sigmoid noise {noise}), auxiliary
CTC (weight {ctc}) whose confident Viterbi spikes guide each token's monotonic boundary
during training (CTC-synchronous training, weight {align}{delay}), sentencepiece {sp_type}
vocabulary of {vocab}. Configuration: `config.json` (training/configs/default.yaml).

## Data

The synthetic corpus of `training/recipes/synth_corpus.py`: {train_utterances} training
utterances, {train_hours:.2f} h, read by {voices} voices (espeak-ng counts accent/variant
combinations) from fortune and WordNet sentences; {augmented:.0f}% of them with speed, noise,
reverberation, band-limiting or telephone augmentation. Held out, all clean: {dev} dev
sentences by training voices (validation and the choice of checkpoint), {seen} unseen
sentences by seen voices, {unseen} unseen sentences by unseen voices (whole voices kept
out of training). No test utterance takes part in training or checkpoint choice.

## Training (exact commands; `training/recipes/default_model.sh` runs them all)

    {corpus_command}
    {mono_command}
    {soft_command}
    {publish_command}
{tokenizer_note}
Monotonic: {mono_steps} steps, {mono_epochs} epochs, {mono_minutes} minutes of training;
softmax baseline: {soft_epochs} epochs, {soft_minutes} minutes (both on one thread
each, sharing the machine, with {precision} matrix products: `train.precision`).

## Validation during training ({valid_decoded} utterances of the dev split, each epoch)

| epoch | valid loss | WER |
|---|---|---|
{history}

## Limits

Synthetic voices only: real microphones, accents and spontaneous speech are far from
this data, so expect much higher error rates on real recordings until the model is
trained on real speech with `asr train`.
"""
