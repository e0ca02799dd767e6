#!/usr/bin/env bash
# Summarises TSan logs (TSAN_OPTIONS=log_path=... or captured stderr): the number of
# reports, how many have an OpenMP-outlined frame (GCC names them *._omp_fn.N) in either
# access's stack, and the most frequent SUMMARY locations.
# Usage: scripts/sanitize/tsan_summary.sh LOG... [-n TOP]
set -euo pipefail
top=15
files=()
while [ $# -gt 0 ]; do
  case $1 in
    -n) top=$2; shift 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
[ ${#files[@]} -gt 0 ] || { echo "usage: $0 LOG... [-n TOP]" >&2; exit 2; }
awk -v top="$top" '
  /^WARNING: ThreadSanitizer:/ { n++; inrep = 1; omp = 0; next }
  inrep && /_omp_fn\./ { omp = 1 }
  /^SUMMARY: ThreadSanitizer:/ {
    if (inrep) { if (omp) nomp++; inrep = 0 }
    sub(/^SUMMARY: ThreadSanitizer: /, ""); loc[$0]++
  }
  END {
    printf "reports: %d, with an OpenMP-region frame: %d\n", n, nomp
    m = 0; for (k in loc) keys[++m] = k
    # sort by count (insertion sort: a few hundred distinct locations at most)
    for (i = 2; i <= m; i++) { k = keys[i]; j = i - 1
      while (j > 0 && loc[keys[j]] < loc[k]) { keys[j + 1] = keys[j]; j-- }
      keys[j + 1] = k }
    for (i = 1; i <= m && i <= top; i++) printf "%6d  %s\n", loc[keys[i]], keys[i]
  }' "${files[@]}"
