#!/usr/bin/env bash
# Bootstrap, build (Release) and run the whole test suite through ctest.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/bootstrap.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# Ninja here; the ctest build_default_generator (tests/build.cmake) checks that the
# default generator (Unix Makefiles) configures and builds as well.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$JOBS"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 600 "$@"
