# The resumable steps the recipes share (sourced, not run). Each function can be rerun
# after an interruption: a finished run is skipped, a started one continues from last.pt.

resume_flag() {  # $1 = run dir: --resume when it holds a checkpoint
  [ -f "$1/last.pt" ] && echo --resume || true
}

timed() {  # $1 = steps.tsv, $2 = step name, then the command; adds its wall time to the file
  # A step killed with its session (no trap runs on SIGKILL) still counts: a heartbeat
  # touches $1.running every minute, and the next run adds that run's time up to its last
  # beat before starting. The command runs as a plain command, so that under -e a step
  # stops at its first failing command and the recipe with it (called after `||`, bash
  # would ignore -e in everything the step runs, and an interrupted training's step would
  # go on to copy what it had not finished); the EXIT trap then counts its time.
  local tsv=$1 name=$2 start beat restore status
  shift 2
  settle_killed_step "$tsv"
  echo "== $(date -u +%H:%M:%S) $name"
  start=$(date +%s)
  printf '%s\t%s\n' "$name" "$start" > "$tsv.running"
  # (its own output closed: a sleep it leaves behind must not hold the recipe's pipes open)
  (while sleep 60; do touch "$tsv.running"; done) > /dev/null 2>&1 &
  beat=$!
  restore=$(trap -p EXIT)
  # shellcheck disable=SC2064  # the values now, for an exit in the middle of the step
  trap "end_step $(printf '%q ' "$tsv" "$name" "$start" "$beat")" EXIT
  "$@"
  status=$?  # 0 here under -e; without -e, the step's status
  end_step "$tsv" "$name" "$start" "$beat"
  eval "${restore:-trap - EXIT}"
  return "$status"
}

end_step() {  # $1 = steps.tsv, $2 = step name, $3 = its start, $4 = its heartbeat's pid
  kill "$4" 2>/dev/null || true
  rm -f "$1.running"
  printf '%s\t%s\n' "$2" "$(($(date +%s) - $3))" >> "$1"
}

settle_killed_step() {  # $1 = steps.tsv: a killed step's time, start to its last heartbeat
  local tsv=$1 name start
  [ -f "$tsv.running" ] || return 0
  IFS=$'\t' read -r name start < "$tsv.running"  # names hold spaces ("everyday supplement")
  printf '%s\t%s\n' "$name" "$(($(stat -c %Y "$tsv.running") - start))" >> "$tsv"
  rm -f "$tsv.running"
}

ENGINES=(kokoro=0.45 piper=0.25 espeak=0.1 festival=0.1 flite=0.1)  # the corpus's voices

corpus_draw() {  # $1 = folder, $2 = hours of train speech: the corpus recipe's draw (seed
  # 5), 200 test sentences to a split and 100 dev; with 0 hours the held-out and dev splits
  # alone, the same sentences and voices (the research record: every id of tests/data/heldout
  # came back)
  python -m training.recipes.synth_corpus --out "$1" --hours "$2" --seed 5 --jobs 2 --install \
    --engines "${ENGINES[@]}" \
    --text fortune=0.25 wordnet=0.15 austen=0.3 everyday=0.3 --test-size 200 --dev-size 100
}

supplement() {  # $1 = folder, $2 = hours, $3 = seed, $4 = dev utterances, $5 = most words a
  # sentence may have (0: any), then manifests whose sentences it must not speak (the
  # held-out splits among them): everyday material (numbers, letters, commands, one or two
  # words: what test_short measures, and 1 of the corpus's 11.5 train hours), its own seed
  local out=$1 hours=$2 seed=$3 dev=$4 words=$5
  shift 5
  python -m training.recipes.synth_corpus --out "$out" --hours "$hours" --seed "$seed" --jobs 2 \
    --install --engines "${ENGINES[@]}" --text everyday --test-size 0 --dev-size "$dev" \
    --max-words "$words" --exclude "$@"
}

