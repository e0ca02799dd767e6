#!/usr/bin/env bash
# A rank of `mpirun -np 3 strata train` dies (SIGKILL) or hangs (SIGSTOP) mid-run, killed
# from outside as a user's OOM killer or a bad node would: checks that the survivors say
# so in strata's own words, exit 3, and that the job ends within comm.timeout_s + 10 s.
# After a kill, the last complete checkpoint (one every 3 steps) must resume and log the
# killed run's losses again, bit for bit.
#   train_fault.sh MODE STRATA MPIRUN SRC WORK      (registered by tests/fault.cmake)
#   MODE: kill, stop (DDP, 3 ranks); kill_zero3 (ZeRO-3, 3 ranks); shrink (DDP, 2 ranks,
#   rank 1 killed, then the job restarts on 1 process from the last checkpoint and must
#   match, to float tolerance, a 1-process run that never failed); kill_pp (the tiny GPT
#   in 3 pipeline stages, 1F1B, the middle stage killed: both neighbours must name it);
#   kill_tp (the MLP at tp 2, rank 1 killed); kill_flags, stop_flags (as kill and stop,
#   under the teardown flags of run.sh, scripts/mpi_fault_flags.sh: the job must end as
#   soon as without them, within 5 s of a kill and comm.timeout_s + 6 s of a stop)
#   train_fault.sh rank WORK CMD...   (internal: runs one rank, records its pid and status)
set -u

if [ "$1" = rank ]; then
  # Between mpirun and strata: the launcher's SIGTERM must not end this wrapper before
  # strata's own exit status is known (a trapped signal is reset to default in strata).
  work=$2
  shift 2
  r=${OMPI_COMM_WORLD_RANK:?not started by mpirun}
  trap 'true' TERM
  "$@" &
  child=$!
  echo "$child" > "$work/pid.$r"
  while :; do
    wait "$child"
    rc=$?
    kill -0 "$child" 2> /dev/null || break  # else the trap interrupted the wait
  done
  echo "$rc" > "$work/exit.$r"
  if [ "$rc" -gt 128 ]; then  # died of a signal: so does this wrapper, as mpirun expects
    trap - TERM
    kill -s "$(kill -l "$rc")" $$
  fi
  exit "$rc"
fi

mode=$1 strata=$2 mpirun=$3 src=$4 work=$5
timeout_s=5  # comm.timeout_s of the run
limit=$((timeout_s + 10))
victim=1
np=3
survivors="0 2"
extra=()
launcher_flags=""
sig=KILL
case $mode in
  kill) ;;
  stop) sig=STOP ;;
  kill_flags) launcher_flags=$(bash "$src/scripts/mpi_fault_flags.sh" $timeout_s) limit=5 ;;
  stop_flags) launcher_flags=$(bash "$src/scripts/mpi_fault_flags.sh" $timeout_s) limit=$((timeout_s + 6)) sig=STOP ;;
  kill_zero3) extra=(--set parallel.zero_stage=3) ;;
  shrink) np=2 survivors=0 ;;
  kill_pp) ;;
  kill_tp) np=2 survivors=0 extra=(--set parallel.tp=2 --set "model.hidden=[32, 16]") ;;
  *) echo "FAIL: unknown mode $mode"; exit 1 ;;
esac
ranks=$(seq 0 $((np - 1)))
# No dropout (its masks are per rank) and a constant LR (max_steps does not change the
# schedule): a resume must log exactly the losses the killed run logged.
model=(--config "$src/tests/data_files/tiny_mlp.yaml")
[ "$mode" = kill_pp ] && model=(--config "$src/tests/data_files/tiny_gpt.yaml" --set model.n_layer=3
                                --set data.path="$src/tests/data_files/tiny_corpus.txt" --set parallel.pp=3)
common=("${model[@]}" --set model.dropout=0 --set schedule.name=constant
        --set train.batch_size=12 --set train.log_every=1 --set train.eval_every=0 --set train.checkpoint_every=3
        "${extra[@]}")
