#!/usr/bin/env bash
# `strata launch` end to end: the restart after a communication failure, and the failures it
# must not restart. tiny_mlp, DDP, a checkpoint every 3 steps, no dropout and a constant LR
# (so a resume logs exactly the losses a run that never failed logs).
#   launch.sh MODE STRATA MPIRUN SRC WORK       (registered by tests/launch.cmake)
#   MODE:
#   flags         `strata launch --dry-run` puts exactly scripts/mpi_fault_flags.sh's flags
#                 on mpirun's line, for several comm.timeout_s
#   kill_local    -np 2 on this host, rank 1 SIGKILLed: launch restarts at 2 ranks, and every
#                 logged loss equals a run that never failed, bit for bit
#   no_restarts   as kill_local with --max-restarts 0: exit 3 naming the failure, no restart
#   config_error  a config error only the ranks see (parallel.dp 3 at 2 ranks): exit 2, never
#                 restarted
#   corrupt_ckpt  LATEST's shard file corrupted: the resume fails with exit 1, never restarted
#   kill          two network-namespace hosts, 1 rank each; the rank on host 2 SIGKILLed: host
#                 2 still answers, so the job restarts on both and matches the run that never
#                 failed bit for bit
#   cut           two hosts, host 2's link taken down: launch drops host 2, finishes on host 1
#                 alone, and its losses after the restart equal a 1-process run resumed by hand
#                 from the same checkpoint (to 1e-5)
#   cut_tp        as cut at tp 2: the 1 rank left cannot hold tp 2, so launch exits 2 naming
#                 parallel.tp / .pp / .cp and the ranks left, without a restart
#   interrupt     SIGTERM to launch: forwarded to the job, which ends with every rank; exit 143,
#                 no restart. And a closed output (`| head`) ends neither launch nor the job
# kill, cut and cut_tp need root and network namespaces (skipped otherwise). The time from the fault to
# the restarted job's first logged step is printed ("fault to first step: X s").
set -u
mode=$1 strata=$2 mpirun=$3 src=$4 work=$5
hosts=$src/tests/netns_hosts.sh  # (netns_test_env.sh sets it too)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATA_NO_REEXEC=1
steps=300
r0=0  # restarts launch.jsonl records before the fault
common=(--config "$src/tests/data_files/tiny_mlp.yaml" --set model.dropout=0 --set schedule.name=constant
        --set train.batch_size=12 --set train.log_every=1 --set train.eval_every=0 --set train.checkpoint_every=3
        --set comm.timeout_s=10)
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
losses() { grep '"type":"train"' "$1" | sed -E 's/.*"loss":([^,]*),.*"step":([0-9]+),.*/\2 \1/'; }
# compare A B TOL WHAT: the losses of A's steps equal B's (relative TOL; 0 = bit for bit).
compare() {
  awk -v tol="$3" -v what="$4" 'NR == FNR { ref[$1] = $2; next }
    { if (!($1 in ref)) { print what ": no reference for step " $1; bad = 1; next }
      d = $2 - ref[$1]; if (d < 0) d = -d; m = ref[$1] < 0 ? -ref[$1] : ref[$1]
      if ((tol == 0 && $2 != ref[$1]) || d > tol * m) { print what ": step " $1 ": " $2 " vs " ref[$1]; bad = 1 } n++ }
    END { if (!n) { print what ": no steps"; bad = 1 } exit bad }' "$2" "$1" || fail "$4 differ"
}

# launch: the `strata launch` under test, in the background ($lp), its output in out.txt.
lp=
stop_launch() {
  [ -n "$lp" ] && kill -0 "$lp" 2> /dev/null || return 0
  kill -TERM "$lp"  # launch forwards it to mpirun and reaps it (at most ~10 s)
  for _ in $(seq 150); do kill -0 "$lp" 2> /dev/null || return 0; sleep 0.1; done
  kill -KILL "$lp" 2> /dev/null
}
if [ "$mode" = kill ] || [ "$mode" = cut ] || [ "$mode" = cut_tp ]; then
  # shellcheck disable=SC2034 # read by netns_test_env.sh
  NETNS_TAG=sl NETNS_OCTET=79
  # shellcheck source=tests/netns_test_env.sh
  . "$src/tests/netns_test_env.sh"  # the two hosts, skip rules, $work, cleanup
  trap 'stop_launch; cleanup' EXIT
