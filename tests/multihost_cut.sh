#!/usr/bin/env bash
# A host cut off the network mid-training: mpirun -np 2 across two network-
# namespace hosts (tests/netns_hosts.sh), DDP, comm.timeout_s 10, with the teardown flags
# run.sh uses (scripts/mpi_fault_flags.sh). Host 2's link goes down after 5 steps; the rank on
# host 1 must name the op and the lost rank, mpirun must exit non-zero within comm.timeout_s + 5 s,
# and no daemon or rank may be left in either host. Skipped where namespaces cannot be made.
#   multihost_cut.sh STRATA MPIRUN SRC WORK          (registered by tests/fault.cmake)
set -u
strata=$1 mpirun=$2 src=$3 work=$4
timeout_s=10
limit=$((timeout_s + 5))  # about D + 2 s after the cut (D = timeout - 5 here), with slack for a loaded host
NETNS_TAG=sf NETNS_OCTET=78
. "$src/tests/netns_test_env.sh"  # the two hosts, skip rules, $work, cleanup, fail
now() { date +%s.%N; }

flags=$(bash "$hosts" up 2) || fail "netns_hosts.sh up 2 failed"
teardown=$(bash "$src/scripts/mpi_fault_flags.sh" $timeout_s)
echo "mpirun flags: $flags $teardown"
# A launch that dies in hwloc before any rank runs (Open MPI 4.1's daemons writing their
# topology to shared memory; netns_hosts.sh's flags turn that off) is retried, at most
# twice; any other early end fails.
for attempt in 1 2 3; do
  rm -rf "$work/run"
  # shellcheck disable=SC2086 # the flags are words
  "$mpirun" --allow-run-as-root --oversubscribe -np 2 $flags $teardown -x STRATA_NO_REEXEC \
    "$strata" train --config "$src/tests/data_files/tiny_mlp.yaml" --set run.dir="$work/run" \
    --set train.max_steps=1000000 --set train.log_every=1 --set train.eval_every=0 --set run.threads=1 \
    --set comm.timeout_s=$timeout_s < /dev/null > out.txt 2>&1 &
  mp=$!
  started=1
  for _ in $(seq 600); do
    n=$(grep -c '"type":"train"' run/metrics.jsonl 2> /dev/null)
    [ "${n:-0}" -ge 5 ] && break
    if ! kill -0 "$mp" 2> /dev/null; then
      started=0
      break
    fi
    sleep 0.1
  done
  [ "$started" = 1 ] && break
  if [ "$attempt" -lt 3 ] && grep -q "libhwloc" out.txt && ! [ -s run/metrics.jsonl ]; then
    echo "note: mpirun crashed in hwloc before starting the ranks (attempt $attempt); launching again"
    continue
  fi
  fail "mpirun ended before training started"
done
[ "${n:-0}" -ge 5 ] || fail "no training steps logged after 60 s"
bash "$hosts" cut 2 || fail "netns_hosts.sh cut 2 failed"
t_cut=$(now)
echo "host 2 cut off at step $n"
while kill -0 "$mp" 2> /dev/null; do
  awk -v a="$t_cut" -v b="$(now)" -v l="$limit" 'BEGIN { exit !(b - a > l) }' &&
    fail "mpirun still running $limit s (comm.timeout_s + 5) after the cut"
  sleep 0.1
done
wait "$mp"
rc=$?
took=$(awk -v a="$t_cut" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
mp=
echo "mpirun exit status $rc, $took s after the cut"
[ "$rc" -ne 0 ] || fail "mpirun exited 0"
# mpirun declares host 2 lost before comm.timeout_s and stops rank 0 with SIGTERM: rank 0
# names the op it waited in and the rank that did not answer (comm/launcher_signal.h), or,
# had its own timeout come first, reports that timeout.
grep -aEq "^strata: error: rank 0: communication failed: .*(timed out after $timeout_s s \(comm.timeout_s\)|stopped by the launcher \(SIGTERM\) after waiting [0-9.]+ s of comm.timeout_s $timeout_s s): [a-z_]* seq [0-9]* in group 'world' \(mpi, 2 ranks\) on rank 0.*rank 1 \(pid [0-9]+ on [^)]*\) never joined" out.txt ||
  fail "rank 0 (host 1) did not name the op and rank 1"
# Nothing may outlive mpirun on either host (the lost host's daemon notices on its own).
for _ in $(seq 100); do
  [ -z "$(leftovers)" ] && break
  sleep 0.1
done
left=$(leftovers)
[ -z "$left" ] || fail "left running after mpirun exited: $(for p in $left; do echo -n "$p $(cat /proc/$p/comm 2> /dev/null) "; done)"
grep -a "strata: error: rank 0" out.txt | head -n 1
echo PASS
