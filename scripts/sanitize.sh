#!/usr/bin/env bash
# Builds strata under the compiler's sanitizers and runs the suites (results
# and choices in docs/reliability.md, "Sanitizers"):
#   asan  build-asan, STRATA_SANITIZE=address,undefined: the whole CPU suite (ctest),
#         less the tests that only exercise the build system (see ASAN_EXCLUDE)
#   tsan  build-tsan, STRATA_SANITIZE=thread: the comm and parallel unit tests (local
#         backend: ranks are threads), the activation-checkpoint tests and every dist
#         test (mpirun, label dist)
#   all   both (default)
#   omp   scripts/sanitize/omp/check.sh: why TSan reports inside OpenMP regions with
#         more than one thread are libgomp's, not strata's (seconds)
# Usage: scripts/sanitize.sh [asan|tsan|omp|all] [extra ctest arguments, e.g. -R Checkpoint]
# Env: JOBS (build and ctest parallelism, default nproc), CCACHE_DIR etc. as for any build.
#      TSAN_GTESTS: a gtest filter for the tsan mode's in-process runs of strata_test_comm
#      and strata_test_parallel (default: every test), to rerun what a change touched
#      (ctest arguments such as -R select the dist tests as usual); set, it also skips
#      the activation-checkpoint run (strata_test_autograd, Checkpoint.*) and its build.
#      KEEP_GOING=1: TSan reports every race of a process instead of stopping at the first
#      (the process still fails, exit 66), logs go to <build>/san-logs/ and are
#      summarised by scripts/sanitize/tsan_summary.sh; ASan/UBSan logs go there too.
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
# uninstrumented barriers out of the picture: strata's kernels open no team when their
# thread count is 1 (parallel_for, for_blocks), and the default count follows
# OMP_NUM_THREADS (core/threads_default.h). Before that default, the unit tests opened
# 2-thread teams on this 2-core host whatever OMP_NUM_THREADS said.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
halt=1
[ "${KEEP_GOING:-0}" = 1 ] && halt=0

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
  # ASan cannot go on after an error without -fsanitize-recover=address, and UBSan is
  # compiled not to (-fno-sanitize-recover=undefined): KEEP_GOING only adds the logs here.
  local alog="" ulog=""
  if [ "$halt" = 0 ]; then
    mkdir -p "$b/san-logs"
    alog=":log_path=$b/san-logs/asan" ulog=":log_path=$b/san-logs/ubsan"
  fi
  # fast_unwind_on_malloc=0: the frame-pointer unwinder stops in OpenMPI (built without
  # frame pointers), so its leaks would show one frame and match no suppression
  # (scripts/sanitize/lsan.supp); the slow unwinder gives the whole stack.
  export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0:check_initialization_order=1:fast_unwind_on_malloc=0$alog"
  export LSAN_OPTIONS="suppressions=$sup/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$sup/ubsan.supp$ulog"
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
  local targets=(strata_cli strata_test_comm strata_test_parallel strata_test_comm_mpi strata_comm_mpi_fault
    strata_test_parallel_mpi)
  [ -z "${TSAN_GTESTS:-}" ] && targets+=(strata_test_autograd)
  cmake --build "$b" -j "$JOBS" --target "${targets[@]}"
  local tlog=""
  if [ "$halt" = 0 ]; then
    rm -rf "$b/san-logs" && mkdir -p "$b/san-logs"
    tlog=":log_path=$b/san-logs/tsan"
  fi
  export TSAN_OPTIONS="halt_on_error=$halt:second_deadlock_stack=1:suppressions=$sup/tsan.supp:print_suppressions=0$tlog"
  local t0=$SECONDS rc=0
  for t in comm parallel; do  # every gtest of the binary (or TSAN_GTESTS) in one process
    (cd "$b/tests" && "./strata_test_$t" --gtest_brief=1 --gtest_filter="${TSAN_GTESTS:-*}") || rc=$?
  done
  # Activation-checkpoint replay beside another thread's draws (the race TSan found).
  if [ -z "${TSAN_GTESTS:-}" ]; then
    (cd "$b/tests" && ./strata_test_autograd --gtest_brief=1 --gtest_filter='Checkpoint.*') || rc=$?
  fi
  ctest --test-dir "$b" --output-on-failure -j "$JOBS" --timeout 1200 -L dist "$@" || rc=$?
  echo "sanitize.sh: tsan suite: exit $rc in $((SECONDS - t0)) s"
  if [ "$halt" = 0 ] && compgen -G "$b/san-logs/tsan.*" >/dev/null; then "$sup/tsan_summary.sh" "$b"/san-logs/tsan.*; fi
  return $rc
}

case $mode in
  asan) run_asan "$@" ;;
  tsan) run_tsan "$@" ;;
  omp) "$sup/omp/check.sh" ;;
  all)
    rc=0
    run_asan "$@" || rc=$?
    "$sup/omp/check.sh" || rc=$?
    run_tsan "$@" || rc=$?
    exit $rc
    ;;
  *) echo "usage: $0 [asan|tsan|omp|all] [ctest arguments]" >&2; exit 2 ;;
esac
