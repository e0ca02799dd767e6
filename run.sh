#!/usr/bin/env bash
# Bootstrap, Release build, train the default config and print the final test accuracy.
# The default is DDP on 2 MPI ranks (configs/fashion_cnn_ddp.yaml). Configs named
# *_ddp.yaml or *_zero*.yaml, or any config when RANKS is set, are started under mpirun
# with RANKS ranks (default 2); parallel.dp: auto then takes every rank.
#   ./run.sh
#   ./run.sh configs/fashion_mlp.yaml                # single process
#   RANKS=4 ./run.sh configs/gpt_char_ddp.yaml --set train.max_steps=200
set -euo pipefail
cd "$(dirname "$0")"
./scripts/bootstrap.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target strata_cli
CONFIG=${1:-configs/fashion_cnn_ddp.yaml}
shift || true
if [[ -n "${RANKS:-}" || "$CONFIG" =~ _(ddp|zero[0-9]*)\.yaml$ ]]; then
  MPI_FLAGS=(--oversubscribe)
  if [[ $(id -u) -eq 0 ]]; then MPI_FLAGS+=(--allow-run-as-root); fi
  # A host that drops off the network must not hang mpirun: OpenMPI teardown bounds for the
  # run's comm.timeout_s (from --set comm.timeout_s=N, else the config's timeout_s, else
  # strata's default 300); docs/reliability.md explains them.
  TIMEOUT_S=$(grep -oE 'timeout_s: *[0-9]+' "$CONFIG" | grep -oE '[0-9]+$' | head -n 1 || true)
  prev=
  for a in "$@"; do
    [[ "$a" =~ ^(--set=)?comm\.timeout_s=([0-9]+) && ( -n "${BASH_REMATCH[1]}" || "$prev" == --set ) ]] &&
      TIMEOUT_S=${BASH_REMATCH[2]}
    prev=$a
  done
  read -r -a TEARDOWN <<< "$(scripts/mpi_fault_flags.sh "${TIMEOUT_S:-300}")"
  MPI_FLAGS+=("${TEARDOWN[@]}")
  exec mpirun "${MPI_FLAGS[@]}" -np "${RANKS:-2}" "$BUILD_DIR/strata" train --config "$CONFIG" "$@"
fi
exec "$BUILD_DIR/strata" train --config "$CONFIG" "$@"
