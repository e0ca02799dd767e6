#!/usr/bin/env bash
# strata under a real Slurm: starts a one-node Slurm on this machine (munged with its own key
# and socket, slurmctld and slurmd from a generated slurm.conf, state in a temp dir, ports of
# its own), runs `srun -n 2 --mpi=pmix strata train` (Open MPI 4.1 reads the world from Slurm's
# PMIx plugin: no mpirun) for 20 steps of tiny_mlp, and checks that it trained on 2 ranks and
# logged the same losses as `mpirun -np 2` on the same config, bit for bit. Every daemon is
# stopped and the temp dir removed on every path. Skipped, with the reason, where Slurm cannot
# start (not root, slurm-wlm / munge missing, no PMIx plugin).
#   slurm.sh STRATA MPIRUN SRC WORK       (registered by tests/slurm.cmake)
set -u
strata=$1 mpirun=$2 src=$3 work=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATA_NO_REEXEC=1
skip() { echo "SKIPPED: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root to run slurmctld, slurmd and munged"
for c in munged slurmctld slurmd srun sinfo squeue scancel; do
  command -v "$c" > /dev/null || skip "no $c (Debian packages slurm-wlm and munge: scripts/bootstrap.sh)"
done

rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
tmp=$(mktemp -d /tmp/strata-slurm.XXXXXX)
ctld="" slurmd_pid=""
now() { date +%s.%N; }
stop() {  # stop PID NAME: SIGTERM, then SIGKILL after 10 s
  [ -n "$1" ] && kill -0 "$1" 2> /dev/null || return 0
  kill -TERM "$1"
  for _ in $(seq 100); do kill -0 "$1" 2> /dev/null || return 0; sleep 0.1; done
  echo "note: $2 ignored SIGTERM for 10 s: SIGKILL"
  kill -KILL "$1" 2> /dev/null
}
cleanup() {
  if [ -n "$ctld" ] && kill -0 "$ctld" 2> /dev/null; then
    for j in $(squeue -h -o %i 2> /dev/null); do scancel "$j"; done
  fi
  stop "$slurmd_pid" slurmd
  stop "$ctld" slurmctld
  # Job steps left by a killed slurmd (slurmstepd of this cluster: its spool dir).
  for p in $(pgrep -x slurmstepd); do
    grep -qF "$tmp" "/proc/$p/environ" "/proc/$p/cmdline" 2> /dev/null && kill -KILL "$p"
  done
  [ -s "$tmp/munged.pid" ] && stop "$(cat "$tmp/munged.pid")" munged
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/*.log srun.out; do [ -f "$f" ] && { echo "----- $f -----"; tail -n 40 "$f"; }; done
  exit 1
}

# munge: a fresh key and a socket of this test's own, so a host munged is left alone.
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge.key"
chmod 700 "$tmp"
munged --force --socket="$tmp/munge.sock" --key-file="$tmp/munge.key" --pid-file="$tmp/munged.pid" \
  --log-file="$tmp/munged.log" --seed-file="$tmp/munge.seed" || skip "munged does not start: $(tail -n 3 "$tmp/munged.log" 2> /dev/null)"
for _ in $(seq 50); do [ -S "$tmp/munge.sock" ] && break; sleep 0.1; done
[ -S "$tmp/munge.sock" ] || fail "munged made no socket in 5 s"

# Two free TCP ports for slurmctld and slurmd.
port=$((20000 + ($$ * 7) % 30000))
while ss -Htan 2> /dev/null | awk '{print $4}' | grep -Eq ":($port|$((port + 1)))$"; do port=$((port + 2)); done
node=$(hostname -s)
mpi=none  # MpiDefault: pmix once `srun --mpi=list` (which reads the config) lists it
export SLURM_CONF=$tmp/slurm.conf
cat > "$SLURM_CONF" << EOF
ClusterName=stratatest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge.sock
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=$mpi
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=10 State=UP
EOF
srun --mpi=list 2>&1 | grep -qw pmix || skip "Slurm has no PMIx plugin (srun --mpi=list): Open MPI 4.1 cannot be started by srun"
mpi=pmix
sed -i "s/^MpiDefault=none$/MpiDefault=$mpi/" "$SLURM_CONF"
mkdir -p "$tmp/state" "$tmp/spool"
slurmctld -D -i -f "$SLURM_CONF" > "$tmp/slurmctld.out.log" 2>&1 &
ctld=$!
slurmd -D -f "$SLURM_CONF" -N "$node" > "$tmp/slurmd.out.log" 2>&1 &
slurmd_pid=$!
t0=$(now)
state=
for _ in $(seq 300); do
  state=$(sinfo -h -n "$node" -o %T 2> /dev/null)
  [ "$state" = idle ] && break
  kill -0 "$ctld" 2> /dev/null || fail "slurmctld exited"
  kill -0 "$slurmd_pid" 2> /dev/null || fail "slurmd exited"
  sleep 0.1
done
[ "$state" = idle ] || fail "node $node not idle 30 s after the daemons started (sinfo: '$state')"
echo "Slurm $(sinfo -V | awk '{print $2}') up in $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s: node $node idle, ports $port-$((port + 1)), srun --mpi=$mpi"

cfg=(--config "$src/tests/data_files/tiny_mlp.yaml" --set train.max_steps=20 --set train.log_every=1
     --set train.eval_every=0 --set train.batch_size=12)
timeout 120 srun -n 2 --mpi="$mpi" --kill-on-bad-exit=1 -t 2 "$strata" train "${cfg[@]}" --set run.dir=srun_run \
  < /dev/null > srun.out 2>&1
rc=$?
[ "$rc" = 0 ] || fail "srun -n 2 --mpi=$mpi strata train exited $rc"
grep -q "DDP over 2 dp rank(s) (mpi backend" srun.out || fail "srun did not start one 2-rank world: $(grep layout: srun.out)"
timeout 120 "$mpirun" --oversubscribe -np 2 "$strata" train "${cfg[@]}" --set run.dir=mpirun_run < /dev/null > mpirun.out 2>&1 ||
  { cat mpirun.out; fail "the mpirun -np 2 reference failed"; }
losses() { grep '"type":"train"' "$1" | sed -E 's/.*"loss":([^,]*),.*"step":([0-9]+),.*/\2 \1/'; }
losses srun_run/metrics.jsonl > srun.txt
losses mpirun_run/metrics.jsonl > mpirun.txt
[ "$(wc -l < srun.txt)" = 20 ] || fail "srun's run logged $(wc -l < srun.txt) steps, not 20"
cmp -s srun.txt mpirun.txt || { diff srun.txt mpirun.txt | head; fail "losses under srun differ from mpirun -np 2's"; }
echo "20 steps under srun equal mpirun -np 2's bit for bit (step 20: $(tail -n 1 srun.txt | cut -d' ' -f2))"

# The same run as a batch job, written as docs/multinode.md's sbatch example.
cat > train.sbatch << EOF
#!/bin/bash
#SBATCH --job-name=strata-test
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --time=00:05:00
#SBATCH --output=$work/sbatch.out
srun --mpi=pmix --kill-on-bad-exit=1 $strata train ${cfg[*]} --set run.dir=$work/sbatch_run --resume auto
EOF
timeout 120 sbatch --wait train.sbatch > sbatch.submit 2>&1
rc=$?
[ "$rc" = 0 ] || { cat sbatch.submit sbatch.out 2> /dev/null; fail "sbatch --wait exited $rc"; }
losses sbatch_run/metrics.jsonl > sbatch.txt
cmp -s sbatch.txt mpirun.txt || { diff sbatch.txt mpirun.txt | head; fail "losses of the sbatch job differ from mpirun -np 2's"; }
echo "the sbatch job ($(cat sbatch.submit)) logged the same 20 losses"
echo PASS
