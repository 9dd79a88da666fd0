#!/usr/bin/env bash
# The bundled model, end to end on a 2-core CPU: synthetic corpus, then the
# monotonic model and the softmax baseline trained side by side (one thread
# each, same data and budget), then evaluation on both held-out splits.
# Every step resumes: rerun the script after an interruption.
# A variant for comparison: ARGS adds config overrides to both trainings and PUBLISH
# keeps its card elsewhere, e.g.
#   EXP=exp/wide ARGS="model.encoder.units=320" PUBLISH=exp/wide/card bash training/recipes/default_model.sh
set -euo pipefail
source "$(dirname "$0")/steps.sh"
DATA=${DATA:-data/synth}
EXP=${EXP:-exp}
MINUTES=${MINUTES:-75}
ARGS=${ARGS:-}
PUBLISH=${PUBLISH:-models/first-gen}  # the second generation is models/default

python -m training.recipes.synth_corpus --out "$DATA" --hours 24 --seed 0 --jobs 2 --aug-prob 0.8 \
  --engines espeak=0.25 flite=0.15 festival=0.2 piper=0.4

mkdir -p "$EXP"
# shellcheck disable=SC2086  # ARGS is a list of overrides
train_side_by_side "$EXP" training/configs/default.yaml train.train_manifest="$DATA/train.jsonl" \
  train.valid_manifest="$DATA/dev.jsonl" train.max_minutes="$MINUTES" $ARGS

# Evaluate both on both held-out splits, publish the monotonic model as $PUBLISH (card,
# metrics.json); a small held-out sample for tests/test_bundled_model.py ships only when
# publishing to models/default (elsewhere, e.g. models/first-gen, the sample is left alone).
sample=()
[ "$PUBLISH" = models/default ] || sample=(--sample 0)
python -m training.recipes.publish_model --run "$EXP/monotonic" --baseline "$EXP/softmax" \
  --data "$DATA" --out "$PUBLISH" "${sample[@]}"
