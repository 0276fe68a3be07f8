#!/usr/bin/env bash
# Stop what local-up.sh started, by PID (never by process name).
base=${1:?usage: local-down.sh BASE_DIR}
pids=()
for file in "$base/slurmd.pid" "$base/slurmctld.pid"; do
  [[ -s $file ]] && pids+=("$(cat "$file")")
done
if [[ -f "$base/munged.started-here" && -s /run/munge/munged.pid ]]; then
  pids+=("$(cat /run/munge/munged.pid)")
fi
for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
for pid in "${pids[@]}"; do
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
done
exit 0