else
  rm -rf "$work"
  mkdir -p "$work"
  cd "$work" || exit 1
  trap stop_launch EXIT
fi
fail() {
  echo "FAIL: $*"
  [ -f out.txt ] && { echo "----- launch output -----"; grep -vE '^step [0-9]+/|^checkpoint: ' out.txt; }
  [ -f run/launch.jsonl ] && { echo "----- launch.jsonl -----"; cat run/launch.jsonl; }
  exit 1
}
start_launch() {  # start_launch [launch options] -- [train options]
  "$strata" launch "$@" < /dev/null > out.txt 2>&1 &
  lp=$!
}
wait_launch() {  # wait_launch LIMIT_S: launch must end within LIMIT_S; sets rc
  local t0
  t0=$(now)
  while kill -0 "$lp" 2> /dev/null; do
    awk -v a="$t0" -v b="$(now)" -v l="$1" 'BEGIN { exit !(b - a > l) }' && fail "launch still running after $1 s"
    sleep 0.1
  done
  wait "$lp"
  rc=$?
  lp=
}
wait_steps() {  # wait_steps N: the job has logged N steps and written a checkpoint
  for _ in $(seq 600); do
    n=$(grep -c '"type":"train"' run/metrics.jsonl 2> /dev/null)
    [ "${n:-0}" -ge "$1" ] && [ -s run/checkpoints/LATEST ] && return 0
    kill -0 "$lp" 2> /dev/null || fail "launch ended before training started"
    sleep 0.05
  done
  fail "no $1 training steps logged after 30 s"
}
rank_pid() {  # rank_pid R: the pid of world rank R of the running job on this machine
  local p
  for p in $(pgrep -x strata); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" || continue
    [ "$(readlink "/proc/$p/cwd")" = "$PWD" ] || continue  # this test's job, not another one's
    echo "$p"
    return 0
  done
}
# first_step_after_restart T_FAULT: waits for the restarted job's first logged step (the
# "step K+1/" line after its "resumed from" line, K from restart r0 + 1) and prints the
# seconds since T_FAULT.
first_step_after_restart() {
  local k
  for _ in $(seq 1200); do
    if [ "$(events restart)" -gt "$r0" ]; then
      k=$(nth_restart $((r0 + 1)) | sed -E 's/.*"resume":"step_0*([0-9]+)".*/\1/')
      if [ -n "$k" ] && sed -n '/^resumed from /,$p' out.txt | grep -q "^step $((k + 1))/"; then
        elapsed "$1" "$(now)"
        return 0
      fi
    fi
    kill -0 "$lp" 2> /dev/null || break
    sleep 0.05
  done
  echo "n/a"
}
events() { grep -c "\"event\":\"$1\"" run/launch.jsonl 2> /dev/null; }
nth_restart() { grep '"event":"restart"' run/launch.jsonl | sed -n "${1}p"; }
# after_fault: the restarts logged since the fault (r0 = those before it: an mpirun that
# crashed at start-up, which launch restarts too, is noted, not failed). Sets `first` (the
# fault's restart event, which the checks read) and `k`, the step the job finally resumed at.
after_fault() {
  local n
  n=$(events restart)
  [ "$n" -gt "$r0" ] || fail "launch.jsonl records no restart after the fault"
  [ "$r0" = 0 ] || echo "note: $r0 restart(s) before the fault: $(nth_restart 1)"
  [ "$n" = $((r0 + 1)) ] || echo "note: $((n - r0 - 1)) more restart(s) after the fault's: $(nth_restart "$n")"
  first=$(nth_restart $((r0 + 1)))
  k=$(nth_restart "$n" | sed -E 's/.*"resume":"step_0*([0-9]+)".*/\1/')
  ckpt=$(nth_restart "$n" | sed -E 's/.*"resume":"(step_[0-9]+)".*/\1/')
  grep -q "resumed from run/checkpoints/$ckpt at step $k" out.txt || fail "the restart did not resume from $ckpt"
}

