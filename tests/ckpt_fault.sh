#!/usr/bin/env bash
# Checkpoint writes that fail: a file size limit (RLIMIT_FSIZE), a full disk (a
# small tmpfs) and a crash in the middle of writing a step's files. Each time the previous
# checkpoint must stay loadable with LATEST pointing at it, a half-written step_N.tmp must be
# ignored and removed on resume, and the resumed run must log the same losses, bit for bit,
# as a run that never failed.
#   ckpt_fault.sh efbig|crash|tmpfs|zero3_crash STRATA SRC WORK [MPIRUN]  (tests/fault.cmake)
#   efbig        1 process, `ulimit -f` with SIGXFSZ ignored: write() fails with EFBIG
#   crash        1 process, `ulimit -f` with SIGXFSZ at its default: killed mid-write
#   tmpfs        1 process, run.dir on a tmpfs with too little room left: ENOSPC
#   zero3_crash  mpirun -np 2 ZeRO-3: rank 1 killed (SIGXFSZ) while writing its shard,
#                after rank 0 wrote its own: a step_N.tmp holding one whole shard
#   <mode>_async the same with train.checkpoint_async (every run: the checkpoints resumed
#                from were written in the background too); the failed background write
#                is reported at the next step, naming the checkpoint
set -u
mode=$1 strata=$2 src=$3 work=$4 mpirun=${5:-}
async=()
if [[ "$mode" == *_async ]]; then
  mode=${mode%_async}
  async=(--set train.checkpoint_async=true)
fi
self=$(realpath "$0")
export STRATA_NO_REEXEC=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() {
  echo "FAIL: $*"
  exit 1
}
# The checkpoint of tiny_mlp with 256 hidden units is 64 KiB (a shard of 32 KiB per rank at
# 2 ranks with ZeRO); metrics and logs stay far below the limits set here. Constant LR, so
# runs of different max_steps train the same steps.
common=(--config "$src/tests/data_files/tiny_mlp.yaml" --set model.hidden=[256] --set model.dropout=0
        --set schedule.name=constant --set train.eval_every=0 --set train.checkpoint_every=2 "${async[@]}")
limit_kb=40  # between the metrics/log files (a few KiB) and one shard file (64 KiB; 32 KiB under ZeRO at 2 ranks)
np=1
launch=()
if [ "$mode" = zero3_crash ]; then
  [ -n "$mpirun" ] || { echo "SKIPPED: no mpirun"; exit 0; }
  np=2 limit_kb=16
  common+=(--set parallel.zero_stage=3)
  # TCP between the ranks: the shared-memory transport sizes its segment file with
  # ftruncate, which the file size limit would refuse at start-up.
  launch=("$mpirun" --oversubscribe --allow-run-as-root -np 2 --mca btl self,tcp)
fi

rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
if [ "$mode" = tmpfs ] && [ -z "${CKPT_FAULT_IN_NS:-}" ]; then
  # Re-run inside a private mount namespace, where a tmpfs can be mounted and goes away with it.
  if ! unshare -m true 2> /dev/null; then echo "SKIPPED: cannot create a mount namespace (unshare -m; needs root)"; exit 0; fi
  CKPT_FAULT_IN_NS=1 exec unshare -m bash "$self" "$@"
fi

# train DIR STEPS [args...]: one run; stdout+stderr in DIR.out, status in $rc.
train() {
  local dir=$1 steps=$2
  shift 2
  "${launch[@]}" "$strata" train "${common[@]}" --set run.dir="$dir" --set train.max_steps="$steps" "$@" \
    < /dev/null > "$dir.out" 2>&1
  rc=$?
}
# The train losses of a run, one "step loss" per line (full precision, as logged).
losses() { grep '"type":"train"' "$1/metrics.jsonl" | sed -E 's/.*"loss":([^,]*),.*"step":([0-9]+),.*/\2 \1/'; }
latest() { cat "$1/checkpoints/LATEST" 2> /dev/null; }

# The run that never fails: 8 steps, a checkpoint every 2.
train straight 8
[ "$rc" = 0 ] || { cat straight.out; fail "the reference run failed ($rc)"; }

# The run that fails: 4 steps (checkpoints step 2 and 4), then a resume to 8 whose step-6
# save fails.
run=run
if [ "$mode" = tmpfs ]; then
  mkdir -p disk
  mount -t tmpfs -o size=1m tmpfs disk || { echo "SKIPPED: cannot mount a tmpfs here"; exit 0; }
  run=disk/run
