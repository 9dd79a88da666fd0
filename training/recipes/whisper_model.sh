#!/usr/bin/env bash
# The bundled model, second generation, end to end on a 2-core CPU: a corpus of natural
# (Kokoro, piper) and older voices reading books, fortunes, glosses and everyday material;
# the teacher's outputs and the streaming student distilled from them; the student's
# states (and the teacher's, which train.teacher_share mixes in) cached once; the
# monotonic model and its softmax baseline trained side by side on them (one thread each,
# same data and budget); evaluation and publishing.
# Every step resumes: rerun the script after an interruption. Each step's wall time adds
# up in $EXP/steps.tsv, which the model card reports.
#   REAL=DIR     also score the real recordings `python bench/real_speech.py --manifests DIR`
#                wrote (held out: measured, never trained or tuned on)
#   PUBLISH=DIR  where the bundle and its card go (default models/default)
#   INIT=BUNDLE  go on from a published bundle (e.g. models/default) when the runs that made
#                it are gone: its student encoder instead of a distillation, and its weights,
#                tokenizer and CMVN to start the monotonic model (train.init)
#   MINUTES, DISTILL_EPOCHS  the training budget of each side-by-side run, the student's epochs
set -euo pipefail
source "$(dirname "$0")/steps.sh"
DATA=${DATA:-data/live}
EXP=${EXP:-exp/live}
MINUTES=${MINUTES:-120}
DISTILL_EPOCHS=${DISTILL_EPOCHS:-2}
REAL=${REAL:-}
PUBLISH=${PUBLISH:-models/default}
INIT=${INIT:-}
STUDENT=$EXP/student/student
if [ -n "$INIT" ]; then
  STUDENT=$EXP/init/whisper_encoder.safetensors  # a copy: publishing may replace $INIT
  mkdir -p "$EXP/init"
  [ -f "$EXP/init/config.json" ] || cp -r "$INIT"/. "$EXP/init/"
  INIT=$EXP/init
fi
export INIT
mkdir -p "$EXP"
steps=$EXP/steps.tsv

corpus() {
  python -m training.recipes.synth_corpus --out "$DATA" --hours 12 --seed 5 --jobs 2 --install \
    --engines kokoro=0.45 piper=0.25 espeak=0.1 festival=0.1 flite=0.1 \
    --text fortune=0.25 wordnet=0.15 austen=0.3 everyday=0.3 --test-size 200 --dev-size 100
}

distill() {  # the teacher's outputs are cached first (distill.cache_dir), then the student learns
  distill_student "$EXP/student" "$DATA" distill.epochs="$DISTILL_EPOCHS" distill.threads=2
}

SETTINGS=(model.whisper.encoder="$STUDENT" train.feature_cache="$EXP/frames"
  train.train_manifest="$DATA/train.jsonl" train.valid_manifest="$DATA/dev.jsonl")

frames() {  # the student's states, once, for both trainings: one shard per core
  local manifests=("$DATA"/train.jsonl "$DATA"/dev.jsonl "$DATA"/test_*.jsonl) k pids=()
  for k in 1 2; do
    python -m training.cache_frames --config training/configs/whisper.yaml "${SETTINGS[@]}" \
      --manifest "${manifests[@]}" --shard "$k/2" &
    pids+=($!)
  done
  wait_all "${pids[@]}"
}

side_by_side() {
  train_side_by_side "$EXP" training/configs/whisper.yaml "${SETTINGS[@]}" train.max_minutes="$MINUTES"
}

publish() {  # every evaluation and benchmark of the card, cached in the runs: a rerun resumes
  local real=()
  if [ -n "$REAL" ]; then
    [ -f "$REAL/all.jsonl" ] || python bench/real_speech.py --manifests "$REAL"
    real=(--real "$REAL")
  fi
  python -m training.recipes.publish_model --run "$EXP/monotonic" --baseline "$EXP/softmax" \
    --data "$DATA" --out "$PUBLISH" --first-gen models/first-gen --steps "$EXP/steps.tsv" "${real[@]}"
}

timed "$steps" corpus corpus
if [ -z "$INIT" ]; then timed "$steps" distillation distill; fi
timed "$steps" frames frames
timed "$steps" training side_by_side
publish  # not a timed step: the card it writes reports the others
