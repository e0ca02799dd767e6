#!/usr/bin/env bash
# Why TSan reports inside strata's OpenMP regions are not taken at face value
# (docs/reliability.md, "Sanitizers"). Compiles the pattern of strata's CPU kernels
# (tensor/cpu/blocks.h for_blocks, parallel_for.h: each team thread writes its own block,
# the master reads after the region's barrier, the pool is reused by the next region),
# race-free, and a control with one real race, under
#   gcc   -fsanitize=thread with Debian's libgomp (not built with TSan: its barriers use
#         futexes TSan cannot see), as the strata TSan build does;
#   clang -fsanitize=thread with LLVM's libomp and Archer (OMPT tool that tells TSan the
#         OpenMP synchronisation: barriers, tasks, locks).
# Prints the number of TSan reports of each. Expected: gcc reports the race-free program
# (false positives), clang+Archer reports only the control.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | sort -V | tail -1)
reports() { grep -c "^WARNING: ThreadSanitizer" "$1" || true; }
rc=0
for prog in blocks_race_free blocks_racy; do
  g++ -O1 -g -fsanitize=thread -fopenmp "$here/$prog.cpp" -o "$tmp/gcc_$prog"
  TSAN_OPTIONS=halt_on_error=0 "$tmp/gcc_$prog" >/dev/null 2>"$tmp/gcc_$prog.log"
  echo "gcc TSan + libgomp      $prog: $(reports "$tmp/gcc_$prog.log") reports"
  if command -v clang++ >/dev/null && [ -n "$archer" ]; then
    clang++ -O1 -g -fsanitize=thread -fopenmp "$here/$prog.cpp" -o "$tmp/clang_$prog"
    OMP_TOOL_LIBRARIES=$archer TSAN_OPTIONS=halt_on_error=0:ignore_noninstrumented_modules=1 \
      "$tmp/clang_$prog" >/dev/null 2>"$tmp/clang_$prog.log"
    n=$(reports "$tmp/clang_$prog.log")
    echo "clang TSan + libomp + Archer $prog: $n reports"
    if [ "$prog" = blocks_race_free ] && [ "$n" != 0 ]; then rc=1; fi
    if [ "$prog" = blocks_racy ] && [ "$n" = 0 ]; then rc=1; fi
  else
    echo "clang++ or libarcher.so (Debian libomp-dev) missing: Archer half skipped"
  fi
done
exit $rc
