#!/bin/sh
# strata vs PyTorch training steps per core, pinned to one core, alternating, medians, ratios.
#   scripts/bench_vs_torch.sh                      # all cases, core 0, 3 rounds, build/strata
#   scripts/bench_vs_torch.sh --cases gpt64,mlp128 --rounds 5 --core 1 --strata build-native/strata
# PyTorch: Debian's python3-torch for /usr/bin/python3 (not a strata dependency; without
# it the script prints strata's column only). See tools/bench_vs_torch.py and
# docs/benchmarks.md ("CPU: strata against PyTorch per core").
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
command -v taskset >/dev/null || { echo "bench_vs_torch: taskset (util-linux) not found" >&2; exit 2; }
exec python3 "$root/tools/bench_vs_torch.py" "$@"
