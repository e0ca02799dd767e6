#!/usr/bin/env bash
# HSDP across hosts: the mpi test HsdpMpi.* (ZeRO-3 in 2 shard groups of 2 ranks,
# gradient slices averaged over the 2 replicas) on 2 network-namespace hosts x 2 ranks
# (tests/netns_hosts.sh: real TCP between them), ranks placed by slot so world ranks 0-1
# are on host 1 and 2-3 on host 2: each host is one shard group. Every rank prints its
# host (network namespace), its groups' world ranks and the bytes each group sent; the
# test requires the shard group's ranks on one host, the replicas on two, no all-gather
# or reduce-scatter on the replicate group (so no parameter gather crosses hosts) and
# the single-process parameters and losses. Skipped where namespaces cannot be made.
#   multihost_hsdp.sh TEST_BINARY MPIRUN SRC WORK          (registered by tests/hsdp.cmake)
set -u
testbin=$1 mpirun=$2 src=$3 work=$4
NETNS_TAG=shs NETNS_OCTET=83
. "$src/tests/netns_test_env.sh"  # the two hosts, skip rules, $work, cleanup, fail

flags=$(bash "$hosts" up 2) || fail "netns_hosts.sh up 2 failed"
flags=${flags//:1/:2}  # 2 slots per host, filled in order (--map-by slot)
echo "mpirun flags: $flags --map-by slot"
for _ in $(seq 50); do  # a fresh veth link may need a moment before it carries traffic
  ip netns exec "${NETNS_PREFIX}1" ping -c 1 -W 1 "$NETNS_NET.12" > /dev/null 2>&1 &&
    ip netns exec "${NETNS_PREFIX}2" ping -c 1 -W 1 "$NETNS_NET.11" > /dev/null 2>&1 && break
  sleep 0.2
done
# As in multihost_3d.sh: a launch that fails before any test ran (hwloc at start-up, a
# daemon not yet routable) is retried, at most twice.
for attempt in 1 2 3; do
  # shellcheck disable=SC2086 # the flags are words
  timeout 240 "$mpirun" --allow-run-as-root --oversubscribe -np 4 $flags --map-by slot --bind-to none \
    -x STRATA_NO_REEXEC -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 -x STRATA_HSDP_HOSTS=2 \
    "$testbin" --gtest_filter='HsdpMpi.*' < /dev/null > out.txt 2>&1 &
  mp=$!
  wait "$mp"
  rc=$?
  mp=
  [ "$rc" = 0 ] && break
  if [ "$attempt" -lt 3 ] && grep -qE "libhwloc|ORTE does not know how to route" out.txt && ! grep -q "RUN " out.txt; then
    echo "note: mpirun failed to start its daemons or ranks (attempt $attempt): launching again"
    sleep 1
    continue
  fi
  fail "mpirun -np 4 across 2 hosts exited $rc"
done
grep -E "^rank [0-9] host" out.txt | sort
[ "$(grep -c "PASSED .*1 test" out.txt)" = 4 ] || fail "expected the test to pass on each of the 4 ranks"
# The hosts the ranks printed: ranks 0-1 on one, 2-3 on another.
h() { sed -nE "s/^rank $1 host netns:([0-9]+) .*/\\1/p" out.txt; }
[ -n "$(h 0)" ] && [ "$(h 0)" = "$(h 1)" ] && [ "$(h 2)" = "$(h 3)" ] && [ "$(h 0)" != "$(h 2)" ] ||
  fail "expected ranks 0-1 on one host and 2-3 on another: $(h 0) $(h 1) $(h 2) $(h 3)"
echo PASS