fi
train "$run" 4
[ "$rc" = 0 ] || { cat "$run.out"; fail "the first 4 steps failed ($rc)"; }
[ "$(latest "$run")" = step_00000004 ] || fail "LATEST is '$(latest "$run")' after 4 steps"
sum_before=$(cd "$run/checkpoints/step_00000004" && sha256sum ./* | sha256sum)

case $mode in
  efbig)
    (trap '' XFSZ; ulimit -f "$limit_kb"; train "$run" 8 --resume auto; exit "$rc")
    rc=$?
    [ "$rc" = 1 ] || { cat "$run.out"; fail "the save over the file size limit exited $rc, expected 1"; }
    grep -q "strata: error: ${async:+the checkpoint written in the background (train.checkpoint_async) failed: }\[save checkpoint\] '.*step_00000006': rank 0 failed (nothing was saved): .*File too large" "$run.out" ||
      { cat "$run.out"; fail "no '[save checkpoint] ... File too large' error naming the checkpoint"; }
    ;;
  crash)
    (ulimit -f "$limit_kb"; train "$run" 8 --resume auto; exit "$rc")
    rc=$?
    [ "$rc" = 153 ] || { cat "$run.out"; fail "expected the run to be killed by SIGXFSZ (153), got $rc"; }
    [ -d "$run/checkpoints/step_00000006.tmp" ] || fail "the killed save left no step_00000006.tmp (the test injects nothing)"
    ;;
  tmpfs)
    # Fill the disk but for 24 KiB: metrics and logs still fit, a 64 KiB shard does not.
    dd if=/dev/zero of=disk/filler bs=4k 2> /dev/null
    free_kb=24
    truncate -s "-${free_kb}K" disk/filler
    train "$run" 8 --resume auto
    [ "$rc" = 1 ] || { cat "$run.out"; df disk; fail "the save on the full disk exited $rc, expected 1"; }
    grep -q "strata: error: ${async:+the checkpoint written in the background (train.checkpoint_async) failed: }\[save checkpoint\] '.*step_00000006': rank 0 failed (nothing was saved): .*No space left on device" "$run.out" ||
      { cat "$run.out"; fail "no '[save checkpoint] ... No space left on device' error naming the checkpoint"; }
    rm disk/filler
    ;;
  zero3_crash)
    # Only rank 1 runs under the limit: it dies writing its shard; rank 0 has written its own
    # and then finds rank 1 gone (exit 3), and mpirun ends the job.
    "${launch[@]}" bash -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then ulimit -f '"$limit_kb"'; fi; exec "$@"' rank \
      "$strata" train "${common[@]}" --set run.dir="$run" --set train.max_steps=8 --resume auto \
      --set comm.timeout_s=10 < /dev/null > "$run.out" 2>&1
    rc=$?
    [ "$rc" != 0 ] || { cat "$run.out"; fail "mpirun exited 0 although rank 1 was killed"; }
    tmp="$run/checkpoints/step_00000006.tmp"
    [ -d "$tmp" ] || { cat "$run.out"; fail "the killed save left no $tmp"; }
    # (In the background rank 0 may not have finished its own shard when it learns of rank 1's death.)
    [ -n "${async[*]}" ] || [ -s "$tmp/shard_00000_of_00002.safetensors" ] || { ls -la "$tmp"; fail "rank 0's shard is not in $tmp"; }
    ;;
  *) fail "unknown mode $mode" ;;
esac

# The failed save left the previous checkpoint as it was, and LATEST still names it.
echo "after the failure: LATEST=$(latest "$run"); checkpoints: $(ls "$run/checkpoints" | tr '\n' ' ')"
[ "$(latest "$run")" = step_00000004 ] || fail "LATEST is '$(latest "$run")' after the failed save, expected step_00000004"
[ ! -e "$run/checkpoints/step_00000006" ] || fail "a step_00000006 directory was committed"
[ "$(cd "$run/checkpoints/step_00000004" && sha256sum ./* | sha256sum)" = "$sum_before" ] ||
  fail "the files of step_00000004 changed"
"$strata" eval --checkpoint "$run" \
  > eval.out 2>&1 || { cat eval.out; fail "the previous checkpoint does not load"; }
grep -q "val loss: " eval.out || { cat eval.out; fail "eval printed no loss"; }

# Resume: from step 4 (the .tmp ignored, then removed), to the same losses as the run that
# never failed (same world size), bit for bit.
train "$run" 8 --resume auto
[ "$rc" = 0 ] || { cat "$run.out"; fail "the resume after the failure exited $rc"; }
grep -q "resumed from .*step_00000004 at step 4" "$run.out" || { cat "$run.out"; fail "did not resume from step 4"; }
left=$(ls -d "$run"/checkpoints/*.tmp* 2> /dev/null)
[ -z "$left" ] || fail "stale save(s) left after the resume: $left"
[ "$(latest "$run")" = step_00000008 ] || fail "LATEST is '$(latest "$run")' after the resume"
want=$(losses straight | awk '$1 > 4')
got=$(losses "$run" | awk '$1 > 4' | tail -n 4)
echo "straight: $(echo $want)"
echo "resumed:  $(echo $got)"
[ "$want" = "$got" ] || fail "the resumed run's losses differ from the run that never failed"
echo PASS
