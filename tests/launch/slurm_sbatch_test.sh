#!/usr/bin/env bash
# tools/slurm/dyncp-train.sbatch submitted with sbatch to a one-node local cluster, run by ctest
# (label `slurm`):
#   slurm_sbatch_test.sh DYNCP_TRAIN SOURCE_DIR
# The job is submitted from a folder whose build/apps/dyncp-train/dyncp-train is the binary
# (the script runs from Slurm's spool, so only $SLURM_SUBMIT_DIR can find it), preempted after a
# few steps with `scancel --signal=USR1 --batch` (what --signal=B:USR1@300 does before the time
# limit): the script forwards the signal, the ranks save and exit 0, the script requeues the job,
# and the requeued job resumes from checkpoint.save by itself. The metrics of both runs together
# must equal, bit for bit, the losses of an uninterrupted srun of the same steps.
# Without Slurm/munge installed, or not as root, this fails: it never passes without launching.
set -euo pipefail
train=$1
source_dir=$2
recipe=$source_dir/configs/smoke/tiny_mock.yaml
steps=8
started=$SECONDS

source "$(dirname "$0")/local_cluster.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-sbatch.XXXXXX")
start_local_cluster "$source_dir" "$work" "$work/reference.log" "$work/job.out"
echo "cluster up in $((SECONDS - started)) s (slurmctld port $ctld_port, slurmd port $slurmd_port)"
export OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1

# The uninterrupted reference.
status=0
timeout 180 srun --mpi=pmix -n 4 --overcommit --kill-on-bad-exit=1 "$train" --config "$recipe" \
  train.train_iters=$steps logger.metrics_path="$work/reference.jsonl" >"$work/reference.log" 2>&1 \
  || status=$?
((status == 0)) || fail "reference srun exited $status"

# Submit from a folder holding the binary where a checkout would have it.
mkdir -p "$work/submit/build/apps/dyncp-train"
ln -s "$train" "$work/submit/build/apps/dyncp-train/dyncp-train"
job=$(cd "$work/submit" && env -u DYNCP_TRAIN sbatch --parsable --ntasks-per-node=4 \
        --cpus-per-task=1 --time=10 --output="$work/job.out" \
        "$source_dir/tools/slurm/dyncp-train.sbatch" "$recipe" train.train_iters=$steps \
        checkpoint.save="$work/ckpt" logger.metrics_path="$work/job.jsonl") \
  || fail "sbatch refused the script"
echo "submitted job $job"
job_field() { scontrol show job "$job" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1; }

# Preempt once a couple of steps are done.
for _ in $(seq 1 900); do
  [[ -s $work/job.jsonl && $(wc -l <"$work/job.jsonl") -ge 2 ]] && break
  [[ $(job_field JobState) == FAILED ]] && fail "the job failed before its second step"
  sleep 0.1
done
[[ $(wc -l <"$work/job.jsonl" 2>/dev/null || echo 0) -ge 2 ]] || fail "no 2 steps within 90 s"
scancel --signal=USR1 --batch "$job"

# The script requeues the job; Slurm delays a requeued job's start, which the test skips.
for _ in $(seq 1 1800); do
  restarts=$(job_field Restarts)
  state=$(job_field JobState)
  if [[ ${restarts:-0} -ge 1 && $state == PENDING ]]; then
    scontrol update JobId="$job" StartTime=now >/dev/null 2>&1 || true
  fi
  [[ ${restarts:-0} -ge 1 && $state == COMPLETED ]] && break
  [[ $state == FAILED || $state == CANCELLED || ($state == COMPLETED && ${restarts:-0} -eq 0) ]] &&
    fail "job ended $state after $restarts restarts (expected a requeue, then COMPLETED)"
  sleep 0.1
done
[[ $(job_field JobState) == COMPLETED ]] || fail "the requeued job did not complete within 180 s"
grep -q "requeued" "$work/job.out" || fail "the job log does not report the requeue"
grep -q "restart 1:" "$work/job.out" || fail "the job did not run a second time (restart 1)"
grep -q "resumed from $work/ckpt" "$work/job.out" || fail "the requeued job did not resume"

python3 - "$work/reference.jsonl" "$work/job.jsonl" "$steps" <<'PY'
import json, sys
reference = [json.loads(line) for line in open(sys.argv[1])]
job = [json.loads(line) for line in open(sys.argv[2])]
steps = int(sys.argv[3])
assert [r["iteration"] for r in reference] == list(range(1, steps + 1)), reference
assert [r["iteration"] for r in job] == list(range(1, steps + 1)), [r["iteration"] for r in job]
runs = [r["run_id"] for r in job]
assert len(set(runs)) == 2, f"expected two launches in the metrics, got {set(runs)}"
split = runs.index(runs[-1])
for r, j in zip(reference, job):
    assert repr(r["loss"]) == repr(j["loss"]), (r["iteration"], r["loss"], j["loss"])
print(f"sbatch: preempted after step {split}, requeued, resumed; {steps} losses bitwise equal "
      "to the uninterrupted run")
PY
echo "slurm sbatch: spool-safe binary lookup, USR1 -> checkpoint -> requeue -> auto-resume" \
  "($((SECONDS - started)) s)"
