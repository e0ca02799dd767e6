#!/usr/bin/env bash
# Runs the installed example alone, under mpirun -np 2 (DDP) and under mpirun -np 2 with
# ZeRO-3: each must converge (exit 0) and all three must print the same final loss.
# Usage: embed_run.sh <embed binary> <mpirun>
set -euo pipefail
exe=$1 mpirun=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
one=$("$exe")
ddp=$("$mpirun" --oversubscribe -np 2 "$exe")
zero=$(PARALLEL_ZERO_STAGE=3 "$mpirun" --oversubscribe -x PARALLEL_ZERO_STAGE -np 2 "$exe")
printf '%s\n--\n%s\n--\n%s\n' "$one" "$ddp" "$zero"
grep -q 'single process over 1 dp rank' <<< "$one"
grep -q 'DDP over 2 dp rank' <<< "$ddp"
grep -q 'ZeRO-3 over 2 dp rank' <<< "$zero"
final() { sed -n 's/.*final loss //p' <<< "$1"; }
python3 - "$(final "$one")" "$(final "$ddp")" "$(final "$zero")" <<'PY'
import sys
a, b, c = map(float, sys.argv[1:])
ok = abs(a - b) <= 1e-5 * a and abs(a - c) <= 1e-5 * a
print(f"final loss: one process {a}, DDP {b}, ZeRO-3 {c}: {'equal' if ok else 'DIFFERENT'} at rtol 1e-5")
sys.exit(0 if ok else 1)
PY