case $mode in
  flags)
    for t in 1 2 3 5 10 19 20 45 300 400 1000 100000; do
      want=$(bash "$src/scripts/mpi_fault_flags.sh" "$t") || fail "mpi_fault_flags.sh $t failed"
      line=$("$strata" launch --dry-run -np 2 -- train "${common[@]}" --set comm.timeout_s="$t") ||
        fail "launch --dry-run failed for comm.timeout_s $t"
      got=$(echo "$line" | grep -oE -- "--mca oob_tcp_keepalive_time [0-9]+ --mca oob_tcp_keepalive_intvl [0-9]+ --mca oob_tcp_keepalive_probes [0-9]+")
      [ "$got" = "$want" ] || fail "comm.timeout_s $t: launch puts '$got' on mpirun's line, the script prints '$want'"
      echo "comm.timeout_s $t: $got"
    done
    # The first start resumes the run's LATEST; the user's own --overwrite replaces it.
    echo "$line" | grep -q -- "--resume auto$" || fail "the first start does not pass --resume auto: $line"
    line=$("$strata" launch --dry-run --hosts a:2,b:1 -- train "${common[@]}" --overwrite)
    echo "$line" | grep -q -- "--host a:2,b:1 --map-by slot -np 3 .* --overwrite$" || fail "hosts / --overwrite: $line"
    printf '# two hosts\na slots=2\nb\n' > hosts
    line=$("$strata" launch --dry-run --hostfile hosts -np 2 -- train "${common[@]}")
    echo "$line" | grep -q -- "--host a:2,b:1 --map-by slot -np 2 " || fail "--hostfile: $line"
    # What launch owns is refused, exit 2, naming it.
    for bad in "-np 4 --hosts a:2,b:1" "--hosts a:2 --mpirun-args=--map-by=node" "--hosts a:2 --mpirun-args=-H=b"; do
      # shellcheck disable=SC2086 # the options are words
      "$strata" launch --dry-run $bad -- train "${common[@]}" > bad.txt 2>&1
      rc=$?
      [ "$rc" = 2 ] || { cat bad.txt; fail "launch $bad: exit $rc, not 2"; }
      grep -Eq "exceeds the 3 slots|is launch's to set" bad.txt || { cat bad.txt; fail "launch $bad: no reason given"; }
    done
    echo PASS
    ;;

  kill_local | no_restarts | kill)
    max=3
    [ "$mode" = no_restarts ] && max=0
    lopts=(-np 2 --mpirun-args "--oversubscribe")
    if [ "$mode" = kill ]; then
      flags=$(bash "$hosts" up 2) || fail "netns_hosts.sh up 2 failed"
      hostlist=$(echo "$flags" | sed -nE 's/.*--host ([^ ]+).*/\1/p')
      lopts=(--hosts "$hostlist" --probe-timeout 10 --mpirun-args "--oversubscribe -x STRATA_NO_REEXEC ${flags% --host *}")
    fi
    start_launch "${lopts[@]}" --max-restarts $max --backoff 0.5 --mpirun "$mpirun" -- \
      train "${common[@]}" --set run.dir=run --set train.max_steps=$steps
    wait_steps 5
    r0=$(events restart)
    victim=$(rank_pid 1)
    [ -n "$victim" ] || fail "no process of rank 1 found"
    t_fault=$(now)
    kill -KILL "$victim"
    echo "SIGKILL to rank 1 (pid $victim) at step $n"
    [ "$mode" = no_restarts ] || echo "fault to first step: $(first_step_after_restart "$t_fault") s"
    wait_launch 90
    echo "launch exit status $rc, $(elapsed "$t_fault" "$(now)") s after the kill"
    grep "^strata launch:" out.txt
    if [ "$mode" = no_restarts ]; then
      [ "$rc" = 3 ] || fail "launch exited $rc, not 3, with --max-restarts 0"
      grep -q "^strata launch: giving up after 0 restart(s) (--max-restarts 0): rank 0: communication failed: .*lost peer: rank 1 (pid $victim on " out.txt ||
        fail "launch's last line does not name the failure"
      [ "$(events restart)" = 0 ] || fail "launch.jsonl records a restart"
      [ "$(events start)" = 1 ] || fail "launch.jsonl records $(events start) starts, not 1"
      grep -q '"outcome":"gave up"' run/launch.jsonl || fail "launch.jsonl does not record that it gave up"
      echo PASS
      exit 0
    fi
    [ "$rc" = 0 ] || fail "launch exited $rc"
    after_fault
    echo "$first" | grep -q '"dropped":\[\].*"previous_world_size":2.*"world_size":2' ||
      fail "the restart is not on both hosts at world size 2: $first"
    # The reason: a survivor's report, or (when mpirun stopped it before it could report)
    # mpirun's notice of the killed rank.
    grep -Eq "^strata launch: restart $((r0 + 1))/3: (rank 0: communication failed: .*lost peer: rank 1 \(pid $victim on |mpirun: mpirun noticed that process rank 1 with PID $victim on node [^ ]+ exited on signal 9).*; no host dropped; hosts .*; world size 2 -> 2; from step_" out.txt ||
      fail "no restart line naming the killed rank on stderr"
    # Reference: the same job at 2 ranks that never failed.
    "$mpirun" --oversubscribe -np 2 "$strata" train "${common[@]}" --set run.dir=straight --set train.max_steps=$steps \
      < /dev/null > straight.out 2>&1 || { cat straight.out; fail "the reference run failed"; }
    losses run/metrics.jsonl > launched.txt
    losses straight/metrics.jsonl > straight.txt
    [ "$(wc -l < launched.txt)" = $steps ] || fail "the launched run logged $(wc -l < launched.txt) steps, not $steps"
    compare launched.txt straight.txt 0 "losses of the restarted job (from step $k) vs the run that never failed"
    echo "restarted from step $k; steps 1-$steps equal the run that never failed bit for bit"
    echo PASS
    ;;

  cut)
    flags=$(bash "$hosts" up 2) || fail "netns_hosts.sh up 2 failed"
    hostlist=$(echo "$flags" | sed -nE 's/.*--host ([^ ]+).*/\1/p')
    start_launch --hosts "$hostlist" --probe-timeout 6 --backoff 0.5 --mpirun "$mpirun" \
      --mpirun-args "--oversubscribe -x STRATA_NO_REEXEC ${flags% --host *}" -- \
      train "${common[@]}" --set run.dir=run --set train.max_steps=$steps
    wait_steps 5
    r0=$(events restart)
    bash "$hosts" cut 2 || fail "netns_hosts.sh cut 2 failed"
    t_fault=$(now)
    echo "host 2 cut off at step $n"
    echo "fault to first step: $(first_step_after_restart "$t_fault") s"
    wait_launch 90
    echo "launch exit status $rc, $(elapsed "$t_fault" "$(now)") s after the cut"
    grep "^strata launch:" out.txt
    [ "$rc" = 0 ] || fail "launch exited $rc"
    h2=${hostlist#*,}
    h2=${h2%:*}
    after_fault
    echo "$first" | grep -q "\"dropped\":\[\"$h2\"\].*\"previous_world_size\":2.*\"world_size\":1" ||
      fail "the restart did not drop $h2 and shrink to 1 rank: $first"
    grep -q "^strata launch: restart $((r0 + 1))/3: .*; dropped $h2 (named in the failure; its probe failed or ran past 6 s); hosts ${hostlist%%,*}; world size 2 -> 1; from step_" out.txt ||
      fail "no restart line naming the dropped host on stderr"
    # Reference: the same checkpoint resumed by hand with 1 process.
    "$strata" train "${common[@]}" --set run.dir=byhand --set train.max_steps=$steps --resume "run/checkpoints/$ckpt" \
      < /dev/null > byhand.out 2>&1 || { cat byhand.out; fail "the resume by hand failed"; }
    losses run/metrics.jsonl | awk -v k="$k" '$1 > k' > launched.txt
    losses byhand/metrics.jsonl | awk -v k="$k" '$1 > k' > byhand.txt
    [ "$(wc -l < launched.txt)" = $((steps - k)) ] || fail "the restarted job logged $(wc -l < launched.txt) steps after $k"
    compare launched.txt byhand.txt 1e-5 "losses on host 1 alone after the restart vs 1 process resumed by hand from $ckpt"
    echo "final loss: $(tail -n 1 launched.txt) (by hand: $(tail -n 1 byhand.txt))"
    echo PASS
    ;;

  cut_tp)
    # tp 2 on 2 hosts of 1 rank: with host 2 cut off, 1 rank is left, which tp 2 cannot use.
    flags=$(bash "$hosts" up 2) || fail "netns_hosts.sh up 2 failed"
    hostlist=$(echo "$flags" | sed -nE 's/.*--host ([^ ]+).*/\1/p')
    start_launch --hosts "$hostlist" --probe-timeout 6 --backoff 0.5 --mpirun "$mpirun" \
      --mpirun-args "--oversubscribe -x STRATA_NO_REEXEC ${flags% --host *}" -- \
      train "${common[@]}" --set run.dir=run --set train.max_steps=$steps --set parallel.tp=2 --set "model.hidden=[32, 16]"
    wait_steps 5
    r0=$(events restart)
    bash "$hosts" cut 2 || fail "netns_hosts.sh cut 2 failed"
    echo "host 2 cut off at step $n"
    wait_launch 60
    grep "^strata launch:" out.txt
    [ "$rc" = 2 ] || fail "launch exited $rc, not 2, for a layout the hosts left cannot hold"
    h1=${hostlist%%,*}
    h2=${hostlist#*,}
    grep -q "^strata launch: cannot restart: parallel.tp (2) x parallel.pp (1) x parallel.cp (1) = 2 does not divide the 1 rank(s) left on $h1 after dropping ${h2%:*}" out.txt ||
      fail "launch does not name the layout keys and the ranks left"
    [ "$(events restart)" = "$r0" ] || fail "launch.jsonl records a restart after the cut"
    [ "$(events give_up)" = 1 ] || fail "launch.jsonl records no give_up"
    echo PASS
    ;;

  interrupt)
    # SIGTERM to launch: forwarded to the job, which ends; no restart, exit 128 + 15.
    start_launch -np 2 --mpirun-args "--oversubscribe" --mpirun "$mpirun" -- \
      train "${common[@]}" --set run.dir=run --set train.max_steps=100000
    wait_steps 5
    ranks="$(rank_pid 0) $(rank_pid 1)"
    [ "$(echo "$ranks" | wc -w)" = 2 ] || fail "ranks 0 and 1 not found: '$ranks'"
    kill -TERM "$lp"
    wait_launch 20
    echo "launch exit status $rc after SIGTERM"
    [ "$rc" = 143 ] || fail "launch exited $rc, not 143, on SIGTERM"
    # Gone, or a zombie waiting for init to reap it (the ranks' parent, mpirun, has ended).
    alive() { [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2> /dev/null)" != Z ]; }
    for p in $ranks; do alive "$p" && fail "rank pid $p outlived launch: $(cat "/proc/$p/stat" 2> /dev/null)"; done
    grep -q '"outcome":"interrupted"' run/launch.jsonl || fail "launch.jsonl does not record the interruption"
    [ "$(events restart)" = 0 ] || fail "launch.jsonl records a restart"
    grep -q "^strata launch: interrupted (signal 15): not restarting" out.txt || fail "no interruption line"
    # A reader that goes away (`| head`) ends neither launch nor the job: SIGPIPE is ignored.
    rm -rf run
    "$strata" launch -np 2 --mpirun-args "--oversubscribe" --mpirun "$mpirun" -- \
      train "${common[@]}" --set run.dir=run --set train.max_steps=30 < /dev/null 2>&1 | head -n 1 > /dev/null
    rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || fail "launch exited $rc when its output was closed"
    [ "$(grep -c '"type":"train"' run/metrics.jsonl)" = 30 ] || fail "the job did not finish its 30 steps"
    echo PASS
    ;;

  config_error)
    # Rejected by launch itself (an unknown key): exit 2 before any start.
    "$strata" launch -np 2 -- train "${common[@]}" --set run.dir=run --set train.max_stepz=5 > early.txt 2>&1
    rc=$?
    [ "$rc" = 2 ] || { cat early.txt; fail "an unknown key: launch exited $rc, not 2"; }
    grep -q "train.max_stepz" early.txt || { cat early.txt; fail "the error does not name train.max_stepz"; }
    [ ! -e run/launch.jsonl ] || fail "launch started a job for a config it could not read"
    # Seen only by the ranks: parallel.dp 3 at 2 ranks.
    start_launch -np 2 --mpirun-args "--oversubscribe" --backoff 0 --mpirun "$mpirun" -- \
      train "${common[@]}" --set run.dir=run --set train.max_steps=20 --set parallel.dp=3
    wait_launch 60
    grep "^strata launch:" out.txt
    [ "$rc" = 2 ] || fail "launch exited $rc, not the job's 2"
    grep -q "parallel.dp" out.txt || fail "the ranks' error naming parallel.dp is not passed through"
    grep -q "^strata launch: not restarting (exit 2 is not a communication failure): .*parallel.dp" out.txt ||
      fail "launch does not say why it does not restart"
    [ "$(events restart)" = 0 ] || fail "launch.jsonl records a restart"
    [ "$(events start)" = 1 ] || fail "launch.jsonl records $(events start) starts, not 1"
    echo PASS
    ;;

  corrupt_ckpt)
    start_launch -np 2 --mpirun-args "--oversubscribe" --mpirun "$mpirun" -- \
      train "${common[@]}" --set run.dir=run --set train.max_steps=6
    wait_launch 60
    [ "$rc" = 0 ] || fail "the first 6 steps failed (exit $rc)"
    ckpt=$(cat run/checkpoints/LATEST)
    shard=$(find run/checkpoints/"$ckpt" -name "*.safetensors" | sort | head -n 1)
    [ -n "$shard" ] || fail "no shard file in run/checkpoints/$ckpt: $(ls run/checkpoints/"$ckpt")"
    # Flip every bit of one byte in the middle of the shard: its CRC no longer matches.
    size=$(stat -c %s "$shard")
    off=$((size / 2))
    byte=$(od -An -tu1 -j "$off" -N1 "$shard" | tr -d ' ')
    # shellcheck disable=SC2059 # the format is the byte, as an octal escape
    printf "$(printf '\\%03o' $((255 - byte)))" | dd of="$shard" bs=1 seek="$off" conv=notrunc status=none
    start_launch -np 2 --mpirun-args "--oversubscribe" --backoff 0 --mpirun "$mpirun" -- \
      train "${common[@]}" --set run.dir=run --set train.max_steps=12
    wait_launch 60
    grep "^strata launch:" out.txt
    [ "$rc" = 1 ] || fail "launch exited $rc, not the job's 1"
    grep -q "^strata launch: not restarting (exit 1 is not a communication failure): .*$ckpt" out.txt ||
      fail "launch does not name the checkpoint error as why it does not restart"
    [ "$(events restart)" = 0 ] || fail "launch.jsonl records a restart"
    [ "$(events start)" = 2 ] || fail "launch.jsonl records $(events start) starts, not 2 (6 steps, then the resume)"
    echo PASS
    ;;
  *) echo "FAIL: unknown mode $mode"; exit 1 ;;
esac
