#!/usr/bin/env bash
# Pipeline checkpoints through the CLI (registered by tests/pp_ckpt.cmake, label dist):
# the tiny GPT (4 blocks, no dropout, constant LR) trained 6 steps on 1 process is the
# reference. A dp 2 x pp 2 run (mpirun -np 4) saves at step 3 and resumes at pp 2
# (-np 2); a pp 2 run saves at step 3 and resumes at dp 2 x pp 2. Both resumed runs must
# log the reference's losses of steps 4-6 (to 1e-4, the printed precision is 1e-6).
# The pp checkpoints consolidate (`strata ckpt consolidate`) to the reference's step-3
# tensors (1e-4: AdamW moves an element whose gradient nearly cancels by up to ~lr per
# step, so the summation order of micro-batches and SIMD width shows there first; the
# losses above agree to 1e-6), and `strata eval` on one process reads them (the checkpoint's list of
# model tensors names every stage's, not only rank 0's).
#   train_pp_ckpt.sh STRATA MPIRUN SRC WORK
set -u
strata=$1 mpirun=$2 src=$3 work=$4
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
fail() {
  echo "FAIL: $*"
  exit 1
}
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
common=(--config "$src/tests/data_files/tiny_gpt.yaml" --set data.path="$src/tests/data_files/tiny_corpus.txt"
        --set model.n_layer=4 --set model.dropout=0 --set schedule.name=constant --set run.threads=1
        --set train.batch_size=8 --set train.log_every=1 --set train.eval_every=0 --set train.checkpoint_every=3
        --set parallel.microbatches=2)
mp=("$mpirun" --oversubscribe --allow-run-as-root)
run() {  # run NAME CMD...: output in NAME.txt
  local name=$1
  shift
  "$@" < /dev/null > "$name.txt" 2>&1 || { cat "$name.txt"; fail "$name exited $?"; }
}
# losses RUN_DIR FIRST LAST: "step loss" lines
losses() {
  python3 - "$1/metrics.jsonl" "$2" "$3" << 'EOF'
import json, sys
path, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
got = {}
for line in open(path):
    j = json.loads(line)
    if j.get("type") == "train":
        got[j["step"]] = j["loss"]
for s in range(first, last + 1):
    print(s, got[s])
EOF
}
same_losses() {  # same_losses WHAT RUN_DIR: steps 4-6 equal the reference's
  paste <(losses ref 4 6) <(losses "$2" 4 6) | awk -v what="$1" '
    { d = $2 - $4; if (d < 0) d = -d; printf "%s step %d: reference %.6f, got %.6f\n", what, $1, $2, $4
      if (d > 1e-4 * (1 + ($2 < 0 ? -$2 : $2))) bad = 1 }
    END { exit bad }' || fail "$1: losses differ from one process's"
}

run ref "$strata" train "${common[@]}" --set run.dir=ref --set train.max_steps=6
# dp 2 x pp 2 -> pp 2
run dp2pp2 "${mp[@]}" -np 4 "$strata" train "${common[@]}" --set run.dir=dp2pp2 --set parallel.pp=2 \
  --set train.max_steps=3
run pp2_resumed "${mp[@]}" -np 2 "$strata" train "${common[@]}" --set run.dir=pp2_resumed --set parallel.pp=2 \
  --set train.max_steps=6 --set train.resume="$work/dp2pp2"
same_losses "saved at dp 2 x pp 2, resumed at pp 2" pp2_resumed
# pp 2 -> dp 2 x pp 2
run pp2 "${mp[@]}" -np 2 "$strata" train "${common[@]}" --set run.dir=pp2 --set parallel.pp=2 --set train.max_steps=3
run dp2pp2_resumed "${mp[@]}" -np 4 "$strata" train "${common[@]}" --set run.dir=dp2pp2_resumed \
  --set parallel.pp=2 --set train.max_steps=6 --set train.resume="$work/pp2"
same_losses "saved at pp 2, resumed at dp 2 x pp 2" dp2pp2_resumed

# Consolidation: one file per checkpoint, equal to the reference's step 3.
ck() { echo "$1/checkpoints/$(cat "$1/checkpoints/LATEST")"; }
run cons_ref "$strata" ckpt consolidate --checkpoint ref/checkpoints/step_00000003 --out ref3.safetensors
for d in pp2 dp2pp2; do
  run "cons_$d" "$strata" ckpt consolidate --checkpoint "$(ck $d)" --out "$d.safetensors"
  python3 - "$src/tools" ref3.safetensors "$d.safetensors" << 'EOF' || fail "consolidated $d differs from one process's"
import sys
sys.path.insert(0, sys.argv[1])
from check_consolidated import load_stdlib
a, b = load_stdlib(sys.argv[2]), load_stdlib(sys.argv[3])
if sorted(a) != sorted(b):
    print("tensor names differ:", sorted(set(a) ^ set(b)))
    sys.exit(1)
worst = 0.0
for n in a:
    if a[n][:2] != b[n][:2]:
        print(n, "dtype/shape", a[n][:2], "vs", b[n][:2])
        sys.exit(1)
    worst = max([worst] + [abs(x - y) for x, y in zip(a[n][2], b[n][2])])
print(f"{sys.argv[3]}: {len(a)} tensors, max abs difference {worst:.2e}")
sys.exit(0 if worst <= 1e-4 else 1)
EOF
done
# eval on one process reads a pp checkpoint's whole model (model_tensors lists every stage).
run eval_pp2 "$strata" eval --checkpoint pp2 --config "$src/tests/data_files/tiny_gpt.yaml" \
  --set data.path="$src/tests/data_files/tiny_corpus.txt" --set model.n_layer=4 --set model.dropout=0
grep -q "loss" eval_pp2.txt || fail "eval printed no loss"
cat eval_pp2.txt
echo "PASS"
