#!/usr/bin/env bash
# Test hosts for multi-host runs on one machine: each "host" is a network namespace with its
# own address on a private bridge, so mpirun really crosses a TCP network between them.
#   netns_hosts.sh up N     create hosts <prefix>1..N (10.78.0.11, .12, ...) and print mpirun flags
#   netns_hosts.sh down     remove them
#   netns_hosts.sh cut K    take host K's link down (a network fault); 'heal K' brings it back
# NETNS_PREFIX (default stf-h) names the hosts and the bridge (br-<prefix>), so two users of
# this script on one machine do not share hosts. Needs root (CAP_NET_ADMIN) and iproute2.
# mpirun reaches a host through tests/ns_rsh.sh (its "ssh").
set -euo pipefail
pre=${NETNS_PREFIX:-stf-h}
br=br-${pre%-h}
net=${NETNS_NET:-10.78.0}
here=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
  up)
    n=${2:?number of hosts}
    ip link show "$br" > /dev/null 2>&1 || { ip link add "$br" type bridge; ip addr add "$net.1/24" dev "$br"; ip link set "$br" up; }
    for i in $(seq 1 "$n"); do
      h=$pre$i
      ip netns list | grep -qw "$h" && continue
      ip netns add "$h"
      ip link add "${pre}v$i" type veth peer name "${pre}p$i"
      ip link set "${pre}p$i" netns "$h"
      ip link set "${pre}v$i" master "$br"
      ip link set "${pre}v$i" up
      ip netns exec "$h" ip addr add "$net.$((10 + i))/24" dev "${pre}p$i"
      ip netns exec "$h" ip link set "${pre}p$i" up
      ip netns exec "$h" ip link set lo up
    done
    hosts=$(seq -s, -f "$pre%g:1" 1 "$n")
    # rtc_hwloc_vmhole none: the remote daemons keep their hwloc topology to themselves.
    # Otherwise each orted writes it into shared memory mapped at the biggest hole of its
    # address space, and where that hole borders the stack (an unlimited stack rlimit
    # lays the address space out bottom-up) hwloc_shmem_topology_write segfaults.
    echo "--mca rtc_hwloc_vmhole none --mca plm_rsh_agent $here/ns_rsh.sh --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24 --host $hosts"
    ;;
  down)
    for h in $(ip netns list | awk -v p="$pre" 'index($1, p) == 1 {print $1}'); do ip netns del "$h"; done
    # A namespace goes away only when nothing refers to it; its veth pair goes with this end.
    for l in $(ip -o link show | awk -F': ' -v p="${pre}v" 'index($2, p) == 1 {sub(/@.*/, "", $2); print $2}'); do
      ip link del "$l" 2> /dev/null || true
    done
    if ip link show "$br" > /dev/null 2>&1; then ip link del "$br"; fi
    ;;
  cut) ip netns exec "$pre${2:?host}" ip link set "${pre}p$2" down ;;
  heal) ip netns exec "$pre${2:?host}" ip link set "${pre}p$2" up ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
