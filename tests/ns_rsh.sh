#!/usr/bin/env bash
# mpirun's remote-shell agent for the test hosts of tests/netns_hosts.sh: "ssh host cmd"
# becomes "run cmd inside that host's network namespace".
host=$1
shift
exec ip netns exec "$host" bash -c "$*"
