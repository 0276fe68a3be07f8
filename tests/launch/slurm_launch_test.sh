#!/usr/bin/env bash
# A real Slurm launch of dyncp-train, run by ctest (label `slurm`):
#   slurm_launch_test.sh DYNCP_TRAIN SOURCE_DIR
# Brings up a one-node cluster (munged, slurmctld, slurmd) in a temporary folder with
# tools/slurm/local-up.sh, runs `srun --mpi=pmix -n 4` on the smoke recipe for 3 steps, checks the
# metrics and that every rank found the world through Slurm's variables, preempts a long run with
# `scancel --signal=USR1` (checkpoint, exit 0), then stops the daemons by PID (also on failure)
# and checks that they are gone and their ports are free again.
# Without Slurm/munge installed, or not as root, this fails: it never passes without launching.
set -euo pipefail
train=$1
source_dir=$2
recipe=$source_dir/configs/smoke/tiny_mock.yaml
started=$SECONDS

source "$(dirname "$0")/local_cluster.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-slurm.XXXXXX")
start_local_cluster "$source_dir" "$work" "$work/dry_run.log" "$work/train.log" "$work/preempt.log"
echo "cluster up in $((SECONDS - started)) s (slurmctld port $ctld_port, slurmd port $slurmd_port)"

# Four ranks on a 2-core machine: ranks must yield while waiting in collectives.
export OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1

# Rank discovery before MPI: every task of the step sees SLURM_STEP_ID, so the world is Slurm's.
status=0
timeout 60 srun --mpi=pmix -n 4 --overcommit "$train" --config "$recipe" --dry-run \
  >"$work/dry_run.log" 2>&1 || status=$?
((status == 0)) || fail "srun of --dry-run exited $status (124: timed out)"
grep -q "(world size 4, from slurm)" "$work/dry_run.log" \
  || fail "dry run did not find a 4-rank world from Slurm's environment"

# Three training steps under srun --mpi=pmix.
metrics=$work/metrics.jsonl
status=0
timeout 180 srun --mpi=pmix -n 4 --overcommit --kill-on-bad-exit=1 "$train" --config "$recipe" \
  train.train_iters=3 logger.metrics_path="$metrics" >"$work/train.log" 2>&1 || status=$?
((status == 0)) || fail "srun dyncp-train exited $status (124: timed out after 180 s)"
grep -Eq "layout: world 4 = " "$work/train.log" || fail "no 'layout: world 4 = ' line in the log"
[[ -s $metrics ]] || fail "no metrics written to $metrics"
lines=$(wc -l <"$metrics")
((lines == 3)) || fail "$metrics has $lines lines, expected 3 (one per step)"
step=0
while IFS= read -r line; do
  step=$((step + 1))
  [[ $line =~ \"iteration\":([0-9]+)[,}] ]] && ((BASH_REMATCH[1] == step)) \
    || fail "metrics line $step: iteration is not $step: $line"
  # NaN/inf are written as null, so a number here is a finite loss.
  [[ $line =~ \"loss\":(-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?)[,}] ]] \
    || fail "metrics line $step: loss is not a finite number: $line"
  echo "step $step: loss ${BASH_REMATCH[1]}"
done <"$metrics"

# Preemption under Slurm: `scancel --signal=USR1` reaches every task of the step; the job must
# save a checkpoint and end with exit 0.
preempt_metrics=$work/preempt.jsonl
timeout 180 srun --mpi=pmix -n 4 --overcommit --kill-on-bad-exit=1 "$train" --config "$recipe" \
  train.train_iters=100000 checkpoint.save="$work/ckpt" logger.metrics_path="$preempt_metrics" \
  >"$work/preempt.log" 2>&1 &
srun_pid=$!
for _ in $(seq 1 600); do [[ -s $preempt_metrics ]] && break; sleep 0.1; done
[[ -s $preempt_metrics ]] || fail "the long run wrote no metrics within 60 s"
job=$(squeue -h -o %i | head -n 1)
[[ -n $job ]] || fail "squeue shows no job for the running srun"
scancel --signal=USR1 "$job"
status=0
wait "$srun_pid" || status=$?
((status == 0)) || fail "after scancel --signal=USR1, srun exited $status (expected 0)"
[[ -s $work/ckpt/latest ]] || fail "no checkpoint published after SIGUSR1"
grep -q "stop signal received" "$work/preempt.log" || fail "the log does not report the stop signal"
echo "preemption: scancel --signal=USR1 -> exit 0 with checkpoint $(cat "$work/ckpt/latest")"

# Tear down now (the trap would too) to check that nothing is left behind.
pids=()
for file in "$base/slurmd.pid" "$base/slurmctld.pid" "$base/munge/munged.pid"; do
  pids+=("$(cat "$file")")
done
"$source_dir/tools/slurm/local-down.sh" "$base"
for pid in "${pids[@]}"; do
  ! kill -0 "$pid" 2>/dev/null || fail "daemon PID $pid still running after local-down.sh"
done
for port in "$ctld_port" "$slurmd_port"; do
  ! port_in_use "$port" || fail "port $port still in use after local-down.sh"
done
echo "slurm launch: srun --mpi=pmix -n 4, 3 steps with finite losses, world 4 from Slurm;" \
  "preemption saves and exits 0; daemons stopped, ports free ($((SECONDS - started)) s)"
