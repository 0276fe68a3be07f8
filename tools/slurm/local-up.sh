#!/usr/bin/env bash
# Start a one-node Slurm cluster on localhost for tests: munged, slurmctld, slurmd, as root,
# without systemd or cgroups. Usage: tools/slurm/local-up.sh BASE_DIR
#
# Everything lives in BASE_DIR (config, state, logs, PID files, and a private munged with its own
# key and socket), so nothing under /etc or /run is touched and two clusters on different ports
# can run side by side. Ports: DYNCP_SLURM_CTLD_PORT (default 6817), DYNCP_SLURM_D_PORT (6818).
# Afterwards: export SLURM_CONF=BASE_DIR/slurm.conf. Stop with tools/slurm/local-down.sh BASE_DIR
# (also call it when this script fails: it stops whatever was started).
set -euo pipefail
base=${1:?usage: local-up.sh BASE_DIR}
cpus=${DYNCP_SLURM_CPUS:-8}   # advertised CPUs; more than nproc works with config_overrides
ctld_port=${DYNCP_SLURM_CTLD_PORT:-6817}
slurmd_port=${DYNCP_SLURM_D_PORT:-6818}

export PATH=$PATH:/usr/sbin   # the daemons live in /usr/sbin, not always on a user's PATH
installed() {
  local dir
  for dir in ${PATH//:/ }; do [[ -f $dir/$1 && -x $dir/$1 ]] && return 0; done
  return 1
}
missing=()
for program in munged mungekey slurmctld slurmd srun sinfo scontrol squeue scancel; do
  installed "$program" || missing+=("$program")
done
if ((${#missing[@]})); then
  echo "local-up: not installed: ${missing[*]} (tools/install-deps.sh installs slurmctld slurmd" \
    "slurm-client munge)" >&2
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "local-up: must run as root (slurmd and the munge user switch need it)" >&2
  exit 1
fi

# BASE is wiped first (a previous cluster's state must not come back), so refuse anything that
# does not look like an earlier local-up.sh folder.
if [[ -d $base && -n $(ls -A "$base") && ! -f $base/.dyncp-local-slurm ]]; then
  echo "local-up: $base exists and is not an earlier cluster folder; pass a new or empty folder" >&2
  exit 1
fi
for pid_file in "$base/slurmd.pid" "$base/slurmctld.pid" "$base/munge/munged.pid"; do
  if [[ -s $pid_file ]] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
    echo "local-up: a cluster is still running in $base; stop it with local-down.sh $base" >&2
    exit 1
  fi
done
rm -rf "$base"
mkdir -p "$base/state" "$base/spool"
touch "$base/.dyncp-local-slurm"
chmod 0755 "$base"   # munged runs as the munge user and must reach $base/munge
if ! runuser -u munge -- test -x "$base"; then
  echo "local-up: the munge user cannot reach $base: a parent folder lacks o+x" \
    "(mktemp -d makes 0700 folders; chmod 0755 it)" >&2
  exit 1
fi

# A private munged: own key, socket, PID and log files (munged insists on a directory that only
# its user can write, and that every client can traverse).
install -d -o munge -g munge -m 0711 "$base/munge"
runuser -u munge -- mungekey --create --keyfile="$base/munge/munge.key"
runuser -u munge -- munged --socket="$base/munge/munge.socket" \
  --key-file="$base/munge/munge.key" --pid-file="$base/munge/munged.pid" \
  --log-file="$base/munge/munged.log" --seed-file="$base/munge/munged.seed"

cat >"$base/slurm.conf" <<CONF
ClusterName=dyncp-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$base/munge/munge.socket
StateSaveLocation=$base/state
SlurmdSpoolDir=$base/spool
SlurmctldPidFile=$base/slurmctld.pid
SlurmdPidFile=$base/slurmd.pid
SlurmctldLogFile=$base/slurmctld.log
SlurmdLogFile=$base/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=pmix
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF

export SLURM_CONF=$base/slurm.conf
slurmctld -f "$SLURM_CONF" -c        # -c: clean state, no jobs resurrected from earlier runs
slurmd -f "$SLURM_CONF" -N localhost # -N: the node name does not depend on `hostname`
for _ in $(seq 1 300); do
  sinfo -h -o %T 2>/dev/null | grep -qx idle && exit 0
  sleep 0.1
done
echo "local-up: the Slurm node did not become idle within 30 s; logs:" >&2
tail -n 20 "$base"/*.log "$base/munge/munged.log" >&2 || true
exit 1
