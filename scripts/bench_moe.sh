#!/usr/bin/env bash
# The MoE GPT (configs/gpt_char_moe.yaml: 8 experts of width 2C, top-2, so a token's MLP
# FLOPs equal the dense model's) against the dense GPT (configs/gpt_char.yaml) at the same
# steps: step time side by side (one process; mpirun -np 2 with ep 2 and -np 4 with ep 4,
# each against DDP over as many ranks), the runs alternating, the median step of each
# run's timed steps; best of the rounds. Then, with a shared expert, ep 2 with the shared
# expert computing while the routed rows travel (model.moe.shared_expert_overlap) against
# after them. Run it on a quiet host (one compute thread per rank).
#   scripts/bench_moe.sh [STRATA] [STEPS] [ROUNDS]
set -euo pipefail
strata=${1:-build/strata}
steps=${2:-60}
rounds=${3:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--set run.threads=1 --set train.max_steps=$steps --set train.eval_every=0 --set train.log_every=1
        --set train.checkpoint_every=0 --set train.save_final=false --set schedule.warmup_steps=0)
# Median of the per-step times (elapsed_s differences) after the first 10 steps.
step_ms() {
  grep '"type":"train"' "$1" | sed -nE 's/.*"elapsed_s":([0-9.e+-]+).*/\1/p' |
    awk 'NR > 10 { print ($1 - prev) * 1000 } { prev = $1 }' | sort -n |
    awk '{ d[n++] = $1 } END { printf "%.1f", n % 2 ? d[(n - 1) / 2] : (d[n / 2 - 1] + d[n / 2]) / 2 }'
}
declare -A best
run() {  # name np config extra...
  local name=$1 np=$2 cfg=$3
  shift 3
  rm -rf "$work/$name"
  if [ "$np" = 1 ]; then
    "$strata" train -c "$cfg" "${common[@]}" --set run.dir="$work/$name" "$@" > "$work/$name.out" 2>&1
  else
    mpirun --oversubscribe -np "$np" "$strata" train -c "$cfg" "${common[@]}" --set run.dir="$work/$name" "$@" \
      > "$work/$name.out" 2>&1
  fi
  local ms
  ms=$(step_ms "$work/$name/metrics.jsonl")
  if [ -z "${best[$name]:-}" ] || awk -v a="$ms" -v b="${best[$name]}" 'BEGIN { exit !(a < b) }'; then best[$name]=$ms; fi
}
for round in $(seq "$rounds"); do
  run dense_1 1 configs/gpt_char.yaml
  run moe_1 1 configs/gpt_char_moe.yaml --set parallel.ep=1
  run dense_2 2 configs/gpt_char.yaml
  run moe_ep2 2 configs/gpt_char_moe.yaml --set parallel.ep=2
  run dense_4 4 configs/gpt_char.yaml
  run moe_ep4 4 configs/gpt_char_moe.yaml
  run shared_on 2 configs/gpt_char_moe.yaml --set parallel.ep=2 --set model.moe.shared_experts=1 \
    --set model.moe.shared_expert_overlap=true
  run shared_off 2 configs/gpt_char_moe.yaml --set parallel.ep=2 --set model.moe.shared_experts=1 \
    --set model.moe.shared_expert_overlap=false
done
printf "%-34s %10s\n" run "step (ms)"
printf "%-34s %10s\n" "dense GPT, one process" "${best[dense_1]}"
printf "%-34s %10s\n" "MoE GPT, one process" "${best[moe_1]}"
printf "%-34s %10s\n" "dense GPT, DDP over 2 ranks" "${best[dense_2]}"
printf "%-34s %10s\n" "MoE GPT, ep 2 over 2 ranks" "${best[moe_ep2]}"
printf "%-34s %10s\n" "dense GPT, DDP over 4 ranks" "${best[dense_4]}"
printf "%-34s %10s\n" "MoE GPT, ep 4 over 4 ranks" "${best[moe_ep4]}"
awk -v a="${best[moe_1]}" -v b="${best[dense_1]}" -v c="${best[moe_ep2]}" -v d="${best[dense_2]}" \
    -v e="${best[moe_ep4]}" -v f="${best[dense_4]}" \
  'BEGIN { printf "MoE / dense: %.2f (one process), %.2f (2 ranks), %.2f (4 ranks)\n", a / b, c / d, e / f }'
printf "%-34s %10s\n" "shared expert overlapped, ep 2" "${best[shared_on]}"
printf "%-34s %10s\n" "shared expert after, ep 2" "${best[shared_off]}"
