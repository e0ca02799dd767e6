#!/usr/bin/env bash
# OpenMPI (4.x, ORTE) settings that bound a job's teardown when a host drops off the
# network, for a given comm.timeout_s; printed as mpirun flags. Used by run.sh; see
# docs/reliability.md ("A host cut off") for why each is needed and how they were measured.
#   scripts/mpi_fault_flags.sh [comm.timeout_s, default 300]
# - oob_tcp_keepalive_*: mpirun's out-of-band TCP link to each daemon probes an idle peer
#   every second after 1 s idle; a host that stops answering for about D = timeout - margin
#   seconds (margin = min(10, timeout/2)) is declared lost and the job is aborted. Without
#   this, mpirun notices only when TCP gives up retransmitting its kill order (15+ minutes).
#   D must be shorter than comm.timeout_s: once a surviving rank has exited, mpirun's order
#   to the lost host stays unacknowledged, and Linux sends no keepalive probes while data is
#   outstanding.
# - odls_base_sigkill_timeout stays at its default (1 s): the daemons of the surviving
#   hosts then send their ranks SIGTERM about 1 s after mpirun declared the host lost, and
#   a rank waiting on a peer answers that SIGTERM by naming the op and the peer that does
#   not answer within 0.5 s, before the SIGKILL (comm/launcher_signal.h). A longer wait
#   would delay the end of every failed job by twice its value, a killed rank's included.
#   The job ends about D + 2 s after the cut, within comm.timeout_s.
set -euo pipefail
t=${1:-300}
t=${t%%.*}
[[ "$t" =~ ^[0-9]+$ ]] && [ "$t" -ge 1 ] || { echo "mpi_fault_flags.sh: comm.timeout_s '$1' is not a positive number" >&2; exit 2; }
margin=$((t / 2 < 10 ? t / 2 : 10))
detect=$((t - margin > 2 ? t - margin : 2))
intvl=$(((detect + 119) / 120))  # at most 120 probes (TCP_KEEPCNT <= 127); good up to comm.timeout_s of about 400 s
probes=$(((detect + intvl - 1) / intvl))
probes=$((probes < 2 ? 2 : probes))
echo "--mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl $intvl --mca oob_tcp_keepalive_probes $probes"
