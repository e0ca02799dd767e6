#!/usr/bin/env bash
# Bootstrap, build (Release) and run the whole test suite through ctest.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/bootstrap.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# ccache (CMakeLists.txt uses it as the compiler launcher): paths relative to this clone,
# so a clean clone elsewhere on the same machine hits the cache; the test binaries'
# precompiled headers are cacheable only with this sloppiness.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=1
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
# Ninja here; the ctest build_default_generator (tests/build.cmake) checks that the
# default generator (Unix Makefiles) configures and builds as well.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$JOBS"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 600 "$@"
