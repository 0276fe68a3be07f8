#!/usr/bin/env bash
# Start a one-node Slurm cluster on localhost for tests: munged, slurmctld, slurmd, as root,
# without systemd or cgroups. Usage: tools/slurm/local-up.sh BASE_DIR
# Afterwards: export SLURM_CONF=BASE_DIR/slurm.conf. Stop with tools/slurm/local-down.sh BASE_DIR.
set -euo pipefail
base=${1:?usage: local-up.sh BASE_DIR}
cpus=${DYNCP_SLURM_CPUS:-8}   # advertised CPUs; more than nproc works with config_overrides
rm -rf "$base"
mkdir -p "$base/state" "$base/spool"

if [[ ! -s /etc/munge/munge.key ]]; then
  mungekey -c -f -k /etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
fi
install -d -o munge -g munge -m 0755 /run/munge
if ! { [[ -s /run/munge/munged.pid ]] && kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; }; then
  runuser -u munge -- /usr/sbin/munged
  echo started >"$base/munged.started-here"
fi

cat >"$base/slurm.conf" <<CONF
ClusterName=dyncp-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${DYNCP_SLURM_CTLD_PORT:-6817}
SlurmdPort=${DYNCP_SLURM_D_PORT:-6818}
AuthType=auth/munge
CredType=cred/munge
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
for _ in $(seq 1 200); do
  sinfo -h -o %T 2>/dev/null | grep -qx idle && exit 0
  sleep 0.1
done
echo "local-up: the Slurm node did not become idle; logs:" >&2
tail -n 20 "$base"/*.log >&2 || true
exit 1
