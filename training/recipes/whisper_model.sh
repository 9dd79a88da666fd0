#!/usr/bin/env bash
# The bundled model, second generation, end to end on a 2-core CPU: a corpus of natural
# (Kokoro, piper) and older voices reading books, fortunes, glosses and everyday material;
# long clips of one voice reading on (training.join_utterances); the teacher's outputs and
# the streaming student distilled from them, on the clips and the utterances; the student's
# states (and the teacher's, which train.teacher_share mixes in) cached once; the
# monotonic model and its softmax baseline trained side by side on them (one thread each,
# same data and budget); evaluation and publishing.
# Every step resumes: rerun the script after an interruption. Each step's wall time adds
# up in $EXP/steps.tsv, which the model card reports.
#   REAL=DIR     also score the real recordings `python bench/real_speech.py --manifests DIR`
#                wrote (held out: measured, never trained or tuned on)
#   PUBLISH=DIR  where the bundle and its card go (default models/default)
#   INIT=BUNDLE  go on from a published bundle (e.g. models/default) when the runs that made
#                it are gone: its student encoder starts the distillation (distill.init), and
#                its weights, tokenizer and CMVN the monotonic model (train.init)
#   INIT_LR=LR   the monotonic model's learning rate when it goes on from INIT (default 0.0005;
#                a restart at the config's 0.003 undoes more than the run then learns)
#   BASELINE_INIT=BUNDLE  the softmax baseline goes on from this bundle (e.g. an earlier
#                run's best_bundle) at INIT_LR too; unset, it starts from scratch
#   RUNS=DIR     where the side-by-side runs go (default $EXP): with INIT, new runs go on
#                from the bundles on $EXP's corpus, student and frames
#   EXCLUDE="M..." manifests whose sentences the everyday supplements must not speak either,
#                besides the corpus's dev and test splits (e.g. a set search settings are tuned on)
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
BASELINE_INIT=${BASELINE_INIT:-}
RUNS=${RUNS:-$EXP}
read -r -a EXCLUDE <<< "${EXCLUDE:-}"
STUDENT=$EXP/student/student
copy_init() {  # $1 = bundle, $2 = name: prints the path of its copy in $RUNS, made once
  # (publishing may replace the bundle)
  mkdir -p "$RUNS/$2"
  [ -f "$RUNS/$2/config.json" ] || cp -r "$1"/. "$RUNS/$2/"
  echo "$RUNS/$2"
}
START=()  # the distillation's starting point: the teacher's weights, or INIT's student
if [ -n "$INIT" ]; then
  INIT=$(copy_init "$INIT" init-monotonic)
  START=(distill.init="$INIT/whisper_encoder.safetensors")
fi
[ -z "$BASELINE_INIT" ] || BASELINE_INIT=$(copy_init "$BASELINE_INIT" init-softmax)
export INIT BASELINE_INIT INIT_LR=${INIT_LR:-0.0005}
mkdir -p "$EXP"
steps=$EXP/steps.tsv

TRAIN=$DATA/train_all.jsonl  # the corpus's train split and the everyday supplements'
DEV=$DATA/dev_all.jsonl  # the corpus's dev split and the second supplement's

corpus() {
  corpus_draw "$DATA" 12
}

everyday() {  # 3 hours, then 2 more of sentences neither the corpus nor the first speaks,
  # with 100 for validation: the corpus's dev split holds few short utterances, so alone it
  # chose checkpoints that read them worse. Then 1.5 hours of 1-3 words only, 100 of them for
  # validation: the supplements' sentences average 5.4 words and the model read their dev
  # split at 4.4% but its 1-3 word sentences at 10.4%. Training reads the corpus's train
  # split and all three.
  local held=("$DATA"/dev.jsonl "$DATA"/test_*.jsonl "${EXCLUDE[@]}")
  local spoken=("$DATA/train.jsonl" "$DATA/everyday/train.jsonl")
  supplement "$DATA/everyday" 3 6 0 0 "${held[@]}"
  supplement "$DATA/everyday2" 2 7 100 0 "${held[@]}" "${spoken[@]}"
  supplement "$DATA/short" 1.5 8 100 3 "${held[@]}" "${spoken[@]}" "$DATA"/everyday2/{train,dev}.jsonl
  asr prepare merge "$DATA/train.jsonl" "$DATA"/{everyday,everyday2,short}/train.jsonl --out "$TRAIN"
  asr prepare merge "$DATA/dev.jsonl" "$DATA"/{everyday2,short}/dev.jsonl --out "$DEV"
}

long_clips() {  # 12-28 s of one voice reading on: a student distilled on a few seconds at a
  # time drifts from the teacher once a stream runs longer (bench/experiments/student_drift.py)
  python -m training.join_utterances --manifest "$DATA/train.jsonl" --out "$DATA/train_long.jsonl"
  python -m training.join_utterances --manifest "$DATA/dev.jsonl" --out "$DATA/dev_long.jsonl" \
    --any-voice
}

distill() {  # the teacher's outputs are cached first (distill.cache_dir), then the student learns
  distill_student "$EXP/student" "$DATA" distill.epochs="$DISTILL_EPOCHS" distill.threads=2 \
    "distill.train_manifests=[$DATA/train.jsonl,$DATA/train_long.jsonl]" \
    distill.valid_manifest="$DATA/dev_long.jsonl" "${START[@]}"
}

SETTINGS=(model.whisper.encoder="$STUDENT" train.feature_cache="$EXP/frames"
  train.train_manifest="$TRAIN" train.valid_manifest="$DEV")

frames() {  # the student's states, once, for both trainings
  cache_frames --config training/configs/whisper.yaml "${SETTINGS[@]}" \
    --manifest "$TRAIN" "$DEV" "$DATA"/test_*.jsonl
}

side_by_side() {
  train_side_by_side "$RUNS" training/configs/whisper.yaml "${SETTINGS[@]}" train.max_minutes="$MINUTES"
}

publish() {  # every evaluation and benchmark of the card, cached in the runs: a rerun resumes
  local real=()
  if [ -n "$REAL" ]; then
    [ -f "$REAL/all.jsonl" ] || python bench/real_speech.py --manifests "$REAL"
    real=(--real "$REAL")
  fi
  python -m training.recipes.publish_model --run "$RUNS/monotonic" --baseline "$RUNS/softmax" \
    --data "$DATA" --out "$PUBLISH" --first-gen models/first-gen --steps "$EXP/steps.tsv" "${real[@]}"
}

timed "$steps" corpus corpus
timed "$steps" "everyday supplement" everyday
timed "$steps" "long clips" long_clips
timed "$steps" distillation distill
timed "$steps" frames frames
timed "$steps" training side_by_side
publish  # not a timed step: the card it writes reports the others
