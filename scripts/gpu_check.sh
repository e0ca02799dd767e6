#!/usr/bin/env bash
# One command for a short GPU loan: builds strata with CUDA if needed, runs `ctest -L cuda`,
# times training steps of strata against PyTorch eager on the same GPU (alternating runs,
# median step and MFU), the attention core and the optimizer alone, and prints one Markdown
# summary table for docs/cuda.md ("Checking a GPU: scripts/gpu_check.sh").
#
#   scripts/gpu_check.sh [--build-dir DIR] [--results DIR] [--quick] [--dry-run]
#
#   --build-dir DIR  the CUDA build (default build-cuda): configured (Release, STRATA_CUDA=ON,
#                    CMAKE_CUDA_ARCHITECTURES=$STRATA_CUDA_ARCH, default 90) when it is not
#                    one yet, then brought up to date with all cores (ccache when installed)
#   --results DIR    raw output of every stage and summary.md (default $OUT if set, else
#                    build/gpu_check)
#   --quick          one round per model, 10 timed steps, attention at T 1024 and 4096
#   --dry-run        print the stages and their commands; run nothing (writes the derived
#                    configs only)
#
# Each stage has its own time limit; a failed or timed-out stage is reported in the table
# and the rest still run. The PyTorch column needs `python3 -c "import torch"` with a GPU
# (${STRATA_PYTHON:-python3}); without it that column is skipped. MFU is model FLOPs per
# step (strata's count, the same for both columns) over the median step and the GPU's dense
# peak: by name (H100/H200: bf16 989, f32 67 TFLOP/s; A100: 312, 19.5) or PEAK_BF16_TFLOPS /
# PEAK_F32_TFLOPS. The step benchmarks train on synthetic data (copies of the configs with
# their data section replaced), so they need no dataset on the machine.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=build-cuda
results=${OUT:-}
quick=0
dry=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$build_dir" = /* ]] || build_dir="$root/$build_dir"
results=${results:-$root/build/gpu_check}
[[ "$results" = /* ]] || results="$PWD/$results"
mkdir -p "$results"
strata="$build_dir/strata"
python=${STRATA_PYTHON:-python3}
rounds=2; steps=20; seqs=1024,2048,4096,8192
if [[ $quick = 1 ]]; then rounds=1; steps=10; seqs=1024,4096; fi
start_all=$SECONDS

# ------------------------------------------------------------------ stages
declare -A status seconds  # per stage: ok | failed (exit N) | timed out after N s | skipped: why
order=()

# stage NAME LIMIT_S CMD...: runs CMD (output in $results/NAME.log) under `timeout`, records
# how it ended and how long it took; never stops the script.
stage() {
  local name=$1 limit=$2
  shift 2
  order+=("$name")
  if [[ $dry = 1 ]]; then
    printf '[%s] (limit %ss) %s\n' "$name" "$limit" "$*"
    status[$name]="dry run"
    return 0
  fi
  printf '[%s] %s\n' "$name" "$*" >&2
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" > "$results/$name.log" 2>&1 || rc=$?
  seconds[$name]=$((SECONDS - t0))
  if [[ $rc = 0 ]]; then status[$name]=ok
  elif [[ $rc = 124 || $rc = 137 ]]; then status[$name]="timed out after ${limit} s"
  else status[$name]="failed (exit $rc)"
  fi
  [[ $rc = 0 ]] || printf '[%s] %s: see %s\n' "$name" "${status[$name]}" "$results/$name.log" >&2
  return 0
}

skip() {  # skip NAME WHY
  order+=("$1")
  status[$1]="skipped: $2"
  [[ $dry = 1 ]] && printf '[%s] skipped: %s\n' "$1" "$2"
  return 0
}

# ------------------------------------------------------------------ the GPU
gpu_name=""
if [[ $dry = 0 ]]; then
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$results/gpu.csv"
    gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  else
    echo "gpu_check: nvidia-smi not found: no NVIDIA driver here" | tee "$results/gpu.csv"
  fi
fi
peak_bf16=${PEAK_BF16_TFLOPS:-}
peak_f32=${PEAK_F32_TFLOPS:-}
case "$gpu_name" in
  *H100*|*H200*) peak_bf16=${peak_bf16:-989}; peak_f32=${peak_f32:-67} ;;
  *A100*) peak_bf16=${peak_bf16:-312}; peak_f32=${peak_f32:-19.5} ;;
esac

# ------------------------------------------------------------------ build
arch=${STRATA_CUDA_ARCH:-90}
configure=(cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON
           "-DCMAKE_CUDA_ARCHITECTURES=$arch")
if [[ -f "$build_dir/CMakeCache.txt" ]] && grep -q '^STRATA_CUDA:STRING=ON$' "$build_dir/CMakeCache.txt"; then
  skip configure "$build_dir is already a CUDA build"
else
  stage configure 300 "${configure[@]}"
fi
# strata, the CUDA test binary and the nccl ones where the build defines them
targets=(strata_cli strata_test_cuda)
if [[ $dry = 0 && -f "$build_dir/build.ninja" ]]; then
  for t in strata_test_comm_nccl strata_test_parallel_nccl; do
    grep -q "^build $t:" "$build_dir/build.ninja" && targets+=("$t")
  done
fi
stage build 1200 ninja -C "$build_dir" -j "$(nproc)" "${targets[@]}"
stage info 60 "$strata" info

# ------------------------------------------------------------------ ctest -L cuda
stage ctest_cuda 180 ctest --test-dir "$build_dir" -L cuda --output-on-failure -j 4

# ------------------------------------------------------------------ step benchmarks
torch=1
torch_why=""
if [[ $dry = 0 ]]; then
  if ! "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" > "$results/torch.log" 2>&1; then
    torch=0
    torch_why="no PyTorch with CUDA for $python (see torch.log)"
    echo "gpu_check: the PyTorch column is skipped: $torch_why" >&2
  fi
fi

# synthetic_config SRC DEST BLOCK: SRC with its top-level data: section replaced by BLOCK
synthetic_config() {
  awk -v block="$3" '
    /^data:/ { print "data:"; printf "%s", block; skip = 1; next }
    skip && /^[A-Za-z_]/ { skip = 0 }
    !skip { print }' "$1" > "$2"
}
cfgs="$results/configs"
mkdir -p "$cfgs"
tokens_block='  dataset: synthetic\n  kind: tokens\n  vocab_size: 256\n  size: 4096\n'
synthetic_config "$root/configs/gpt_char.yaml" "$cfgs/gpt_char.yaml" "$tokens_block"
synthetic_config "$root/configs/llama_char.yaml" "$cfgs/llama_char.yaml" "$tokens_block"
synthetic_config "$root/configs/fashion_cnn.yaml" "$cfgs/fashion_cnn.yaml" \
  '  dataset: synthetic\n  kind: classification\n  sample_shape: [1, 28, 28]\n  num_classes: 10\n  size: 4096\n'

torch_bench=("$python" "$root/tools/torch_step_bench.py" --device cuda --steps "$steps" --warmup 5)
# model KEY LABEL PRECISION "STRATA ARGS" "TORCH ARGS" ("" = strata only)
models=()
model() { models+=("$1"); label[$1]=$2; prec[$1]=$3; sargs[$1]=$4; targs[$1]=$5; }
declare -A label prec sargs targs
model gpt2 "GPT-2 124M bf16 B8 T1024" bf16 "-c $root/configs/gpt2_124m.yaml" \
  "--models gpt --precision bf16 --layers 12 --heads 12 --embd 768 --block-size 1024 --batch 8 --vocab 50257"
model gpt_small "GPT L4 C128 T64 B32 f32" f32 "-c $cfgs/gpt_char.yaml" "--models gpt"
model cnn "CNN B128 (fashion_cnn) f32" f32 "-c $cfgs/fashion_cnn.yaml" "--models cnn"
model llama "Llama L4 C128 T64 B32 f32 (llama_char)" f32 "-c $cfgs/llama_char.yaml" "--models llama"

for m in "${models[@]}"; do
  for ((r = 1; r <= rounds; r++)); do
    # shellcheck disable=SC2086  # the argument strings split on spaces by design
    stage "${m}_strata_$r" 120 "$strata" bench train ${sargs[$m]} --set run.device=cuda --steps "$steps" --warmup 3
    if [[ -z "${targs[$m]}" ]]; then
      :
    elif [[ $torch = 1 ]]; then
      # shellcheck disable=SC2086
      stage "${m}_torch_$r" 180 "${torch_bench[@]}" ${targs[$m]}
    else
      skip "${m}_torch_$r" "$torch_why"
    fi
  done
done

# ------------------------------------------------------------------ kernels alone
stage attn 180 "$strata" bench attn --device cuda --dtype bf16 --seq "$seqs"
# the warp-per-row kernels on the shortest sequence: what the tensor-core kernels gain
stage attn_warp 120 env STRATA_CUDA_ATTENTION=warp "$strata" bench attn --device cuda --dtype bf16 --seq "${seqs%%,*}"
stage optim 120 "$strata" bench optim --device cuda -c "$root/configs/gpt2_124m.yaml"

if [[ $dry = 1 ]]; then
  echo "dry run: results would go to $results (derived configs written to $cfgs)"
  exit 0
fi

# ------------------------------------------------------------------ summary
log() { cat "$results/$1.log" 2> /dev/null || true; }
# the first "median X ms" of the log: the wall-clock step of `bench train` and of
# torch_step_bench.py (their CPU-time medians come after it)
median_ms() { log "$1" | grep -o 'median [0-9.]* ms' | head -1 | sed 's/median \(.*\) ms/\1/' || true; }
gflop_per_step() { log "$1" | sed -n 's/^model: \([0-9.]*\) GFLOP\/step.*/\1/p' | head -1 || true; }
join() {  # join A B...: "A / B / ..."
  local out=$1
  shift
  for x in "$@"; do out+=" / $x"; done
  echo "$out"
}
# cell NAME: the stage's median, or how it ended
cell() { if [[ ${status[$1]:-} = ok ]]; then median_ms "$1"; else echo "${status[$1]:-not run}"; fi; }
min_of() { printf '%s\n' "$@" | { grep -E '^[0-9.]+$' || true; } | sort -g | head -1; }
mfu() {  # mfu GFLOP MS PEAK_TFLOPS
  if [[ -n "$1" && -n "$2" && -n "$3" ]]; then awk -v f="$1" -v t="$2" -v p="$3" 'BEGIN { printf "%.1f%%", 100 * f / (t / 1e3) / (p * 1e3) }'
  else echo "-"; fi
}

summary="$results/summary.md"
{
  echo "GPU: ${gpu_name:-unknown}; $(sed -n 2p "$results/gpu.csv" 2> /dev/null)"
  grep -m1 'cuda: ' "$results/info.log" 2> /dev/null | sed 's/^ *//' || true
  echo "build: ${status[build]} in ${seconds[build]:-0} s (configure: ${status[configure]}${seconds[configure]:+ in ${seconds[configure]} s})"
  echo
  echo "| what | strata | PyTorch | strata / PyTorch time | MFU or % of peak (strata / PyTorch) |"
  echo "|---|---|---|---|---|"
  if [[ ${status[ctest_cuda]} = ok || -s "$results/ctest_cuda.log" ]]; then
    tests=$(log ctest_cuda | grep -E 'tests passed|tests failed' | tail -1)
    skipped=$(log ctest_cuda | sed -n '/did not run:/,$p' | grep -c '(Skipped)' || true)
    echo "| \`ctest -L cuda\` | ${tests:-no summary} ($skipped skipped; ${status[ctest_cuda]}, ${seconds[ctest_cuda]} s) | | | |"
  else
    echo "| \`ctest -L cuda\` | ${status[ctest_cuda]} | | | |"
  fi
  for m in "${models[@]}"; do
    s=() t=()
    for ((r = 1; r <= rounds; r++)); do
      s+=("$(cell "${m}_strata_$r")")
      if [[ -n "${targs[$m]}" ]]; then t+=("$(cell "${m}_torch_$r")"); fi
    done
    sbest=$(min_of "${s[@]}") tbest=""
    if [[ ${#t[@]} -gt 0 ]]; then tbest=$(min_of "${t[@]}"); fi
    gf=$(gflop_per_step "${m}_strata_1")
    [[ -n "$gf" ]] || gf=$(gflop_per_step "${m}_strata_$rounds")
    peak=$peak_f32
    if [[ ${prec[$m]} = bf16 ]]; then peak=$peak_bf16; fi
    ratio="-"
    [[ -z "$sbest" || -z "$tbest" ]] || ratio=$(awk -v a="$sbest" -v b="$tbest" 'BEGIN { printf "%.2fx", a / b }')
    scol=$(join "${s[@]}") tcol="-"
    if [[ ${#t[@]} -gt 0 ]]; then tcol=$(join "${t[@]}"); fi
    tmfu="-"
    [[ -z "$tbest" ]] || tmfu=$(mfu "$gf" "$tbest" "$peak")
    echo "| ${label[$m]}, median step ms per round | $scol | $tcol | $ratio | $(mfu "$gf" "$sbest" "$peak") / $tmfu |"
  done
  if [[ ${status[attn]} = ok ]]; then
    # | T | B | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | % of peak | FLOP |
    log attn | awk -F'|' '$2 ~ /^ *[0-9]+ *$/ {
      gsub(/ /, ""); printf "| attention fwd+bwd bf16, T %s B %s | %s TFLOP/s (%s ms; fwd %s TFLOP/s) | | | %s |\n", $2, $3, $7, $6, $5, $8 }'
  else
    echo "| attention fwd+bwd bf16 | ${status[attn]} | | | |"
  fi
  if [[ ${status[attn_warp]} = ok ]]; then
    log attn_warp | awk -F'|' '$2 ~ /^ *[0-9]+ *$/ {
      gsub(/ /, ""); printf "| the same, warp-per-row kernels (STRATA_CUDA_ATTENTION=warp), T %s B %s | %s TFLOP/s (%s ms) | | | %s |\n", $2, $3, $7, $6, $8 }'
  else
    echo "| attention, warp-per-row kernels | ${status[attn_warp]} | | | |"
  fi
  if [[ ${status[optim]} = ok ]]; then
    log optim | awk -F'|' '$2 ~ /step|clip/ { w = $2; gsub(/^ +| +$/, "", w); gsub(/ /, "", $3); gsub(/ /, "", $5); gsub(/ /, "", $6)
      printf "| optimizer alone (GPT-2 124M, AdamW): %s | %s GB/s (%s ms) | | | %s of HBM |\n", w, $5, $3, $6 }'
  else
    echo "| optimizer alone (GPT-2 124M, AdamW) | ${status[optim]} | | | |"
  fi
  echo
  echo "Every stage's output: $results. Stages that did not end ok:"
  for n in "${order[@]}"; do
    [[ ${status[$n]} = ok || ${status[$n]} == skipped:\ *already* ]] ||
      echo "- $n: ${status[$n]}$(log "$n" | grep -v '^[[:space:]]*$' | tail -1 | cut -c1-200 | sed 's/^/: /')"
  done
  echo "Total: $((SECONDS - start_all)) s, of which build $((${seconds[configure]:-0} + ${seconds[build]:-0})) s."
} > "$summary"
echo
cat "$summary"