distill_student() {  # $1 = run dir, $2 = corpus dir, then config overrides
  local out=$1 data=$2
  shift 2
  if [ -f "$out/distill.log" ] && [ "$(tail -n 1 "$out/distill.log" | cut -c1-5)" = "done:" ]; then
    return
  fi
  # shellcheck disable=SC2046  # resume_flag prints one word or nothing
  asr distill --config training/configs/distill.yaml --out "$out" $(resume_flag "$out") \
    "distill.train_manifests=[$data/train.jsonl]" distill.valid_manifest="$data/dev.jsonl" "$@"
}

cache_frames() {  # training.cache_frames' arguments but --shard: one shard per core, at once
  local k pids=()
  for k in 1 2; do
    background python -m training.cache_frames "$@" --shard "$k/2"
    pids+=($!)
  done
  wait_all "${pids[@]}"
}

train_side_by_side() {  # $1 = experiment dir, $2 = config, then overrides for both runs
  # The monotonic model and its softmax baseline, one thread each, same data and budget;
  # logs in $1/monotonic.log and $1/softmax.log (a resumed run appends to its log).
  # INIT=BUNDLE starts the monotonic model from that bundle (train.init), BASELINE_INIT the
  # softmax baseline, each at learning rate INIT_LR when set; a baseline without one starts
  # from scratch (no softmax bundle is published).
  local exp=$1 config=$2 kind pids=() start init
  shift 2
  for kind in monotonic softmax; do
    start=()
    init=${INIT:-}
    [ "$kind" = monotonic ] || init=${BASELINE_INIT:-}
    if [ -n "$init" ]; then
      start=("train.init=$init" ${INIT_LR:+"train.lr=$INIT_LR"})
    fi
    # shellcheck disable=SC2046
    background asr train --config "$config" "$@" "${start[@]}" train.threads=1 \
      model.attention.kind="$kind" --out "$exp/$kind" $(resume_flag "$exp/$kind") \
      >> "$exp/$kind.log" 2>&1
    pids+=($!)
  done
  wait_all "${pids[@]}"
}

background() {  # run the command as a background job ($! is its pid) that wait_all can stop
  # Its own process group, with SIGINT as a foreground command has it: bash starts background
  # jobs with SIGINT ignored, so Ctrl-C never reached them; now the terminal's Ctrl-C reaches
  # only the recipe, and wait_all passes it on once.
  local flags=$-
  set -m
  "$@" < /dev/null &
  [[ $flags == *m* ]] || set +m
}

wait_all() {  # the given background jobs as one step; non-zero if one failed or a signal came
  # INT (Ctrl-C), TERM or HUP is passed on to every job, and a job that fails stops the others
  # (INT, as Ctrl-C would); either way all of them have ended when this returns, so none is
  # left running on its own (a rerun would start a second trainer on the same directory).
  local running=("$@") left=() status=0 failed code pid restore
  restore="trap - INT TERM HUP; $(trap -p INT TERM HUP)"
  trap 'stop_jobs INT; status=130' INT
  trap 'stop_jobs TERM; status=143' TERM
  trap 'stop_jobs HUP; status=129' HUP
  while [ ${#running[@]} -gt 0 ]; do
    left=()
    failed=0
    for pid in "${running[@]}"; do
      if kill -0 "$pid" 2> /dev/null; then
        left+=("$pid")
        continue
      fi
      # ended: its status (plain `wait PID` finds it even once bash has dropped the job,
      # where `wait -n` says "no such job")
      code=0
      wait "$pid" || code=$?
      if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then
        status=$code
        failed=1
      fi
    done
    running=("${left[@]}")
    [ "$failed" -eq 0 ] || stop_jobs INT
    if [ ${#running[@]} -gt 0 ]; then # a signal ends this wait at once, its trap then runs
      sleep 0.5 &
      wait $! || true
    fi
  done
  eval "$restore"
  return "$status"
}

stop_jobs() {  # $1 = signal, to each job wait_all still waits for (its `running`)
  local pid
  for pid in "${running[@]}"; do # the job's process group (see background), else the process
    kill -"$1" -- "-$pid" 2> /dev/null || kill -"$1" "$pid" 2> /dev/null || true
  done
}
