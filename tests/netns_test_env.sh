# Sourced by the multihost tests (multihost_cut.sh, multihost_3d.sh) after they set
# `src`, `work`, NETNS_TAG (a short letter tag) and NETNS_OCTET (the third octet of its
# subnet): two network-namespace hosts of this run only (tests/netns_hosts.sh), so
# concurrent runs on one machine do not collide. Skips the test (exit 0, "SKIPPED: ...")
# where namespaces cannot be made; removes hosts an earlier killed run left behind;
# enters a fresh $work; tears the hosts and any rank left in them down on exit.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATA_NO_REEXEC=1
export NETNS_PREFIX="$NETNS_TAG$$-h" NETNS_NET="10.$NETNS_OCTET.$(($$ % 250))"
hosts="$src/tests/netns_hosts.sh"

[ "$(id -u)" = 0 ] || { echo "SKIPPED: needs root for network namespaces"; exit 0; }
command -v ip > /dev/null || { echo "SKIPPED: no iproute2 (ip)"; exit 0; }
if ! ip netns add "${NETNS_PREFIX}probe" 2> /dev/null; then echo "SKIPPED: cannot create a network namespace"; exit 0; fi
ip netns del "${NETNS_PREFIX}probe"

# Hosts left by an earlier run that was killed before its trap ran (a ctest timeout).
for old in $(ip netns list | sed -nE "s/^$NETNS_TAG([0-9]+)-h[0-9]+.*/\\1/p" | sort -u); do
  kill -0 "$old" 2> /dev/null || NETNS_PREFIX="$NETNS_TAG$old-h" bash "$hosts" down > /dev/null 2>&1
done

rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
leftovers() { for i in 1 2; do ip netns pids "$NETNS_PREFIX$i" 2> /dev/null; done; }
cleanup() {
  [ -n "${mp:-}" ] && kill -0 "$mp" 2> /dev/null && kill -KILL "$mp"
  for p in $(leftovers); do kill -KILL "$p" 2> /dev/null; done
  bash "$hosts" down > /dev/null 2>&1
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  [ -f out.txt ] && { echo "----- mpirun output -----"; cat out.txt; }
  exit 1
}
