#!/usr/bin/env bash
# 800 steps of configs/gpt_char_pp.yaml (mpirun -np 2, 1F1B over 2 stages) against
# configs/gpt_char.yaml on one process (label long, registered by tests/pp_long.cmake):
# the final logged training loss and the step-800 validation loss agree within 1e-3.
#   pp_long.sh STRATA MPIRUN SRC WORK
# (PP_LONG_STEPS / PP_LONG_EVAL_EVERY shorten it for a smoke run of the script itself.)
set -u
steps=(--set train.max_steps="${PP_LONG_STEPS:-800}" --set train.eval_every="${PP_LONG_EVAL_EVERY:-200}")
strata=$1 mpirun=$2 src=$3 work=$4
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
"$strata" train --config "$src/configs/gpt_char.yaml" --set run.dir=one --set run.threads=1 \
  --set train.checkpoint_every=0 "${steps[@]}" < /dev/null > one.txt 2>&1 || { cat one.txt; echo "FAIL: one process"; exit 1; }
"$mpirun" --oversubscribe --allow-run-as-root -np 2 "$strata" train --config "$src/configs/gpt_char_pp.yaml" \
  --set run.dir=pp --set train.checkpoint_every=0 "${steps[@]}" < /dev/null > pp.txt 2>&1 || { cat pp.txt; echo "FAIL: pp 2"; exit 1; }
python3 - one/metrics.jsonl pp/metrics.jsonl << 'PY'
import json, sys
def last(path, kind):
    rows = [json.loads(l) for l in open(path)]
    rows = [r for r in rows if r.get("type") == kind]
    return rows[-1]["step"], rows[-1]["loss"]
bad = False
for kind in ("train", "eval"):
    (s1, a), (s2, b) = last(sys.argv[1], kind), last(sys.argv[2], kind)
    print(f"{kind} loss at step {s1}: one process {a:.6f}; at step {s2}: pp 2 {b:.6f}; |diff| {abs(a - b):.2e}")
    bad = bad or s1 != s2 or abs(a - b) > 1e-3
print("FAIL: the pipeline's losses differ from one process's" if bad else "PASS")
sys.exit(1 if bad else 0)
PY
