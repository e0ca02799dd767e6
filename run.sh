#!/usr/bin/env bash
# Bootstrap, Release build, train the default config and print the final test accuracy.
#   ./run.sh                          # configs/fashion_mlp.yaml
#   ./run.sh configs/fashion_cnn.yaml --set train.epochs=2
set -euo pipefail
cd "$(dirname "$0")"
./scripts/bootstrap.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target strata_cli
CONFIG=${1:-configs/fashion_mlp.yaml}
shift || true
exec "$BUILD_DIR/strata" train --config "$CONFIG" "$@"
