#!/usr/bin/env bash
# The step stall of a checkpoint step, written synchronously and in the background
# (train.checkpoint_async), measured side by side in one invocation, alternating:
#   scripts/bench_async_checkpoint.sh [STRATA] [RUNS_DIR]
# For each model: `strata train` logs every step; a checkpoint every 5 steps. A step's time
# is the difference of consecutive `elapsed_s` in metrics.jsonl; the stall of a checkpoint
# is the time of the step after it (which includes the save) minus the median step time.
# Prints per model and mode: median step, mean stall, and async stall / sync stall.
set -euo pipefail
strata=${1:-build/strata}
runs=${2:-$(mktemp -d)}
mkdir -p "$runs"
src=$(cd "$(dirname "$0")/.." && pwd)
export STRATA_NO_REEXEC=1
# name | sets
models=(
  "gpt_char|--config $src/configs/gpt_char.yaml"
  "gpt_100m|--config $src/configs/gpt_char.yaml --set model.n_layer=12 --set model.n_embd=768 --set model.n_head=12 --set train.batch_size=4"
)
steps=${STEPS:-31}
every=5
stats() {  # metrics.jsonl -> "median_step mean_stall"
  local deltas med
  # "step seconds" of every step after the second (the first ones warm up)
  deltas=$(grep '"type":"train"' "$1" | sed -E 's/.*"elapsed_s":([0-9.e+-]+).*"step":([0-9]+).*/\2 \1/' |
    awk 'NR > 1 && $1 > 2 { printf "%d %.6f\n", $1, $2 - prev } { prev = $2 }')
  med=$(echo "$deltas" | awk -v every=$every '($1 - 1) % every != 0 { print $2 }' | sort -g |
    awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  echo "$deltas" | awk -v every=$every -v med="$med" '($1 - 1) % every == 0 { m += $2 - med; k++ }
    END { printf "%.4f %.4f\n", med, (k ? m / k : 0) }'
}
printf "%-9s %-6s %12s %12s %10s\n" model mode "step (s)" "stall (s)" "MiB"
for m in "${models[@]}"; do
  name=${m%%|*}
  read -r -a sets <<< "${m#*|}"
  declare -A stall=()
  for mode in sync async sync async; do  # alternating, twice
    dir="$runs/$name-$mode"
    rm -rf "$dir"
    async=false
    [ "$mode" = async ] && async=true
    "$strata" train "${sets[@]}" --set run.dir="$dir" --set run.threads=0 --set train.max_steps=$steps \
      --set train.log_every=1 --set train.eval_every=0 --set train.checkpoint_every=$every \
      --set train.keep_checkpoints=2 --set train.save_final=false --set train.checkpoint_async=$async \
      --set run.tensorboard=false > "$dir.out" 2>&1 || { cat "$dir.out"; exit 1; }
    read -r med st <<< "$(stats "$dir/metrics.jsonl")"
    mib=$(du -sm "$dir/checkpoints/$(cat "$dir/checkpoints/LATEST")" | cut -f1)
    printf "%-9s %-6s %12s %12s %10s\n" "$name" "$mode" "$med" "$st" "$mib"
    stall[$mode]="${stall[$mode]:-} $st"
  done
  awk -v s="${stall[sync]}" -v a="${stall[async]}" -v n="$name" 'BEGIN {
    split(s, x, " "); split(a, y, " "); sx = (x[1] + x[2]) / 2; sy = (y[1] + y[2]) / 2
    printf "%s: async stall / sync stall = %.3f\n", n, (sx > 0 ? sy / sx : 0) }'
  unset stall
done
