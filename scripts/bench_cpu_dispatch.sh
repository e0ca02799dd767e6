#!/bin/sh
# What the runtime ISA dispatch (tensor/cpu/isa_dispatch.h) is worth: GPT (gpt_char) and
# MLP (fashion_mlp) training step times, one thread, pinned to one core, with the portable
# build's loops forced to the baseline (= a build without dispatch), to x86-64-v3 and at
# x86-64-v4, and, given a -DSTRATA_NATIVE=ON build directory, with its libstrata_tensor.so
# (all of strata's CPU loops) swapped in. Alternating run by run, ROUNDS rounds, medians of
# the CPU time per step (`strata bench train`'s "cpu time"), which a shared host disturbs
# far less than the wall time.
#   scripts/bench_cpu_dispatch.sh [BUILD=build] [NATIVE_BUILD] [ROUNDS=3]
# The native variant: cmake -S . -B build-native -DSTRATA_NATIVE=ON && cmake --build
# build-native --target strata_tensor (the other layers hold no hot loops). docs/performance.md.
set -eu
build=${1:-build}
native=${2:-}
rounds=${3:-3}
bin=$build/strata
core=${CORE:-0}
variants="default x86-64-v3 x86-64-v4"
[ -n "$native" ] && variants="$variants native"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # variant model -> median ms/step
  v=$1; m=$2
  case $m in
    gpt) args="-c configs/gpt_char.yaml --steps 10 --warmup 3" ;;
    mlp) args="-c configs/fashion_mlp.yaml --steps 200 --warmup 20" ;;
  esac
  if [ "$v" = native ]; then
    LD_LIBRARY_PATH=$native taskset -c "$core" "$bin" bench train $args --set run.threads=1
  else
    STRATA_CPU_CAPABILITY=$v taskset -c "$core" "$bin" bench train $args --set run.threads=1
  fi | sed -n "s/^cpu time: median \([0-9.]*\) ms.*/\1/p"
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for m in gpt mlp; do
    for v in $variants; do echo "$(run "$v" "$m")" >> "$tmp/$m.$v"; done
  done
  variants=$(echo "$variants" | awk '{for (i = NF; i > 0; i--) printf "%s%s", $i, (i > 1 ? " " : "\n")}')
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
med() { sort -n "$1" | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
printf "%-12s %-12s %-12s %s\n" model variant "cpu ms/step" "baseline / variant"
for m in gpt mlp; do
  base=$(med "$tmp/$m.default")
  for v in $(ls "$tmp" | sed -n "s/^$m\.//p"); do
    x=$(med "$tmp/$m.$v")
    printf "%-12s %-12s %-12s %s   (runs: %s)\n" "$m" "$v" "$x" "$(echo "$base $x" | awk '{printf "%.3f", $1 / $2}')" \
      "$(tr '\n' ' ' < "$tmp/$m.$v")"
  done
done
