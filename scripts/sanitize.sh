#!/usr/bin/env bash
# Builds strata under the compiler's sanitizers and runs the suites (issue 13; results
# and choices in docs/reliability.md, "Sanitizers"):
#   asan  build-asan, STRATA_SANITIZE=address,undefined: the whole CPU suite (ctest),
#         less the tests that only exercise the build system (see ASAN_EXCLUDE)
#   tsan  build-tsan, STRATA_SANITIZE=thread: the comm and parallel unit tests (local
#         backend: ranks are threads), the activation-checkpoint tests and every dist
#         test (mpirun, label dist)
#   all   both (default)
# Usage: scripts/sanitize.sh [asan|tsan|all] [extra ctest arguments, e.g. -R Checkpoint]
# Env: JOBS (build and ctest parallelism, default nproc), CCACHE_DIR etc. as for any build.
# Any sanitizer report fails its test (halt_on_error / -fno-sanitize-recover). The
# suppression files in scripts/sanitize/ hold third-party reports only, each justified.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
mode=${1:-all}
shift || true
JOBS=${JOBS:-$(nproc)}
sup=$src/scripts/sanitize
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One compute thread per rank, as on the CI host; for TSan this also keeps libgomp's
# uninstrumented barriers out of the picture (a single-thread parallel region runs inline).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

configure() {  # <dir> <sanitizers>
  cmake -S "$src" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=OFF -DSTRATA_SANITIZE="$2" "${launcher[@]}" >/dev/null
}

# Build tests: configure+compile checks and packaging (install, find_package of the
# examples, built without the sanitizer flags, so their runtime cannot load ours). They
# run no strata code that the rest of the suite does not.
ASAN_EXCLUDE='^(build_default_generator|embed_install|example_.*_find_package)$'

run_asan() {
  local b=$src/build-asan
  configure "$b" address,undefined
  cmake --build "$b" -j "$JOBS"
  export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0:check_initialization_order=1"
  export LSAN_OPTIONS="suppressions=$sup/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$sup/ubsan.supp"
  local t0=$SECONDS
  local rc=0
  ctest --test-dir "$b" --output-on-failure -j "$JOBS" --timeout 1200 -LE cuda -E "$ASAN_EXCLUDE" "$@" || rc=$?
  echo "sanitize.sh: asan+ubsan suite: exit $rc in $((SECONDS - t0)) s"
  return $rc
}

run_tsan() {
  local b=$src/build-tsan
  configure "$b" thread
  # Only what the TSan suite runs: the CLI (dist tests run it under mpirun), the comm and
  # parallel test binaries and the mpi test programs.
  cmake --build "$b" -j "$JOBS" --target strata_cli strata_test_comm strata_test_parallel strata_test_comm_mpi \
    strata_comm_mpi_fault strata_test_parallel_mpi strata_test_autograd
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$sup/tsan.supp:print_suppressions=0"
  local t0=$SECONDS rc=0
  for t in comm parallel; do  # every gtest of the binary in one process
    (cd "$b/tests" && "./strata_test_$t" --gtest_brief=1) || rc=$?
  done
  # Activation-checkpoint replay beside another thread's draws (the race TSan found).
  (cd "$b/tests" && ./strata_test_autograd --gtest_brief=1 --gtest_filter='Checkpoint.*') || rc=$?
  ctest --test-dir "$b" --output-on-failure -j "$JOBS" --timeout 1200 -L dist "$@" || rc=$?
  echo "sanitize.sh: tsan suite: exit $rc in $((SECONDS - t0)) s"
  return $rc
}

case $mode in
  asan) run_asan "$@" ;;
  tsan) run_tsan "$@" ;;
  all)
    rc=0
    run_asan "$@" || rc=$?
    run_tsan "$@" || rc=$?
    exit $rc
    ;;
  *) echo "usage: $0 [asan|tsan|all] [ctest arguments]" >&2; exit 2 ;;
esac
