# Sourced by the Slurm launch tests: brings up the one-node cluster of tools/slurm/local-up.sh
# for this test alone and tears it down on exit.
#
#   source local_cluster.sh; start_local_cluster SOURCE_DIR WORK LOGS...
#
# Sets base (the cluster folder), ctld_port, slurmd_port and SLURM_CONF; installs an EXIT trap
# that stops the daemons, prints the tails of LOGS and the daemons' logs on failure, and removes
# WORK. One local cluster at a time on the machine: a concurrent test (another build tree's
# ctest) waits on a machine-wide lock until this one exits. Two clusters side by side on distinct
# ports still fail task launches (both slurmd are node "localhost"), so ports alone are not enough.

fail() {
  echo "${0##*/}: FAIL: $*" >&2
  exit 1
}

# Listening on 127.0.0.1:PORT? (bash's /dev/tcp: no extra tools needed)
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_local_cluster() {
  cluster_source_dir=$1
  cluster_work=$2
  shift 2
  cluster_logs=("$@")
  # Inside a CI job that itself runs under Slurm, the outer job's variables would steer srun to
  # the outer allocation; only our cluster's SLURM_CONF may reach srun.
  while read -r name; do unset "$name"; done < <(compgen -e | grep '^SLURM_' || true)
  chmod 0755 "$cluster_work"   # the private munged runs as the munge user and must reach it
  base=$cluster_work/cluster
  trap stop_local_cluster EXIT
  exec 9>"${TMPDIR:-/tmp}/dyncp-slurm-launch-test.lock"
  flock -w 240 9 || fail "another launch test held ${TMPDIR:-/tmp}/dyncp-slurm-launch-test.lock for 4 minutes"
  # Slurm's default ports unless taken (a real slurmctld, a concurrent run): then a free pair.
  ctld_port=${DYNCP_SLURM_CTLD_PORT:-6817}
  slurmd_port=${DYNCP_SLURM_D_PORT:-6818}
  if port_in_use "$ctld_port" || port_in_use "$slurmd_port"; then
    for candidate in $(seq $((20000 + RANDOM % 20000)) 2 45000); do
      if ! port_in_use "$candidate" && ! port_in_use $((candidate + 1)); then
        ctld_port=$candidate
        slurmd_port=$((candidate + 1))
        break
      fi
    done
  fi
  export DYNCP_SLURM_CTLD_PORT=$ctld_port DYNCP_SLURM_D_PORT=$slurmd_port
  DYNCP_SLURM_CPUS=8 "$cluster_source_dir/tools/slurm/local-up.sh" "$base" 9>&- \
    || fail "could not bring up the local Slurm cluster (see the message above)"
  export SLURM_CONF=$base/slurm.conf
}

stop_local_cluster() {
  local status=$?
  "$cluster_source_dir/tools/slurm/local-down.sh" "$base" || true
  if ((status != 0)); then
    for log in "${cluster_logs[@]}" "$base/slurmctld.log" "$base/slurmd.log" \
               "$base/munge/munged.log"; do
      [[ -s $log ]] && { echo "---- tail of $log" >&2; tail -n 25 "$log" >&2; }
    done
  fi
  rm -rf "$cluster_work"
}
