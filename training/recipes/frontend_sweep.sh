#!/usr/bin/env bash
# The streaming-encoder sweep behind bench/frontend.py's table, from a fresh clone:
# a fixed small probe corpus, one distilled student per setting (chunks of 80, 160,
# 320 and 640 ms with every weight trained; 160 ms with rank-16 adapters), all at the
# same budget (one epoch of the probe corpus's train audio, about 15 minutes each here),
# then the fixed probe on every variant.
# Every step resumes: rerun the script after an interruption.
#   REAL=DIR  also scores the real recordings that `python bench/real_speech.py
#             --manifests DIR` wrote (held out: measured, never trained or tuned on)
set -euo pipefail
source "$(dirname "$0")/steps.sh"
DATA=${DATA:-data/probe}
EXP=${EXP:-exp/frontend-sweep}
REAL=${REAL:-}

# 2.6 h: about 2.4 h of train (the probe's training data, and the students' audio),
# 60 held-out utterances per test split, 60 dev utterances for the students' validation.
python -m training.recipes.synth_corpus --out "$DATA" --hours 2.6 --seed 3 --test-size 60 --install \
  --dev-size 60 --jobs 2 --engines espeak=0.25 flite=0.15 festival=0.2 piper=0.4

distill() {  # $1 = name, then config overrides
  local name=$1
  shift
  distill_student "$EXP/$name" "$DATA" distill.epochs=1 distill.warmup_steps=10 distill.valid_every=30 "$@"
}
mkdir -p "$EXP"
distill c8 model.whisper.chunk=8
distill c4 model.whisper.chunk=4
distill c32 model.whisper.chunk=32
distill c8-lora16 model.whisper.chunk=8 distill.adapter_rank=16 distill.lr=1.0e-3
distill c16 model.whisper.chunk=16

tests=("$DATA/test_seen_voices.jsonl" "$DATA/test_unseen_voices.jsonl")
[ -n "$REAL" ] && tests+=("$REAL/all.jsonl")
python bench/frontend.py --work "$EXP/bench" --probe-train "$DATA/train.jsonl" --probe-hours 2.35 \
  --probe-epochs 4 --probe-test "${tests[@]}" --variants teacher masked:8 \
  student:"$EXP/c4/student" student:"$EXP/c8/student" student:"$EXP/c16/student" \
  student:"$EXP/c32/student" student:"$EXP/c8-lora16/student" fbank
