#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang (ASan + UBSan; the sources each one covers
# are compiled into it with coverage instrumentation) in build-fuzz/ and runs each on a
# scratch copy of its committed corpus.
#   tests/fuzz/run_fuzz.sh [seconds per harness, default 300] [harness...]
# New crashing inputs land in build-fuzz/crashes/<harness>/; minimise one with
# `build-fuzz/tests/fuzz/strata_fuzz_<h> -minimize_crash=1 <file>` and commit it to
# tests/fuzz/corpus/<h>/ once fixed. Needs Debian's clang and libclang-rt-dev
# (STRATA_BOOTSTRAP_FUZZ=1 scripts/bootstrap.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH=${1:-300}
shift || true
HARNESSES=("${@:-config idx safetensors index}")
read -r -a HARNESSES <<<"${HARNESSES[*]}"
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DSTRATA_FUZZ=ON -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCH=OFF -DSTRATA_CUDA=OFF ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} >/dev/null
targets=()
for h in "${HARNESSES[@]}"; do targets+=("strata_fuzz_$h"); done
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target "${targets[@]}"
for h in "${HARNESSES[@]}"; do
  work="$BUILD/fuzz_corpus/$h" crashes="$BUILD/crashes/$h"
  mkdir -p "$work" "$crashes"
  cp -n tests/fuzz/corpus/"$h"/* "$work"/ 2>/dev/null || true
  echo "== $h: ${SECONDS_EACH}s"
  "$BUILD/tests/fuzz/strata_fuzz_$h" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -max_len=65536 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$crashes/" "$work" 2>&1 | tail -n 25
done
