#!/usr/bin/env bash
# Runs the installed examples/train program: 60 steps in one process; 40 steps under
# mpirun -np 2 (DDP) then resumed alone to 60 from its step-40 checkpoint; 60 steps with
# ZeRO-3 on 2 ranks. All three must end at the same loss (rtol 1e-5).
# Usage: train_example_run.sh <train binary> <mpirun> <scratch dir>
set -euo pipefail
exe=$1 mpirun=$2 work=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work" && mkdir -p "$work"
one=$("$exe" "$work/one" 60)
"$mpirun" --oversubscribe -np 2 "$exe" "$work/resumed" 40 >/dev/null
resumed=$("$exe" "$work/resumed" 60)
zero=$(PARALLEL_ZERO_STAGE=3 "$mpirun" --oversubscribe -x PARALLEL_ZERO_STAGE -np 2 "$exe" "$work/zero" 60)
printf '%s\n--\n%s\n--\n%s\n' "$one" "$resumed" "$zero"
grep -q 'resumed at step 40' <<< "$resumed"
grep -q 'ZeRO-3 over 2 dp rank' <<< "$zero"
test -f "$work/resumed/checkpoints/step_40/index.json"
final() { sed -n 's/.*final loss //p' <<< "$1"; }
python3 - "$(final "$one")" "$(final "$resumed")" "$(final "$zero")" <<'PY'
import sys
a, b, c = map(float, sys.argv[1:])
ok = abs(a - b) <= 1e-5 * a and abs(a - c) <= 1e-5 * a and a < 0.9
print(f"final loss: one process {a}, DDP then resumed alone {b}, ZeRO-3 {c}: {'equal' if ok else 'DIFFERENT or not learning'}")
sys.exit(0 if ok else 1)
PY