fail() {
  echo "FAIL: $*"
  echo "----- mpirun output -----"
  cat "$work/out.txt"
  if [ -n "${mp:-}" ] && kill -0 "$mp" 2> /dev/null; then  # leave no rank running
    kill -TERM "$mp"
    sleep 3
    kill -KILL "$mp" 2> /dev/null
    for f in "$work"/pid.*; do
      p=$(cat "$f")
      grep -qF "$strata" "/proc/$p/cmdline" 2> /dev/null && kill -KILL "$p"
    done
  fi
  exit 1
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
# tiny_mlp on np ranks, one thread each, long enough never to finish by itself.
t0=$(now)
# shellcheck disable=SC2086 # the flags are words
"$mpirun" --oversubscribe --allow-run-as-root -np $np $launcher_flags bash "$src/tests/train_fault.sh" rank "$work" \
  "$strata" train "${common[@]}" --set run.dir=run --set train.max_steps=1000000 \
  --set comm.timeout_s=$timeout_s < /dev/null > out.txt 2>&1 &
mp=$!

# Wait until the run is training: rank 0 has logged 5 steps (the world-averaged loss,
# so every rank has taken part in those all-reduces).
for _ in $(seq 600); do
  n=$(grep -c '"type":"train"' run/metrics.jsonl 2> /dev/null)
  [ "${n:-0}" -ge 5 ] && [ -s run/checkpoints/LATEST ] && break
  kill -0 "$mp" 2> /dev/null || fail "mpirun ended before training started"
  sleep 0.05
done
[ "${n:-0}" -ge 5 ] || fail "no training steps logged after 30 s"
for r in $ranks; do [ -s "pid.$r" ] || fail "rank $r recorded no pid"; done
pid=$(cat "pid.$victim")
t_fault=$(now)
kill -"$sig" "$pid" || fail "could not send SIG$sig to rank $victim (pid $pid)"
echo "SIG$sig to rank $victim (pid $pid) after $(elapsed "$t0" "$t_fault") s, at step $n"

# The job must end by itself within the limit.
while kill -0 "$mp" 2> /dev/null; do
  if awk -v a="$t_fault" -v b="$(now)" -v l="$limit" 'BEGIN { exit !(b - a > l) }'; then
    [ "$sig" = STOP ] && kill -CONT "$pid" 2> /dev/null
    fail "the job hung: still running $limit s after SIG$sig"
  fi
  sleep 0.05
done
wait "$mp"
rc=$?
t_end=$(now)
took=$(elapsed "$t_fault" "$t_end")
echo "mpirun exit status $rc, $took s after SIG$sig"
for r in $ranks; do echo "rank $r exit status: $(cat "exit.$r" 2> /dev/null || echo '(none recorded)')"; done
[ "$rc" -ne 0 ] || fail "mpirun exited 0"

# Each survivor's own report (not mpirun's "exited on signal 9"): its rank, the op in
# flight, and for a death the dead rank with the pid that was killed. OpenMPI terminates
# the remaining ranks (SIGTERM, then SIGKILL) as soon as it sees the first abnormal exit:
# a survivor it terminated (status 143/137) is let off, whether or not it had reported
# yet; any other status must be strata's 3, and at least one survivor must have reported
# in strata's words and exited 3.
reported=0
for r in $survivors; do
  status=$(cat "exit.$r" 2> /dev/null)
  line=$(grep -a "^strata: error: rank $r: communication failed: " out.txt | head -n 1)
  if [ "$status" = 143 ] || [ "$status" = 137 ]; then
    echo "note: rank $r was terminated by the launcher (status $status)${line:+ after reporting}"
  else
    [ "$status" = 3 ] || fail "rank $r exited with status $status, neither 3 nor the launcher's signal"
    [ -n "$line" ] || fail "rank $r exited 3 but printed no 'strata: error: rank $r: communication failed' line"
  fi
  [ -n "$line" ] || continue
  # The op, its sequence number and group, and this rank in it: the world (np ranks, rank r)
  # or, under pp, a 2-rank group: an exchange channel ('world/pp-act[..]', 'world/pp-grad[..]')
  # or the first and last stages' tied-embedding group ('embedding'), whose gradient sum
  # is a batch_isend_irecv under inline exchanges.
  echo "$line" | grep -Eq "[a-z_]+ seq [0-9]+ in group '[^']+' \(mpi, $np ranks\) on rank $r" ||
    echo "$line" | grep -Eq "[a-z_0-9]+ seq [0-9]+ in group '(world/pp-[a-z]+\[[0-9]+->[0-9]+\]|embedding)' \(mpi, 2 ranks\) on rank [01]" ||
    fail "rank $r's report names no op: $line"
  # A kill that lands inside the schedule is reported by the pipeline executor; one that
  # lands in the step's loss all-reduce or a checkpoint collective names that op instead.
  if [ "$mode" = kill_pp ] && [[ "$line" == *"[pipeline]"* ]]; then
    echo "$line" | grep -Eq "\[pipeline\] rank $r: the exchange for stage [0-9]+, micro-batch [0-9]+ with peer rank $victim" ||
      fail "rank $r's report names no stage, micro-batch and peer: $line"
  fi
  if [ "$sig" != STOP ]; then
    # A 2-rank pp channel names the peer by its group rank and then its world rank:
    # "lost peer: rank 0 (world rank 1) (pid N on host)" (seen under TSan's timing).
    if echo "$line" | grep -Eq "lost peer: .*(rank $victim|\(world rank $victim\)) \(pid $pid on "; then
      named_victim=$((${named_victim:-0} + 1))
    elif [[ "$line" == *"stopped by the launcher (SIGTERM)"* ]] &&
      echo "$line" | grep -Eq "rank $victim \(pid $pid on [^)]*\)(, rank [0-9]+ \(pid [0-9]+ on [^)]*\))* never joined"; then
      # The launcher's SIGTERM (it ends the job at the first survivor's exit) came before
      # this rank saw the death itself: its report names the ranks that did not answer its
      # status exchange, the dead one among them.
      echo "note: rank $r was stopped by the launcher first; its report names rank $victim among the ranks that never joined"
    else
      # A cascade: a survivor whose op involves only another survivor (under pp, the first
      # and last stages' tied-embedding sum) sees that one exit after it reported the death.
      other=$(echo "$line" | sed -nE 's/.*lost peer: .*\(pid ([0-9]+) on .*/\1/p')
      cascade=""
      for o in $survivors; do
        [ "$(cat "pid.$o")" = "$other" ] && [ "$(cat "exit.$o" 2> /dev/null)" = 3 ] && cascade=$o
      done
      [ -n "$cascade" ] || fail "rank $r's report does not name rank $victim (pid $pid): $line"
      echo "note: rank $r reports the exit of survivor rank $cascade, after rank $victim's death"
    fi
  elif echo "$line" | grep -q "timed out after $timeout_s s (comm.timeout_s)"; then
    timeouts=$((${timeouts:-0} + 1))
    # ...and names the stopped rank (the survivors' status exchange).
    echo "$line" | grep -q "rank $victim (pid $pid on [^)]*) never joined [a-z_]* seq [0-9]* in group 'world'" ||
      fail "rank $r's timeout report does not name rank $victim (pid $pid) as the rank that never joined: $line"
  fi
  [ "$status" = 3 ] && reported=$((reported + 1))
done
[ "$reported" -ge 1 ] || fail "no survivor reported the failure in strata's words and exited 3"
[ "$sig" = STOP ] || [ "${named_victim:-0}" -ge 1 ] || fail "no survivor named rank $victim (pid $pid) in its report"
if [ "$sig" = STOP ]; then
  # A hung peer is found by the timeout only (the survivor that times out first aborts,
  # so the other may report that one's death instead): not before it, not long after.
  [ "${timeouts:-0}" -ge 1 ] || fail "no survivor reported the comm.timeout_s timeout"
  awk -v t="$took" -v l="$timeout_s" 'BEGIN { exit !(t >= l) }' || fail "ended after $took s, before comm.timeout_s"
  echo "PASS"
  exit 0
fi

# The last complete checkpoint resumes: at the same world size bit for bit; at N-1 = 1
# process (shrink) to float tolerance. Reference: a run that never failed, at the world
# size of the resume, a few steps past the last step the killed run logged.
losses() { grep '"type":"train"' "$1" | sed -E 's/.*"loss":([^,]*),.*"step":([0-9]+),.*/\2 \1/'; }
cp run/metrics.jsonl killed.jsonl
ckpt=$(cat run/checkpoints/LATEST 2> /dev/null) || fail "the killed run left no LATEST"
k=$((10#${ckpt#step_}))
last=$(losses killed.jsonl | tail -n 1 | cut -d' ' -f1)
end=$((last + 3))
echo "killed at step $last; LATEST names $ckpt; resuming to step $end; left behind: $(ls run/checkpoints | tr '\n' ' ')"
resume_np=$np
[ "$mode" = shrink ] && resume_np=1
launch() {  # launch DIR STEPS [args]: the run at resume_np ranks
  local dir=$1 steps=$2
  shift 2
  local pre=()
  [ "$resume_np" -gt 1 ] && pre=("$mpirun" --oversubscribe --allow-run-as-root -np "$resume_np")
  "${pre[@]}" "$strata" train "${common[@]}" --set run.dir="$dir" --set train.max_steps="$steps" "$@" \
    < /dev/null > "$dir.out" 2>&1 || { cat "$dir.out"; fail "the run in $dir failed"; }
}
launch straight "$end"
launch run "$end" --resume auto
grep -q "resumed from run/checkpoints/$ckpt at step $k" run.out || { cat run.out; fail "did not resume from $ckpt"; }
[ -z "$(ls -d run/checkpoints/*.tmp* 2> /dev/null)" ] || fail "a stale step_N.tmp survived the resume"
losses straight/metrics.jsonl > straight.txt
losses killed.jsonl > killed.txt
losses run/metrics.jsonl | tail -n $((end - k)) > resumed.txt
[ "$(head -n 1 resumed.txt | cut -d' ' -f1)" = $((k + 1)) ] || fail "the resumed run's first step is not $((k + 1))"
# compare A B TOL WHAT: the losses of A's steps equal B's (relative TOL; 0 = bit for bit).
compare() {
  awk -v tol="$3" -v what="$4" 'NR == FNR { ref[$1] = $2; next }
    { if (!($1 in ref)) { print what ": no reference for step " $1; bad = 1; next }
      d = $2 - ref[$1]; if (d < 0) d = -d; m = ref[$1] < 0 ? -ref[$1] : ref[$1]
      if ((tol == 0 && $2 != ref[$1]) || d > tol * m) { print what ": step " $1 ": " $2 " vs " ref[$1]; bad = 1 } n++ }
    END { if (!n) { print what ": no steps"; bad = 1 } exit bad }' "$2" "$1" || fail "$4 differ"
}
if [ "$mode" = shrink ]; then
  compare killed.txt straight.txt 1e-5 "2-rank losses before the kill vs the 1-process run"
  compare resumed.txt straight.txt 1e-5 "1-process restart from the 2-rank checkpoint vs the 1-process run"
else
  compare killed.txt straight.txt 0 "losses of the killed run vs the run that never failed"
  compare resumed.txt straight.txt 0 "resumed losses vs the run that never failed"
fi
echo "resumed steps $((k + 1))-$end match the run that never failed ($(head -n 1 resumed.txt) ... $(tail -n 1 resumed.txt))"
echo "PASS"
