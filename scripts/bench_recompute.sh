#!/usr/bin/env bash
# Activation recomputation side by side: for model.checkpoint_activations none, full and
# selective, the measured activation peak of a training step (`strata train
# --memory-report`), the planner's prediction for it (`strata plan`), and the step time
# (`strata bench train`, the modes alternating, best of two rounds' medians).
#   scripts/bench_recompute.sh [STRATA] [CONFIG] [--set K=V ...]
set -euo pipefail
strata=${1:-build/strata}
config=${2:-configs/gpt_char.yaml}
shift $(( $# >= 2 ? 2 : $# ))
sets=(--set run.threads=1 "$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export STRATA_NO_REEXEC=1
modes=(none full selective)
declare -A peak planned best
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }
for m in "${modes[@]}"; do
  "$strata" train -c "$config" "${sets[@]}" --set model.checkpoint_activations=$m --set run.dir="$work/$m" \
    --set train.max_steps=3 --set train.eval_every=0 --set train.save_final=false --memory-report > "$work/$m.out" 2>&1
  peak[$m]=$(awk '$1 == "activations" { print $5 }' "$work/$m.out")
  planned[$m]=$("$strata" plan -c "$config" "${sets[@]}" --set model.checkpoint_activations=$m --ranks 1 --gflops 50 |
    awk '$1 == "1" && $2 == "1" { print $13 }')
done
for round in 1 2; do
  for m in "${modes[@]}"; do
    ms=$("$strata" bench train -c "$config" "${sets[@]}" --set model.checkpoint_activations=$m --steps 10 --warmup 2 |
      sed -nE 's/.*median ([0-9.]+) ms.*/\1/p' | head -n 1)
    if [ -z "${best[$m]:-}" ] || awk -v a="$ms" -v b="${best[$m]}" 'BEGIN { exit !(a < b) }'; then best[$m]=$ms; fi
  done
done
printf "%-10s %18s %18s %14s\n" mode "activations (MiB)" "planned (MiB)" "step (ms)"
for m in "${modes[@]}"; do
  printf "%-10s %18s %18s %14s\n" "$m" "${peak[$m]}" "${planned[$m]}" "${best[$m]}"
done
