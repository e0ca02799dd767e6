#!/usr/bin/env bash
# 3D parallelism across hosts: configs/gpt_char_3d.yaml (dp 2 x tp 2 x pp 2,
# ZeRO-1, 1F1B) on 2 network-namespace hosts x 4 ranks (tests/netns_hosts.sh: real TCP
# between them), ranks placed by slot so ranks 0-3 are on host 1 and 4-7 on host 2: with
# the mesh pp x dp x tp each tp pair and each dp pair stays inside a host and the pipeline
# (stage 0 on host 1, stage 1 on host 2) crosses the network. The logged losses and eval
# losses must equal the single-process run's to 1e-5 relative (that run equals the
# single-host mpirun -np 8 run: ctest threed_cli). Skipped where namespaces cannot be made.
#   multihost_3d.sh STRATA MPIRUN SRC WORK          (registered by tests/threed.cmake)
set -u
strata=$1 mpirun=$2 src=$3 work=$4
NETNS_TAG=s3d NETNS_OCTET=79
. "$src/tests/netns_test_env.sh"  # the two hosts, skip rules, $work, cleanup, fail

common=(--config "$src/configs/gpt_char_3d.yaml" --set train.max_steps=6 --set train.log_every=1
        --set train.eval_every=3 --set train.eval_batches=2 --set train.checkpoint_every=0)
flags=$(bash "$hosts" up 2) || fail "netns_hosts.sh up 2 failed"
# 4 slots per host, filled in order (--map-by slot): world ranks 0-3 on host 1, 4-7 on host 2.
flags=${flags//:1/:4}
echo "mpirun flags: $flags --map-by slot"
# A fresh veth link may need a moment before it carries traffic: wait until each host
# reaches the other (mpirun's daemons otherwise fail to route to it).
for _ in $(seq 50); do
  ip netns exec "${NETNS_PREFIX}1" ping -c 1 -W 1 "$NETNS_NET.12" > /dev/null 2>&1 &&
    ip netns exec "${NETNS_PREFIX}2" ping -c 1 -W 1 "$NETNS_NET.11" > /dev/null 2>&1 && break
  sleep 0.2
done
# OpenMPI 4.1's mpirun sometimes dies at start-up in hwloc's topology discovery (see
# multihost_cut.sh), or fails to route to a host's daemon that has just come up: such a
# launch (nothing trained yet) is retried, at most twice.
for attempt in 1 2 3; do
  rm -rf "$work/hosts2"
  # shellcheck disable=SC2086 # the flags are words
  timeout 240 "$mpirun" --allow-run-as-root --oversubscribe -np 8 $flags --map-by slot --bind-to none \
    -x STRATA_NO_REEXEC -x OMP_NUM_THREADS=1 "$strata" train "${common[@]}" --set run.dir="$work/hosts2" \
    < /dev/null > out.txt 2>&1 &
  mp=$!
  # Where the ranks run: the strata processes inside each host's namespace, most seen.
  # A rank is a strata process whose parent is not one: a child of a rank that still
  # bears its name is a helper, not a rank (under ASan, LeakSanitizer's tracer, cloned by
  # each rank at exit for its leak scan, or a symbolizer between fork and exec).
  seen1=0 seen2=0 helpers=0
  while kill -0 "$mp" 2> /dev/null; do
    for i in 1 2; do
      n=0
      for p in $(ip netns pids "$NETNS_PREFIX$i" 2> /dev/null); do
        [ "$(cat /proc/"$p"/comm 2> /dev/null)" = strata ] || continue
        pp=$(awk '{print $4}' /proc/"$p"/stat 2> /dev/null)
        if [ -n "$pp" ] && [ "$(cat /proc/"$pp"/comm 2> /dev/null)" = strata ]; then
          helpers=$((helpers + 1))
          continue
        fi
        n=$((n + 1))
      done
      [ "$i" = 1 ] && [ "$n" -gt "$seen1" ] && seen1=$n
      [ "$i" = 2 ] && [ "$n" -gt "$seen2" ] && seen2=$n
    done
    sleep 0.2
  done
  wait "$mp"
  rc=$?
  mp=
  [ "$rc" = 0 ] && break
  if [ "$attempt" -lt 3 ] && grep -qE "libhwloc|ORTE does not know how to route" out.txt && ! [ -s hosts2/metrics.jsonl ]; then
    echo "note: mpirun failed to start its daemons or ranks (attempt $attempt): launching again"
    head -n 5 out.txt
    sleep 1
    continue
  fi
  fail "mpirun -np 8 across 2 hosts exited $rc"
done
grep -q "layout: dp 2 x tp 2 x pp 2, zero_stage 1" out.txt || fail "no 3D layout line"
echo "ranks seen: $seen1 on host 1, $seen2 on host 2 (and $helpers sightings of a rank's own child process)"
[ "$seen1" = 4 ] && [ "$seen2" = 4 ] || fail "expected 4 ranks on each host, saw $seen1 and $seen2"
"$strata" train "${common[@]}" --set run.dir="$work/one" --set parallel.dp=1 --set parallel.tp=1 --set parallel.pp=1 \
  --set parallel.zero_stage=0 > one.txt 2>&1 || { cat one.txt; fail "the single-process run failed"; }
records() { grep "\"type\":\"$2\"" "$1" | sed -E 's/.*"loss":([^,}]+).*/\1/'; }
for kind in train eval; do
  a=$(records hosts2/metrics.jsonl $kind) b=$(records one/metrics.jsonl $kind)
  [ -n "$a" ] || fail "no $kind records across hosts"
  [ "$(echo "$a" | wc -l)" = "$(echo "$b" | wc -l)" ] || fail "$kind records: $(echo $a) vs $(echo $b)"
  paste <(echo "$a") <(echo "$b") | awk -v k=$kind '{ d = $1 - $2; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2;
    if (d > 1e-5 * s) { print "FAIL: " k " loss " NR ": " $1 " (2 hosts) vs " $2 " (one process)"; bad = 1 } }
    END { exit bad }' || exit 1
  echo "$kind losses, 2 hosts x 4 ranks: $(echo $a)"
  echo "$kind losses, one process:       $(echo $b)"
done
echo PASS
