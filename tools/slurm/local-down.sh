#!/usr/bin/env bash
# Stop what local-up.sh started in BASE_DIR, by PID (never by process name): first cancel the
# cluster's jobs so no job step outlives its slurmd, then slurmd, slurmctld and the private munged.
# Safe to call when local-up.sh failed half-way or was never run. Usage: local-down.sh BASE_DIR
base=${1:?usage: local-down.sh BASE_DIR}
export PATH=$PATH:/usr/sbin

pid_alive() { [[ -n $1 ]] && kill -0 "$1" 2>/dev/null; }
pid_from() { [[ -s $1 ]] && cat "$1"; }

ctld_pid=$(pid_from "$base/slurmctld.pid")
if [[ -s $base/slurm.conf ]] && pid_alive "$ctld_pid"; then
  export SLURM_CONF=$base/slurm.conf
  timeout 10 scancel --user="$(id -un)" 2>/dev/null || true
  for _ in $(seq 1 100); do
    [[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
    sleep 0.1
  done
fi

pids=()
for file in "$base/slurmd.pid" "$base/slurmctld.pid" "$base/munge/munged.pid"; do
  pid=$(pid_from "$file") && pid_alive "$pid" && pids+=("$pid")
done
for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
for pid in "${pids[@]}"; do
  for _ in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.1; done
  pid_alive "$pid" && kill -9 "$pid" 2>/dev/null
done
exit 0
