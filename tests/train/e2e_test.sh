#!/usr/bin/env bash
# End-to-end checks of dyncp-train on the mock smoke recipe, run by ctest:
#   e2e_test.sh DYNCP_TRAIN SOURCE_DIR CASE
# CASE: smoke | resume | relayout | relayout_distopt | relayout_ep | sigterm | sigusr1 | enospc |
# nan | learns | learns_hybrid | ring | hybrid | bf16_moments | auto_resume | lr_resume |
# sigusr1_nosave | sigterm_early | selective | save_lock | sharded | async_save | resume_chain |
# tensor_parallel | tensor_parallel_hybrid | overlap | pipeline | pipeline_held_out |
# tensor_pipeline.
# Each prints what it compares and exits non-zero on any mismatch.
set -euo pipefail
train=$1
source_dir=$2
case_name=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-e2e-$case_name.XXXXXX")
# On a failure the runs' logs are printed before the folder goes: a failure seen once (under
# load) is then explained by its own output instead of lost with the folder.
on_exit() {
  local status=$?
  if ((status != 0)); then
    for log in "$work"/*.log "$work"/log; do
      [[ -f $log ]] || continue
      echo "---- $case_name: last lines of ${log##*/} ----"
      tail -n 40 "$log"
    done
  fi
  rm -rf "$work"
}
trap on_exit EXIT
recipe=$source_dir/configs/smoke/tiny_mock.yaml
# hybrid: the resume check on the Qwen3.5 hybrid (Gated DeltaNet layers under dynamic CP + EP).
[[ $case_name == hybrid || $case_name == selective || $case_name == tensor_parallel_hybrid ]] &&
  recipe=$source_dir/configs/smoke/tiny_hybrid_mock.yaml
run() { mpirun -np 4 "$train" --config "$recipe" "$@"; }
losses() { python3 -c 'import json,sys; [print(repr(json.loads(l)["loss"])) for l in open(sys.argv[1])]' "$1"; }

case $case_name in
  smoke)
    run train.train_iters=4 logger.metrics_path="$work/metrics.jsonl" checkpoint.save="$work/ckpt" \
      >"$work/log" 2>&1
    python3 - "$work/metrics.jsonl" "$work/log" "$work/ckpt/config.yaml" <<'PY'
import json, math, re, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
log = open(sys.argv[2]).read()
assert [r["iteration"] for r in rows] == [1, 2, 3, 4], rows
for r in rows:
    for key in ("run_id", "loss", "grad_norm", "lr", "global_batch_size", "loss_tokens",
                "tokens_per_s", "tflops_per_device", "microbatches", "group_sizes",
                "dropped_samples", "skipped_steps", "elapsed_ms", "elapsed_ms_min",
                "elapsed_ms_max", "eta_s", "peak_memory_bytes", "time_ms"):
        assert key in r, key
    assert "skipped_samples" not in r, "dropped samples are named dropped_samples"
    assert math.isfinite(r["loss"]) and r["loss"] > 0, r
    assert r["loss_tokens"] > 0 and r["microbatches"] >= 1
    assert sum(int(size) * count for size, count in r["group_sizes"].items()) == 4 * r["microbatches"], r
    assert r["elapsed_ms_min"] <= r["elapsed_ms"] <= r["elapsed_ms_max"], r
    assert r["peak_memory_bytes"] > 1 << 20, r
    assert 0 <= r["time_ms"]["straggler_wait"], r
assert len({r["run_id"] for r in rows}) == 1 and rows[0]["run_id"], rows
assert rows[-1]["eta_s"] == 0 and rows[0]["eta_s"] > 0, rows
# The Megatron-style line, one per step (log_interval 1), and no per-arena lines at info level.
lines = re.findall(r"iteration +(\d+)/ +4 \| consumed samples: +(\d+) \| elapsed time per "
                   r"iteration \(ms\): [0-9.]+ \| learning rate: [0-9.]+E[-+]\d+ \| global "
                   r"batch size: +16 \| lm loss: [0-9.]+E[-+]\d+ \| grad norm: [0-9.]+ \| number "
                   r"of skipped iterations: +0 \| number of nan iterations: +0 \| dropped "
                   r"samples: 0 \| tokens/s: \d+ \| TFLOP/s/device: [0-9.]+ \| ETA: \d+\w* \| "
                   r"peak memory \(MiB\): [0-9.]+ \|", log)
assert [int(i) for i, _ in lines] == [1, 2, 3, 4], log
assert "high-water mark" not in log, "arena lines belong to --verbose"
assert "memory after the first step: activation arenas high-water" in log, log
assert f"run id {rows[0]['run_id']}; resolved configuration:" in log, log
saved = open(sys.argv[3]).read()
assert rows[0]["run_id"] in saved and "\nmodel:\n" in saved, saved[:200]
print("smoke: 4 steps, finite losses, every microbatch covers the 4-rank pool; Megatron-style "
      "lines, run id, rank spread and the saved resolved config check out")
PY
    # The saved resolved configuration is a recipe that validates as it is.
    "$train" --config "$work/ckpt/config.yaml" --world-size 4 --dry-run >"$work/dry.log" 2>&1 ||
      { cat "$work/dry.log"; echo "the saved config.yaml does not validate"; exit 1; }
    ;;
  resume | hybrid)
    # Uninterrupted 6 steps versus 3 steps, save, then resume for 3 more: bitwise equal losses.
    # The LR schedule spans 6 steps in all three runs (its default length is train_iters).
    run train.train_iters=6 scheduler.lr_decay_iters=6 logger.metrics_path="$work/full.jsonl" >"$work/full.log" 2>&1
    run train.train_iters=3 scheduler.lr_decay_iters=6 checkpoint.save="$work/ckpt" \
      logger.metrics_path="$work/first.jsonl" >"$work/a.log" 2>&1
    run train.train_iters=6 scheduler.lr_decay_iters=6 checkpoint.load="$work/ckpt" \
      logger.metrics_path="$work/second.jsonl" >"$work/b.log" 2>&1
    losses "$work/full.jsonl" >"$work/full.txt"
    cat <(losses "$work/first.jsonl") <(losses "$work/second.jsonl") >"$work/resumed.txt"
    diff "$work/full.txt" "$work/resumed.txt"
    echo "$case_name: 6 losses bitwise equal to the uninterrupted run"
    ;;
  selective)
    # Selective recomputation of moe_act, layernorm and shared_experts through the trainer, on the hybrid under
    # dynamic CP + EP: the same losses and gradient norms, bit for bit, as keeping everything.
    run train.train_iters=3 logger.metrics_path="$work/kept.jsonl" >"$work/kept.log" 2>&1
    run train.train_iters=3 model.recompute_granularity=selective \
      "model.recompute_modules=[core_attn, moe_act, layernorm, shared_experts]" \
      logger.metrics_path="$work/selective.jsonl" >"$work/selective.log" 2>&1
    norms() { python3 -c 'import json,sys; [print(repr(json.loads(l)["grad_norm"])) for l in open(sys.argv[1])]' "$1"; }
    diff <(losses "$work/kept.jsonl"; norms "$work/kept.jsonl") \
      <(losses "$work/selective.jsonl"; norms "$work/selective.jsonl")
    echo "selective: 3 losses and gradient norms bitwise equal to keeping every activation"
    ;;
  bf16_moments)
    # Precision-aware optimizer (both Adam moments stored in bf16). With the distributed
    # optimizer: 6 steps uninterrupted versus 3 + save + 3 resumed, bitwise equal losses (the
    # checkpoint's fp32 moments convert back to the same bf16 bits). Without it: an fp32-moment
    # checkpoint resumes into a bf16-moment run and a bf16-moment one into an fp32-moment run.
    bf16=(optimizer.use_precision_aware_optimizer=true optimizer.exp_avg_dtype=bfloat16
          optimizer.exp_avg_sq_dtype=bfloat16)
    steps=(scheduler.lr_decay_iters=6)
    run train.train_iters=6 "${steps[@]}" "${bf16[@]}" ddp.use_distributed_optimizer=true \
      logger.metrics_path="$work/full.jsonl" >"$work/full.log" 2>&1
    run train.train_iters=3 "${steps[@]}" "${bf16[@]}" ddp.use_distributed_optimizer=true \
      checkpoint.save="$work/ckpt" logger.metrics_path="$work/first.jsonl" >"$work/a.log" 2>&1
    run train.train_iters=6 "${steps[@]}" "${bf16[@]}" ddp.use_distributed_optimizer=true \
      checkpoint.load="$work/ckpt" logger.metrics_path="$work/second.jsonl" >"$work/b.log" 2>&1
    losses "$work/full.jsonl" >"$work/full.txt"
    cat <(losses "$work/first.jsonl") <(losses "$work/second.jsonl") >"$work/resumed.txt"
    diff "$work/full.txt" "$work/resumed.txt"
    echo "bf16_moments: 6 losses with bf16 moments bitwise equal to the uninterrupted run"
    # Cross-dtype resumes, and the fp32-moment trajectory for comparison.
    run train.train_iters=6 "${steps[@]}" logger.metrics_path="$work/fp32.jsonl" >"$work/c.log" 2>&1
    run train.train_iters=3 "${steps[@]}" checkpoint.save="$work/ckpt32" >"$work/d.log" 2>&1
    run train.train_iters=6 "${steps[@]}" "${bf16[@]}" checkpoint.load="$work/ckpt32" \
      logger.metrics_path="$work/to_bf16.jsonl" >"$work/e.log" 2>&1
    run train.train_iters=6 "${steps[@]}" checkpoint.load="$work/ckpt" \
      logger.metrics_path="$work/to_fp32.jsonl" >"$work/f.log" 2>&1
    python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def losses(name):
    return {r["iteration"]: r["loss"] for r in map(json.loads, open(f"{work}/{name}.jsonl"))}
bf16, fp32 = losses("full"), losses("fp32")
to_bf16, to_fp32 = losses("to_bf16"), losses("to_fp32")
assert sorted(to_bf16) == [4, 5, 6] and sorted(to_fp32) == [4, 5, 6], (to_bf16, to_fp32)
# bf16 storage changes the trajectory, but only by rounding-sized amounts.
assert any(bf16[i] != fp32[i] for i in range(2, 7)), "bf16 moments left every loss unchanged"
for it in range(1, 7):
    assert abs(bf16[it] - fp32[it]) <= 1e-3 * abs(fp32[it]), (it, bf16[it], fp32[it])
for it in (4, 5, 6):
    assert abs(to_bf16[it] - fp32[it]) <= 1e-3 * abs(fp32[it]), (it, to_bf16[it], fp32[it])
    assert abs(to_fp32[it] - bf16[it]) <= 1e-3 * abs(bf16[it]), (it, to_fp32[it], bf16[it])
def worst(a, b):
    return max(abs(a[i] - b[i]) / abs(b[i]) for i in a)
print(f"bf16_moments: worst relative loss difference: bf16 vs fp32 moments {worst(bf16, fp32):.3g}, "
      f"fp32->bf16 resume vs fp32 run {worst(to_bf16, fp32):.3g}, "
      f"bf16->fp32 resume vs bf16 run {worst(to_fp32, bf16):.3g}")
PY
    ;;
  sigterm | sigusr1)
    mpirun -np 4 "$train" --config "$recipe" train.train_iters=100000 checkpoint.save="$work/ckpt" \
      logger.metrics_path="$work/m.jsonl" >"$work/log" 2>&1 &
    launcher=$!   # mpirun itself
    for _ in $(seq 1 600); do [[ -s "$work/m.jsonl" ]] && break; sleep 0.1; done
    if [[ $case_name == sigterm ]]; then
      # As Slurm does on preemption: SIGTERM to every rank process (mpirun itself would kill
      # the job on SIGTERM instead of forwarding it).
      kill -TERM $(pgrep -P "$launcher")
    else
      kill -USR1 "$launcher"   # mpirun forwards SIGUSR1 to every rank
    fi
    status=0
    wait "$launcher" || status=$?
    [[ $status -eq 0 ]] || { echo "exit status $status after $case_name"; tail -20 "$work/log"; exit 1; }
    [[ -s "$work/ckpt/latest" ]] || { echo "no checkpoint after $case_name"; exit 1; }
    echo "$case_name: exit 0 with checkpoint $(cat "$work/ckpt/latest")"
    ;;
  sigusr1_nosave)
    # Without checkpoint.save a stop signal says that nothing is saved, and the run exits 0.
    mpirun -np 4 "$train" --config "$recipe" train.train_iters=100000 \
      logger.metrics_path="$work/m.jsonl" >"$work/log" 2>&1 &
    launcher=$!
    for _ in $(seq 1 600); do [[ -s "$work/m.jsonl" ]] && break; sleep 0.1; done
    kill -USR1 "$launcher"
    status=0
    wait "$launcher" || status=$?
    [[ $status -eq 0 ]] || { echo "exit status $status"; tail -20 "$work/log"; exit 1; }
    grep -q "checkpoint.save is not set, so nothing is saved" "$work/log" \
      || { echo "no honest message"; tail -5 "$work/log"; exit 1; }
    ! grep -q "saving a checkpoint" "$work/log" || { echo "claims to save a checkpoint"; exit 1; }
    echo "sigusr1_nosave: exit 0, says nothing is saved"
    ;;
  sigterm_early)
    # SIGTERM during start-up: the handlers are installed first thing in main, so a signal in
    # the first half second (here: long before the 8M-sample mock data is generated) ends the
    # run cleanly with exit 0 before the first step, not by the signal (status 143).
    "$train" --config "$recipe" model.dynamic_context_parallel=false model.context_parallel_size=1 \
      model.expert_model_parallel_size=1 model.max_seqlen_per_dp_cp_rank=256 \
      dataset.mock_num_samples=8000000 train.train_iters=100000 >"$work/log" 2>&1 &
    pid=$!
    # Signal as soon as the process catches SIGTERM (bit 14 of SigCgt), at most 0.5 s after start.
    for _ in $(seq 1 50); do
      mask=$(awk '/^SigCgt/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
      [[ -n $mask ]] && (( (0x$mask >> 14) & 1 )) && break
      sleep 0.01
    done
    kill -TERM "$pid"
    status=0
    wait "$pid" || status=$?
    [[ $status -eq 0 ]] || { echo "SIGTERM during start-up: exit status $status"; tail -5 "$work/log"; exit 1; }
    grep -q "stop signal received during start-up" "$work/log" || { echo "no stop message"; exit 1; }
    echo "sigterm_early: SIGTERM during start-up exits 0 before the first step"
    ;;
  enospc)
    run train.train_iters=2 checkpoint.save="$work/ckpt" checkpoint.save_interval=1 >"$work/a.log" 2>&1
    first=$(cat "$work/ckpt/latest")
    # Resumes from iteration 2 (load unset: save's own checkpoints); every save of the run
    # fails, so the final one does too: exit 1, not 0.
    status=0
    DYNCP_FAULT_ENOSPC_FILE=state.json DYNCP_FAULT_ENOSPC_AFTER_BYTES=0 run train.train_iters=4 \
      checkpoint.save="$work/ckpt" checkpoint.save_interval=1 >"$work/b.log" 2>&1 || status=$?
    grep -q "No space left on device" "$work/b.log" || { echo "no ENOSPC reported"; exit 1; }
    [[ $status -eq 1 ]] || { echo "a failed final save exited $status, not 1"; exit 1; }
    grep -q "the final checkpoint (iteration 4) could not be written" "$work/b.log" \
      || { echo "no message about the lost final checkpoint"; exit 1; }
    [[ $(grep -c "checkpoint at iteration 3 failed" "$work/b.log") -ge 1 ]] \
      || { echo "the failed periodic save was not reported"; exit 1; }
    [[ "$(cat "$work/ckpt/latest")" == "$first" ]] || { echo "latest moved to a failed save"; exit 1; }
    # The kept checkpoint still resumes.
    run train.train_iters=3 checkpoint.load="$work/ckpt" >"$work/c.log" 2>&1
    grep -q "resumed from $work/ckpt/$first" "$work/c.log" || { echo "did not resume $first"; exit 1; }
    echo "enospc: failed saves reported, exit 1 for the lost final save, $first kept and loadable"
    ;;
  auto_resume)
    # Re-running with the same checkpoint.save and no load resumes (Megatron's load == save),
    # with bitwise the losses of an uninterrupted run; another load folder is refused with
    # exit 2 unless checkpoint.overwrite=true.
    run train.train_iters=6 scheduler.lr_decay_iters=6 logger.metrics_path="$work/full.jsonl" >"$work/full.log" 2>&1
    run train.train_iters=3 scheduler.lr_decay_iters=6 checkpoint.save="$work/ckpt" \
      logger.metrics_path="$work/first.jsonl" >"$work/a.log" 2>&1
    run train.train_iters=6 scheduler.lr_decay_iters=6 checkpoint.save="$work/ckpt" \
      logger.metrics_path="$work/second.jsonl" >"$work/b.log" 2>&1
    losses "$work/full.jsonl" >"$work/full.txt"
    cat <(losses "$work/first.jsonl") <(losses "$work/second.jsonl") >"$work/resumed.txt"
    diff "$work/full.txt" "$work/resumed.txt"
    run train.train_iters=2 checkpoint.save="$work/other" >"$work/c.log" 2>&1
    status=0
    run train.train_iters=8 checkpoint.save="$work/ckpt" checkpoint.load="$work/other" \
      >"$work/d.log" 2>&1 || status=$?
    [[ $status -eq 2 ]] || { echo "writing over another run's checkpoints exited $status"; exit 1; }
    grep -q "checkpoint.save: $work/ckpt already holds checkpoints" "$work/d.log" \
      || { echo "the refusal does not name checkpoint.save"; exit 1; }
    run train.train_iters=4 checkpoint.save="$work/ckpt" checkpoint.load="$work/other" \
      checkpoint.overwrite=true checkpoint.most_recent_k=1 logger.metrics_path="$work/over.jsonl" >"$work/e.log" 2>&1
    [[ "$(cat "$work/ckpt/latest")" == iter_0000004 && -d "$work/ckpt/iter_0000006" ]] \
      || { echo "overwrite: latest $(cat "$work/ckpt/latest"), folders $(ls "$work/ckpt")"; exit 1; }
    [[ ! -d "$work/ckpt/iter_0000003" ]] || { echo "overwrite: iter_0000003 not pruned"; exit 1; }
    echo "auto_resume: 3 + 3 steps through checkpoint.save alone equal 6; another load refused (exit 2);" \
         "overwrite keeps the newer iter_0000006 and moves latest to iter_0000004"
    ;;
  lr_resume)
    # The LR schedule is in the checkpoint: resuming with another train.train_iters (the default
    # decay length) continues the saved schedule; override_opt_param_scheduler takes the new one.
    run train.train_iters=6 scheduler.lr_decay_iters=3 scheduler.lr_decay_style=linear \
      optimizer.min_lr=1.0e-4 logger.metrics_path="$work/short.jsonl" >"$work/a.log" 2>&1
    run train.train_iters=6 scheduler.lr_decay_style=linear optimizer.min_lr=1.0e-4 \
      logger.metrics_path="$work/long.jsonl" >"$work/b.log" 2>&1
    run train.train_iters=3 scheduler.lr_decay_style=linear optimizer.min_lr=1.0e-4 \
      checkpoint.save="$work/ckpt" >"$work/c.log" 2>&1
    cp -r "$work/ckpt" "$work/ckpt2"
    run train.train_iters=6 scheduler.lr_decay_style=linear optimizer.min_lr=1.0e-4 \
      checkpoint.save="$work/ckpt" logger.metrics_path="$work/kept.jsonl" >"$work/d.log" 2>&1
    run train.train_iters=6 scheduler.lr_decay_style=linear optimizer.min_lr=1.0e-4 \
      checkpoint.save="$work/ckpt2" scheduler.override_opt_param_scheduler=true \
      logger.metrics_path="$work/override.jsonl" >"$work/e.log" 2>&1
    python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def lrs(name):
    return {r["iteration"]: r["lr"] for r in map(json.loads, open(f"{work}/{name}.jsonl"))}
short, long_, kept, override = lrs("short"), lrs("long"), lrs("kept"), lrs("override")
assert sorted(kept) == [4, 5, 6] and sorted(override) == [4, 5, 6], (kept, override)
assert short[4] != long_[4], (short, long_)
for it in (4, 5, 6):
    assert kept[it] == short[it], ("kept", it, kept[it], short[it])
    assert override[it] == long_[it], ("override", it, override[it], long_[it])
print("lr_resume: resumed LRs", [kept[i] for i in (4, 5, 6)], "follow the saved 3-step decay;",
      "with override_opt_param_scheduler", [override[i] for i in (4, 5, 6)], "the new 6-step one")
PY
    ;;
  relayout)
    # Saved on 4 ranks with dynamic CP and EP 2, resumed on 2 ranks with static CP 2 and no EP:
    # the later losses match the uninterrupted 4-rank run to fp32 round-off.
    run train.train_iters=5 scheduler.lr_decay_iters=5 logger.metrics_path="$work/full.jsonl" >"$work/full.log" 2>&1
    run train.train_iters=3 scheduler.lr_decay_iters=5 checkpoint.save="$work/ckpt" >"$work/a.log" 2>&1
    mpirun -np 2 "$train" --config "$recipe" train.train_iters=5 scheduler.lr_decay_iters=5 \
      checkpoint.load="$work/ckpt" model.dynamic_context_parallel=false \
      model.sequence_packing_scheduler=dp_balanced model.expert_model_parallel_size=1 \
      logger.metrics_path="$work/resumed.jsonl" >"$work/b.log" 2>&1
    python3 - "$work/full.jsonl" "$work/resumed.jsonl" <<'PY'
import json, sys
full = {r["iteration"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
resumed = {r["iteration"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
assert sorted(resumed) == [4, 5], resumed
for it, loss in resumed.items():
    assert abs(loss - full[it]) <= 1e-5 * abs(full[it]), (it, loss, full[it])
print("relayout: steps 4-5 on 2 ranks (static CP) match the 4-rank dynamic-CP run:",
      {it: (resumed[it], full[it]) for it in resumed})
PY
    ;;
  relayout_distopt)
    # The distributed optimizer's checkpoints are the plain layout-independent ones: saved with
    # it on 4 ranks (dynamic CP, EP 2) and resumed without it on 2 ranks (static CP), and saved
    # without it and resumed with it on 2 ranks (EP 2). Every loss matches the uninterrupted
    # plain 4-rank run to fp32 round-off, including the sharded run's own first steps.
    # Single-writer checkpoints (checkpoint.sharded=false: the tensors are compared in their
    # safetensors files); e2e:sharded and e2e:resume_chain do the same with sharded ones.
    run checkpoint.sharded=false train.train_iters=5 scheduler.lr_decay_iters=5 logger.metrics_path="$work/full.jsonl" >"$work/full.log" 2>&1
    run checkpoint.sharded=false train.train_iters=3 scheduler.lr_decay_iters=5 ddp.use_distributed_optimizer=true \
      checkpoint.save="$work/sharded" logger.metrics_path="$work/sharded.jsonl" >"$work/a.log" 2>&1
    grep -q "distributed optimizer: this rank holds" "$work/a.log" || { echo "not sharded"; exit 1; }
    mpirun -np 2 "$train" --config "$recipe" checkpoint.sharded=false train.train_iters=5 scheduler.lr_decay_iters=5 \
      checkpoint.load="$work/sharded" model.dynamic_context_parallel=false \
      model.sequence_packing_scheduler=dp_balanced model.expert_model_parallel_size=1 \
      checkpoint.save="$work/to_plain" logger.metrics_path="$work/to_plain.jsonl" >"$work/b.log" 2>&1
    run checkpoint.sharded=false train.train_iters=3 scheduler.lr_decay_iters=5 checkpoint.save="$work/plain" >"$work/c.log" 2>&1
    mpirun -np 2 "$train" --config "$recipe" checkpoint.sharded=false train.train_iters=5 scheduler.lr_decay_iters=5 \
      checkpoint.load="$work/plain" model.dynamic_context_parallel=false \
      model.sequence_packing_scheduler=dp_balanced ddp.use_distributed_optimizer=true \
      checkpoint.save="$work/to_sharded" logger.metrics_path="$work/to_sharded.jsonl" >"$work/d.log" 2>&1
    python3 - "$work/full.jsonl" "$work/sharded.jsonl" "$work/to_plain.jsonl" "$work/to_sharded.jsonl" <<'PY'
import json, sys
full, sharded, to_plain, to_sharded = (
    {r["iteration"]: r["loss"] for r in map(json.loads, open(path))} for path in sys.argv[1:])
assert sorted(sharded) == [1, 2, 3], sharded
assert sorted(to_plain) == [4, 5] and sorted(to_sharded) == [4, 5], (to_plain, to_sharded)
for name, run in (("sharded", sharded), ("sharded -> plain", to_plain), ("plain -> sharded", to_sharded)):
    for it, loss in run.items():
        assert abs(loss - full[it]) <= 1e-5 * abs(full[it]), (name, it, loss, full[it])
    print(f"relayout_distopt: {name} steps {sorted(run)} match the plain 4-rank run:",
          {it: (run[it], full[it]) for it in run})
PY
    # Losses barely see the moments, so the checkpoints are compared tensor by tensor: after
    # 3 steps on the same layout with and without sharding (gathered pieces = replicated
    # state), and after the two resumed runs' 5 steps (a lost or misplaced piece shows as a
    # relative difference of order 1).
    python3 - "$work" <<'PY'
import array, json, math, struct, sys
work = sys.argv[1]
def tensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", (path, name, entry["dtype"])
        begin, end = entry["data_offsets"]
        out[name] = array.array("f", data[begin:end])
    return out
def worst(a_dir, b_dir):
    result = 0.0
    for part in ("optimizer.safetensors", "model/model.safetensors"):
        a, b = tensors(f"{a_dir}/{part}"), tensors(f"{b_dir}/{part}")
        assert sorted(a) == sorted(b), part
        for name in a:
            diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(a[name], b[name])))
            norm = math.sqrt(sum(y * y for y in b[name]))
            result = max(result, diff / max(norm, 1e-30))
    return result
same_layout = worst(f"{work}/sharded/iter_0000003", f"{work}/plain/iter_0000003")
resumed = worst(f"{work}/to_sharded/iter_0000005", f"{work}/to_plain/iter_0000005")
print(f"relayout_distopt: checkpoint tensors, worst relative difference: sharded vs plain after 3 "
      f"steps {same_layout:.3g}, resumed runs after 5 steps {resumed:.3g}")
assert same_layout <= 1e-6 and resumed <= 1e-4
PY
    ;;
  relayout_ep)
    # Each rank holds only its experts, yet checkpoints and exports list every expert: saved
    # with EP 4 (2 experts per rank) and resumed with EP 1 (all 8 on each rank), every loss
    # matches the uninterrupted EP 2 run to fp32 round-off, and the EP 4 and EP 2 checkpoints
    # after 3 steps hold the same tensors (names, shapes, values to round-off).
    # Single-writer checkpoints (checkpoint.sharded=false), whose files are compared below.
    run checkpoint.sharded=false train.train_iters=5 scheduler.lr_decay_iters=5 logger.metrics_path="$work/full.jsonl" >"$work/full.log" 2>&1
    run checkpoint.sharded=false train.train_iters=3 scheduler.lr_decay_iters=5 checkpoint.save="$work/ep2" \
      checkpoint.export_hf="$work/hf_ep2" >"$work/a.log" 2>&1
    run checkpoint.sharded=false train.train_iters=3 scheduler.lr_decay_iters=5 model.expert_model_parallel_size=4 \
      checkpoint.save="$work/ep4" checkpoint.export_hf="$work/hf_ep4" \
      logger.metrics_path="$work/ep4.jsonl" >"$work/b.log" 2>&1
    grep -q "experts: this rank holds \[0, 2) of 8 (EP 4)" "$work/b.log" || { echo "experts not sliced"; exit 1; }
    run checkpoint.sharded=false train.train_iters=5 scheduler.lr_decay_iters=5 model.expert_model_parallel_size=1 \
      checkpoint.load="$work/ep4" checkpoint.export_hf="$work/hf_ep1" \
      logger.metrics_path="$work/ep1.jsonl" >"$work/c.log" 2>&1
    python3 - "$work" <<'PY'
import array, json, math, struct, sys
work = sys.argv[1]
def losses(name):
    return {r["iteration"]: r["loss"] for r in map(json.loads, open(f"{work}/{name}.jsonl"))}
full, ep4, ep1 = losses("full"), losses("ep4"), losses("ep1")
assert sorted(ep4) == [1, 2, 3] and sorted(ep1) == [4, 5], (ep4, ep1)
for name, run in (("ep 4", ep4), ("ep 4 -> ep 1", ep1)):
    for it, loss in run.items():
        assert abs(loss - full[it]) <= 1e-5 * abs(full[it]), (name, it, loss, full[it])
    print(f"relayout_ep: {name} steps {sorted(run)} match the EP 2 run:", {it: (run[it], full[it]) for it in run})
def tensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        if entry["dtype"] == "F32":
            values = array.array("f", data[begin:end])
        else:  # BF16: the high half of an f32
            values = array.array("f", struct.pack(f"<{(end - begin) // 2}I",
                                 *(v << 16 for v in struct.unpack(f"<{(end - begin) // 2}H", data[begin:end]))))
        out[name] = (entry["shape"], values)
    return out
def worst(a_path, b_path):
    a, b = tensors(a_path), tensors(b_path)
    assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
    result = 0.0
    for name in a:
        assert a[name][0] == b[name][0], (name, a[name][0], b[name][0])
        diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(a[name][1], b[name][1])))
        result = max(result, diff / max(math.sqrt(sum(y * y for y in b[name][1])), 1e-30))
    return result, len(a)
for part in ("model/model.safetensors", "optimizer.safetensors"):
    error, count = worst(f"{work}/ep4/iter_0000003/{part}", f"{work}/ep2/iter_0000003/{part}")
    print(f"relayout_ep: {part}: {count} tensors, EP 4 vs EP 2 worst relative difference {error:.3g}")
    assert count > 0 and error <= 1e-4, (part, error)  # a misplaced expert shows as ~1
experts = [n for n in tensors(f"{work}/hf_ep4/model.safetensors") if ".mlp.experts." in n]
assert len(experts) == 2 * 8 * 3, len(experts)  # 2 MoE layers x 8 experts x gate/up/down
# bf16 exports: a round-off difference can move a value by one bf16 step (2^-8 relative).
error, count = worst(f"{work}/hf_ep4/model.safetensors", f"{work}/hf_ep2/model.safetensors")
print(f"relayout_ep: HF exports after 3 steps, EP 4 vs EP 2: {count} tensors, worst relative "
      f"difference {error:.3g}")
assert error <= 4e-3, error
worst(f"{work}/hf_ep1/model.safetensors", f"{work}/hf_ep4/model.safetensors")  # same names, shapes
PY
    ;;
  nan)
    # An absurd learning rate blows the weights up after the first step. With stop_on_nan the
    # run stops with exit 1 naming the iteration; without it the steps are skipped and counted.
    status=0
    run train.train_iters=4 optimizer.lr=1.0e30 optimizer.clip_grad=0 >"$work/stop.log" 2>&1 || status=$?
    [[ $status -ne 0 ]] || { echo "a non-finite loss did not stop the run"; exit 1; }
    grep -q "not finite" "$work/stop.log" || { echo "no message about the non-finite loss"; exit 1; }
    run train.train_iters=4 optimizer.lr=1.0e30 optimizer.clip_grad=0 train.stop_on_nan=false \
      logger.metrics_path="$work/m.jsonl" >"$work/skip.log" 2>&1
    python3 - "$work/m.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 4 and rows[-1]["skipped_steps"] >= 1, rows
print("nan: stop_on_nan stops the run; otherwise", rows[-1]["skipped_steps"], "steps skipped")
PY
    # The console counts them per interval, as Megatron does.
    grep -Eq "number of skipped iterations: +[1-9][0-9]* \| number of nan iterations: +[1-9]" \
      "$work/skip.log" || { echo "no skipped / nan iterations on the console line"; exit 1; }
    ;;
  learns | learns_hybrid)
    # The demo recipe on freshly generated demo data: after 60 steps the held-out loss is below
    # the unigram entropy of the held-out loss tokens, so the model learned more than token
    # frequencies. learns_hybrid: the same with the Qwen3.5 hybrid demo recipe.
    python3 "$source_dir/tools/make_demo_data.py" --out "$work/demo" --num-samples 2000 >/dev/null
    python3 "$source_dir/tools/make_demo_data.py" --out "$work/demo/heldout" --seed 2 \
      --num-samples 200 >/dev/null
    demo_recipe=$source_dir/configs/demo/tiny_moe.yaml
    [[ $case_name == learns_hybrid ]] && demo_recipe=$source_dir/configs/demo/tiny_hybrid.yaml
    demo=("$demo_recipe" dataset.data_path="$work/demo/train.jsonl"
          tokenizer.tokenizer_model="$work/demo/tokenizer" dataset.cache_dir="$work/cache")
    mpirun -np 4 "$train" --config "${demo[@]}" \
      dataset.validation_data_path="$work/demo/heldout/train.jsonl" train.train_iters=60 \
      validation.eval_interval=60 checkpoint.save= checkpoint.export_hf= \
      logger.metrics_path="$work/m.jsonl" >"$work/log" 2>&1
    data_tool=$(dirname "$train")/../dyncp-data/dyncp-data
    entropy=$("$data_tool" prepare --config "${demo[@]}" dataset.data_path="$work/demo/heldout/train.jsonl" \
              2>/dev/null | sed -n 's/^loss-token unigram entropy \([0-9.]*\) nats$/\1/p')
    python3 - "$work/m.jsonl" "$entropy" "$case_name" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
held_out = [r["validation_loss"] for r in rows if "validation_loss" in r]
entropy = float(sys.argv[2])
assert held_out, "no evaluation ran"
print(f"{sys.argv[3]}: held-out loss {held_out[-1]:.4f} vs unigram entropy {entropy:.4f} nats "
      f"(first training loss {rows[0]['loss']:.4f})")
assert held_out[-1] < entropy, "the model did not beat the unigram entropy"
PY
    ;;
  overlap)
    # ddp.overlap_grad_reduce and ddp.overlap_param_gather with the distributed optimizer on 4
    # ranks (dynamic CP, EP 2): the parameter gather the optimizer starts runs beside the next
    # forward, and every other reader must wait for it: evaluation (every 2 steps), the checkpoint
    # at step 3 (no evaluation before it), the final one and the HF export. Losses, grad norms,
    # validation losses, every checkpoint and export tensor file: bitwise the run without.
    for keys in off on; do
      extra=(ddp.use_distributed_optimizer=true)
      [[ $keys == on ]] && extra+=(ddp.overlap_grad_reduce=true ddp.overlap_param_gather=true ddp.bucket_size=4096)
      run "${extra[@]}" train.train_iters=5 scheduler.lr_decay_iters=5 validation.eval_interval=2 \
        validation.eval_iters=1 checkpoint.save="$work/$keys" checkpoint.save_interval=3 \
        checkpoint.export_hf="$work/hf_$keys" logger.metrics_path="$work/$keys.jsonl" \
        >"$work/$keys.log" 2>&1
    done
    python3 - "$work" <<'PY'
import json, pathlib, sys
work = pathlib.Path(sys.argv[1])
off, on = ([json.loads(l) for l in open(work / f"{k}.jsonl")] for k in ("off", "on"))
assert [r["iteration"] for r in on] == [1, 2, 3, 4, 5], on
for a, b in zip(off, on):
    for key in ("loss", "grad_norm", "validation_loss"):
        assert (key in a) == (key in b) and a.get(key) == b.get(key), (key, a, b)
assert sum("validation_loss" in r for r in on) == 3, on
files = 0
for off_root, on_root in ((work / "off", work / "on"), (work / "hf_off", work / "hf_on")):
    # The checkpoints' rank shards (shards/rank_*.bin) and the export's tensor files.
    tensor_files = lambda root: sorted(p.relative_to(root) for pattern in ("*.bin", "*.safetensors")
                                       for p in root.rglob(pattern))
    names = tensor_files(off_root)
    assert names == tensor_files(on_root), names
    for name in names:
        assert (off_root / name).read_bytes() == (on_root / name).read_bytes(), name
        files += 1
assert files == 2 * 4 + 1, files  # two checkpoints of 4 rank shards, one export file
print(f"overlap: 5 steps, 3 evaluations, {files} checkpoint and export files bitwise equal "
      f"with the overlap keys on and off (last loss {on[-1]['loss']!r})")
PY
    ;;
  ring)
    # The CP exchanges against all_gather, static CP 2 so every microbatch runs on a group of
    # two: the ring (p2p) moves the same bytes, the all-to-all (a2a) and a2a+p2p with sizes
    # [1, 2] (one-rank all-to-all groups, a ring of two) train too; all give the same losses to
    # fp32 round-off.
    for exchange in all_gather p2p a2a a2a+p2p; do
      extra=()
      [[ $exchange == a2a+p2p ]] && extra=("model.hierarchical_context_parallel_sizes=[1, 2]")
      run train.train_iters=4 model.cp_comm_type=$exchange model.dynamic_context_parallel=false \
        model.sequence_packing_scheduler=dp_balanced logger.metrics_path="$work/$exchange.jsonl" \
        "${extra[@]}" >"$work/$exchange.log" 2>&1
    done
    python3 - "$work/all_gather.jsonl" "$work/p2p.jsonl" "$work/a2a.jsonl" "$work/a2a+p2p.jsonl" <<'PY'
import json, sys
gather, ring, a2a, hierarchical = ([json.loads(l) for l in open(path)] for path in sys.argv[1:5])
assert len(gather) == len(ring) == len(a2a) == len(hierarchical) == 4
for name, rows in (("p2p", ring), ("a2a", a2a), ("a2a+p2p", hierarchical)):
    for g, r in zip(gather, rows):
        assert abs(r["loss"] - g["loss"]) <= 1e-5 * abs(g["loss"]), (name, g["iteration"], r["loss"], g["loss"])
        assert r["comm_bytes"] > 0, (name, g["iteration"])
for g, r in zip(gather, ring):
    assert r["comm_bytes"] == g["comm_bytes"], (g["iteration"], r["comm_bytes"], g["comm_bytes"])
print("exchanges: 4 losses match all_gather:", [(r["loss"], g["loss"]) for g, r in zip(gather, ring)],
      "bytes per step all_gather/p2p", [r["comm_bytes"] for r in ring],
      "a2a", [r["comm_bytes"] for r in a2a], "a2a+p2p", [r["comm_bytes"] for r in hierarchical])
PY
    ;;
  save_lock)
    # A live run holds checkpoint.save (train/save_folder_lock.hpp): a second run into the
    # folder is refused at start-up with exit 2 naming the first; the lock a run killed with
    # SIGKILL leaves behind (same host, pid gone) is taken over with a warning, and so is one
    # of another host that stopped refreshing it.
    lock=$work/ckpt/.dyncp.lock
    run train.train_iters=100000 checkpoint.save="$work/ckpt" >"$work/first.log" 2>&1 &
    first=$!
    for _ in $(seq 1 600); do [[ -s $lock ]] && break; sleep 0.1; done
    [[ -s $lock ]] || { echo "the first run holds no lock"; exit 1; }
    holder=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$lock")
    status=0
    run train.train_iters=2 checkpoint.save="$work/ckpt" >"$work/second.log" 2>&1 || status=$?
    [[ $status -eq 2 ]] || { echo "the second run exited $status, not 2"; exit 1; }
    grep -q "is in use by a live run: host $(hostname), pid $holder" "$work/second.log" \
      || { echo "the refusal does not name the holder"; exit 1; }
    kill -0 "$first" || { echo "the first run did not survive the second"; exit 1; }
    kill -9 "$holder"
    wait "$first" || true
    [[ -s $lock ]] || { echo "no lock left behind by the killed run"; exit 1; }
    run train.train_iters=1 checkpoint.save="$work/ckpt" >"$work/third.log" 2>&1 \
      || { echo "the run after the killed one failed"; exit 1; }
    grep -q "taking over the lock left by host $(hostname), pid $holder" "$work/third.log" \
      || { echo "no take-over warning naming the dead holder"; exit 1; }
    [[ ! -e $lock ]] || { echo "the lock outlived its run"; exit 1; }
    # A lock of another host, not refreshed for ten minutes.
    echo '{"host": "other-node", "pid": 1, "run_id": "old", "started": "2026-01-01T00:00:00Z"}' >"$lock"
    touch -d '10 minutes ago' "$lock"
    run train.train_iters=2 checkpoint.save="$work/ckpt" >"$work/fourth.log" 2>&1 \
      || { echo "a stale lock of another host was not taken over"; exit 1; }
    grep -q "taking over the lock left by host other-node, pid 1, run id old.*not refreshed" \
      "$work/fourth.log" || { echo "no take-over warning for the stale lock"; exit 1; }
    echo "save_lock: a second live run exits 2 naming pid $holder; a killed run's and a stale lock are taken over"
    ;;
  sharded)
    # checkpoint.sharded: every rank writes its own shard; the same layout resumes bit for bit;
    # 4 ranks (dynamic CP, EP 2, distributed optimizer) resume on 2 ranks with static CP and no
    # EP, and on 8 ranks with EP 4, with the uninterrupted run's losses to fp32 round-off.
    common=(scheduler.lr_decay_iters=6 ddp.use_distributed_optimizer=true)
    run train.train_iters=6 "${common[@]}" logger.metrics_path="$work/full.jsonl" >"$work/full.log" 2>&1
    run train.train_iters=3 "${common[@]}" checkpoint.save="$work/ckpt" checkpoint.sharded=true \
      logger.metrics_path="$work/first.jsonl" >"$work/a.log" 2>&1
    folder=$work/ckpt/iter_0000003
    for r in 0 1 2 3; do [[ -s $folder/shards/rank_0000$r.bin ]] || { echo "no shard of rank $r"; exit 1; }; done
    [[ -s $folder/index.json && ! -e $folder/model/model.safetensors && ! -e $folder/optimizer.safetensors ]] \
      || { echo "not a sharded checkpoint folder"; ls -R "$folder"; exit 1; }
    grep -q '"format": 3' "$folder/state.json" || { echo "state.json is not format 3"; exit 1; }
    # dyncp-export of the sharded checkpoint: the very HF files of the single writer's.
    run train.train_iters=3 "${common[@]}" checkpoint.save="$work/single" checkpoint.sharded=false \
      >"$work/single.log" 2>&1
    export_tool=${train%/dyncp-train/dyncp-train}/dyncp-export/dyncp-export
    "$export_tool" --checkpoint "$work/ckpt" --out "$work/hf_sharded" --no-tokenizer >"$work/e1.log" 2>&1
    "$export_tool" --checkpoint "$work/single" --out "$work/hf_single" --no-tokenizer >"$work/e2.log" 2>&1
    for f in model.safetensors config.json; do
      cmp "$work/hf_sharded/$f" "$work/hf_single/$f" || { echo "exports of sharded and single-writer checkpoints differ in $f"; exit 1; }
    done
    echo "sharded: dyncp-export of the sharded checkpoint is byte-identical to the single writer's"
    # Same layout, resumed through checkpoint.save alone: bitwise.
    run train.train_iters=6 "${common[@]}" checkpoint.save="$work/ckpt" checkpoint.sharded=true \
      logger.metrics_path="$work/second.jsonl" >"$work/b.log" 2>&1
    grep -q "resumed from $folder" "$work/b.log" || { echo "did not resume iter 3"; exit 1; }
    mpirun -np 2 "$train" --config "$recipe" train.train_iters=6 "${common[@]}" \
      checkpoint.load="$work/ckpt" checkpoint.ckpt_step=3 model.dynamic_context_parallel=false \
      model.sequence_packing_scheduler=dp_balanced model.expert_model_parallel_size=1 \
      logger.metrics_path="$work/two.jsonl" >"$work/c.log" 2>&1
    mpirun -np 8 "$train" --config "$recipe" train.train_iters=6 "${common[@]}" \
      checkpoint.load="$work/ckpt" checkpoint.ckpt_step=3 model.expert_model_parallel_size=4 \
      checkpoint.save="$work/eight" checkpoint.sharded=true \
      logger.metrics_path="$work/eight.jsonl" >"$work/d.log" 2>&1
    python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def losses(name):
    return {r["iteration"]: r["loss"] for r in map(json.loads, open(f"{work}/{name}.jsonl"))}
full, first, second = losses("full"), losses("first"), losses("second")
joined = {**first, **second}
assert sorted(joined) == [1, 2, 3, 4, 5, 6], joined
assert all(joined[i] == full[i] for i in full), {i: (joined[i], full[i]) for i in full}
for name in ("two", "eight"):
    resumed = losses(name)
    assert sorted(resumed) == [4, 5, 6], resumed
    worst = max(abs(resumed[i] - full[i]) / abs(full[i]) for i in resumed)
    assert worst <= 1e-5, (name, resumed, full)
    print(f"sharded: 4 -> {2 if name == 'two' else 8} ranks, steps 4-6 within {worst:.2g} of the uninterrupted run")
print("sharded: one shard per rank, format 3; 3 + 3 steps on the same layout equal 6 bitwise")
# The 8-rank run (dynamic CP, EP 4, distributed optimizer) saved one shard per rank, each
# within 10% of the state / 8.
import glob, os
shards = sorted(glob.glob(f"{work}/eight/iter_0000006/shards/rank_*.bin"))
sizes = [os.path.getsize(p) for p in shards]
assert len(sizes) == 8, shards
mean = sum(sizes) / 8
assert all(abs(s - mean) <= 0.1 * mean for s in sizes), sizes
print(f"sharded: 8 ranks wrote {min(sizes)}..{max(sizes)} bytes each ({sum(sizes)} in all)")
PY
    # kill -9 of rank 2 while the run saves every step, as soon as a save's temporary folder
    # appears: the folder still holds a checkpoint that verifies and the next run resumes it.
    run train.train_iters=100000 checkpoint.save="$work/killed" checkpoint.sharded=true \
      checkpoint.save_interval=1 >"$work/k.log" 2>&1 &
    job=$!
    victim=
    for _ in $(seq 1 3000); do
      if [[ -z $victim ]]; then
        for p in $(pgrep -f "checkpoint.save=$work/killed" || true); do
          tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=2 && victim=$p
        done
      fi
      [[ -n $victim && -e $work/killed/latest ]] && compgen -G "$work/killed/.tmp_iter_*" >/dev/null && break
      sleep 0.005
    done
    [[ -n $victim ]] || { echo "rank 2 not found"; exit 1; }
    during=$(compgen -G "$work/killed/.tmp_iter_*" || true)
    kill -9 "$victim"
    wait "$job" || true
    latest=$(cat "$work/killed/latest")
    mpirun -np 2 "$train" --config "$recipe" train.train_iters=$((10#${latest#iter_} + 1)) \
      checkpoint.load="$work/killed" model.dynamic_context_parallel=false \
      model.sequence_packing_scheduler=dp_balanced model.expert_model_parallel_size=1 >"$work/k3.log" 2>&1 \
      || { echo "no resume after kill -9 of rank 2"; tail -5 "$work/k3.log"; exit 1; }
    grep -q "resumed from $work/killed/iter_" "$work/k3.log" || { echo "did not resume after the kill"; exit 1; }
    echo "sharded: kill -9 of rank 2 (temporary folder then: ${during##*/}) left $latest loading"
    ;;
  async_save)
    # checkpoint.async_save: the checkpoint of step 2 is byte for byte the synchronous one,
    # published only after step 3 ran (the step log shows training went on); a failed write of
    # one rank in the background ends the run with exit 1 naming the file, and the previous
    # checkpoint loads.
    common=(train.train_iters=4 checkpoint.save_interval=2 checkpoint.sharded=true)
    run "${common[@]}" checkpoint.save="$work/sync" >"$work/sync.log" 2>&1
    run "${common[@]}" checkpoint.save="$work/async" checkpoint.async_save=true >"$work/async.log" 2>&1
    for f in index.json state.json manifest.json model/config.json shards/rank_00000.bin shards/rank_00003.bin; do
      cmp "$work/sync/iter_0000002/$f" "$work/async/iter_0000002/$f" || { echo "async and sync $f differ"; exit 1; }
    done
    python3 - "$work/async.log" <<'PY'
import re, sys
log = open(sys.argv[1]).read()
saved = log.index("checkpoint saved: ")
step3 = re.search(r"iteration +3/ +4 \|", log)
assert step3 and step3.start() < saved, "the step-2 checkpoint was published before step 3 ran"
print("async_save: the step-2 checkpoint was published after step 3 ran")
PY
    status=0
    DYNCP_FAULT_ENOSPC_FILE=rank_00001.bin DYNCP_FAULT_ENOSPC_AFTER_BYTES=0 run train.train_iters=6 \
      checkpoint.save_interval=2 checkpoint.async_save=true checkpoint.save="$work/async" \
      >"$work/fail.log" 2>&1 || status=$?
    [[ $status -eq 1 ]] || { echo "a failed background save exited $status, not 1"; exit 1; }
    grep -q "rank 1: writing '.*shards/rank_00001.bin' failed: No space left on device" "$work/fail.log" \
      || { echo "the failure does not name rank 1's file"; exit 1; }
    [[ "$(cat "$work/async/latest")" == iter_0000004 ]] || { echo "latest moved to a failed save"; exit 1; }
    run train.train_iters=5 checkpoint.load="$work/async" >"$work/resume.log" 2>&1
    grep -q "resumed from $work/async/iter_0000004" "$work/resume.log" || { echo "did not resume iter 4"; exit 1; }
    echo "async_save: byte-identical to the synchronous save; a failed background write exits 1 naming the file, iter_0000004 loads"
    ;;
  resume_chain)
    # The whole chain of layouts on sharded checkpoints: 8 ranks (dynamic CP, EP 4, distributed
    # optimizer) save steps 1-2; the same layout resumes step 3 bit for bit; then 4 ranks
    # (static CP 2, EP 2) step 4, 2 ranks (dynamic CP, EP 1) step 5 and 1 rank (no CP) step 6,
    # each resuming the previous one's shards, with the uninterrupted 8-rank run's losses to
    # fp32 round-off. The HF exports of the last checkpoint by 8 ranks (EP 4) and by 1 rank are
    # byte for byte dyncp-export's.
    common=(scheduler.lr_decay_iters=6 ddp.use_distributed_optimizer=true checkpoint.sharded=true)
    eight=(model.expert_model_parallel_size=4)
    static=(model.dynamic_context_parallel=false model.sequence_packing_scheduler=dp_balanced)
    one=(model.dynamic_context_parallel=false model.context_parallel_size=1
         model.expert_model_parallel_size=1 model.max_seqlen_per_dp_cp_rank=256)
    runs() { local n=$1; shift; mpirun -np "$n" "$train" --config "$recipe" "${common[@]}" "$@"; }
    runs 8 "${eight[@]}" train.train_iters=6 logger.metrics_path="$work/full.jsonl" >"$work/full.log" 2>&1
    runs 8 "${eight[@]}" train.train_iters=2 checkpoint.save="$work/c8" \
      logger.metrics_path="$work/s8.jsonl" >"$work/s8.log" 2>&1
    runs 8 "${eight[@]}" train.train_iters=3 checkpoint.load="$work/c8" checkpoint.save="$work/c8b" \
      logger.metrics_path="$work/s8b.jsonl" >"$work/s8b.log" 2>&1
    runs 4 "${static[@]}" train.train_iters=4 checkpoint.load="$work/c8b" checkpoint.save="$work/c4" \
      logger.metrics_path="$work/s4.jsonl" >"$work/s4.log" 2>&1
    runs 2 model.expert_model_parallel_size=1 train.train_iters=5 checkpoint.load="$work/c4" \
      checkpoint.save="$work/c2" logger.metrics_path="$work/s2.jsonl" >"$work/s2.log" 2>&1
    runs 1 "${one[@]}" train.train_iters=6 checkpoint.load="$work/c2" checkpoint.save="$work/c1" \
      logger.metrics_path="$work/s1.jsonl" >"$work/s1.log" 2>&1
    for log in s8b s4 s2 s1; do
      grep -q "resumed from .*/iter_000000" "$work/$log.log" || { echo "$log did not resume"; exit 1; }
    done
    grep -q "experts: this rank holds \[0, 2) of 8 (EP 4)" "$work/s8.log" || { echo "not EP 4"; exit 1; }
    [[ -s $work/c1/iter_0000006/shards/rank_00000.bin && -s $work/c4/iter_0000004/shards/rank_00003.bin ]] \
      || { echo "the chain's checkpoints are not sharded"; exit 1; }
    python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def losses(name):
    return {r["iteration"]: r["loss"] for r in map(json.loads, open(f"{work}/{name}.jsonl"))}
full = losses("full")
same = {**losses("s8"), **losses("s8b")}
assert sorted(same) == [1, 2, 3], same
assert all(same[i] == full[i] for i in same), {i: (same[i], full[i]) for i in same}
for name, step, what in (("s4", 4, "4 ranks, static CP, EP 2"), ("s2", 5, "2 ranks, dynamic CP, EP 1"),
                         ("s1", 6, "1 rank")):
    run = losses(name)
    assert sorted(run) == [step], (name, run)
    error = abs(run[step] - full[step]) / abs(full[step])
    assert error <= 1e-5, (name, run[step], full[step])
    print(f"resume_chain: step {step} on {what}: {run[step]!r} against {full[step]!r} ({error:.2g})")
print("resume_chain: steps 1-3 on 8 ranks (dynamic CP, EP 4), saved and resumed, bitwise equal")
PY
    # The HF exports of iter 6 by 8 ranks (EP 4) and by 1 rank, and dyncp-export's.
    runs 8 "${eight[@]}" train.train_iters=6 checkpoint.load="$work/c1" checkpoint.export_hf="$work/hf8" \
      >"$work/e8.log" 2>&1
    runs 1 "${one[@]}" train.train_iters=6 checkpoint.load="$work/c1" checkpoint.export_hf="$work/hf1" \
      >"$work/e1.log" 2>&1
    grep -q "HF weights exported to $work/hf8 by 8 ranks" "$work/e8.log" || { echo "no 8-rank export"; exit 1; }
    export_tool=${train%/dyncp-train/dyncp-train}/dyncp-export/dyncp-export
    "$export_tool" --checkpoint "$work/c1" --out "$work/hfx" --no-tokenizer >"$work/ex.log" 2>&1
    for f in model.safetensors config.json; do
      cmp "$work/hf8/$f" "$work/hf1/$f" || { echo "8-rank and 1-rank exports differ in $f"; exit 1; }
      cmp "$work/hf8/$f" "$work/hfx/$f" || { echo "the 8-rank export and dyncp-export's differ in $f"; exit 1; }
    done
    echo "resume_chain: the HF exports of iter 6 by 8 ranks (EP 4), 1 rank and dyncp-export are byte-identical"
    ;;
  tensor_parallel | tensor_parallel_hybrid)
    # Checkpoints hold whole tensors whatever the TP layout that saved them. Steps 1-3 at tp 2
    # (4 ranks, with sequence parallelism), saved sharded with the experts split over the
    # expert-TP group (etp 2, EP 2) and single-writer with whole experts (etp 1, EP 4, the
    # distributed optimizer); each resumes at tp 1 (dynamic CP, EP 2) and at tp 4 (experts
    # split, or whole with EP 4) for steps 4-5 with the uninterrupted tp-1 run's losses to fp32
    # round-off. The HF exports of the sharded checkpoint by tp-1 and tp-4 runs that resume it
    # without training, and dyncp-export's of both checkpoints, are byte-identical.
    # tp 4 needs 8 heads, 4 K/V heads (and 4 DeltaNet key heads): every run uses them.
    heads=(model.num_attention_heads=8 model.num_key_value_heads=4 scheduler.lr_decay_iters=5)
    [[ $case_name == tensor_parallel_hybrid ]] && heads+=(model.linear_num_key_heads=4)
    tp2=(model.tensor_model_parallel_size=2 model.sequence_parallel=true)
    tp4=(model.tensor_model_parallel_size=4 model.context_parallel_size=1 model.dynamic_context_parallel=false
         model.sequence_packing_scheduler=dp_balanced model.max_seqlen_per_dp_cp_rank=256)
    sharded=(checkpoint.sharded=true model.expert_model_parallel_size=2)
    single=(checkpoint.sharded=false model.expert_model_parallel_size=4 model.expert_tensor_parallel_size=1
            ddp.use_distributed_optimizer=true)
    run "${heads[@]}" train.train_iters=5 logger.metrics_path="$work/full.jsonl" >"$work/full.log" 2>&1
    run "${heads[@]}" "${tp2[@]}" "${sharded[@]}" train.train_iters=3 checkpoint.save="$work/sharded" \
      logger.metrics_path="$work/tp2_sharded.jsonl" >"$work/a.log" 2>&1
    run "${heads[@]}" "${tp2[@]}" "${single[@]}" train.train_iters=3 checkpoint.save="$work/single" \
      logger.metrics_path="$work/tp2_single.jsonl" >"$work/b.log" 2>&1
    grep -q '"format":2' "$work/sharded/iter_0000003/index.json" || { echo "index format 2 not written"; exit 1; }
    [[ -s $work/single/iter_0000003/optimizer.safetensors ]] || { echo "no single-writer checkpoint"; exit 1; }
    # The single-writer resumes save again at step 5 (compared tensor by tensor below).
    run "${heads[@]}" train.train_iters=5 checkpoint.load="$work/sharded" \
      logger.metrics_path="$work/tp1_from_sharded.jsonl" >"$work/c_sharded.log" 2>&1
    run "${heads[@]}" train.train_iters=5 checkpoint.load="$work/single" checkpoint.sharded=false \
      checkpoint.save="$work/tp1_saved" logger.metrics_path="$work/tp1_from_single.jsonl" >"$work/c_single.log" 2>&1
    run "${heads[@]}" "${tp4[@]}" model.expert_model_parallel_size=1 train.train_iters=5 \
      checkpoint.load="$work/sharded" logger.metrics_path="$work/tp4_from_sharded.jsonl" >"$work/d1.log" 2>&1
    run "${heads[@]}" "${tp4[@]}" model.expert_model_parallel_size=4 model.expert_tensor_parallel_size=1 \
      train.train_iters=5 checkpoint.load="$work/single" checkpoint.sharded=false checkpoint.save="$work/tp4_saved" \
      logger.metrics_path="$work/tp4_from_single.jsonl" >"$work/d2.log" 2>&1
    for log in c_sharded c_single d1 d2; do
      grep -q "resumed from $work/.*/iter_0000003" "$work/$log.log" || { echo "$log did not resume"; exit 1; }
    done
    python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def losses(name):
    return {r["iteration"]: r["loss"] for r in map(json.loads, open(f"{work}/{name}.jsonl"))}
full = losses("full")
for name, steps in (("tp2_sharded", [1, 2, 3]), ("tp2_single", [1, 2, 3]),
                    ("tp1_from_sharded", [4, 5]), ("tp1_from_single", [4, 5]),
                    ("tp4_from_sharded", [4, 5]), ("tp4_from_single", [4, 5])):
    run = losses(name)
    assert sorted(run) == steps, (name, run)
    worst = max(abs(run[i] - full[i]) / abs(full[i]) for i in run)
    assert worst <= 1e-6, (name, run, full)
    print(f"tensor_parallel: {name} steps {steps} within {worst:.2g} of the uninterrupted tp-1 run")
# Losses barely see the moments: the step-5 checkpoints of the tp-1 and tp-4 resumes hold the
# same weights and moments to round-off (a lost or misplaced piece differs by order 1; the
# DeltaNet decay parameters' moments (A_log, dt_bias) amplify round-off to a few 1e-4, as
# between two uninterrupted runs of different layouts).
import array, math, struct
def tensors(path):
    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        data = f.read()
    return {name: array.array("f", data[e["data_offsets"][0]:e["data_offsets"][1]])
            for name, e in header.items() if name != "__metadata__"}
worst = 0.0
for part in ("optimizer.safetensors", "model/model.safetensors"):
    a = tensors(f"{work}/tp4_saved/iter_0000005/{part}")
    b = tensors(f"{work}/tp1_saved/iter_0000005/{part}")
    assert sorted(a) == sorted(b), part
    for name in a:
        diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(a[name], b[name])))
        worst = max(worst, diff / max(math.sqrt(sum(y * y for y in b[name])), 1e-30))
print(f"tensor_parallel: step-5 checkpoints of the tp-4 and tp-1 resumes, worst relative difference {worst:.3g}")
assert worst <= 1e-3, worst
PY
    # The exports of the tp-2 sharded checkpoint's weights: by tp 1 and tp 4 runs resuming it
    # without a step, and by dyncp-export from either checkpoint format.
    run "${heads[@]}" train.train_iters=3 checkpoint.load="$work/sharded" checkpoint.export_hf="$work/hf_tp1" \
      >"$work/e1.log" 2>&1
    run "${heads[@]}" "${tp4[@]}" model.expert_model_parallel_size=1 train.train_iters=3 \
      checkpoint.load="$work/sharded" checkpoint.export_hf="$work/hf_tp4" >"$work/e4.log" 2>&1
    grep -q "HF weights exported to $work/hf_tp4 by 4 ranks" "$work/e4.log" || { echo "no tp-4 export"; exit 1; }
    export_tool=${train%/dyncp-train/dyncp-train}/dyncp-export/dyncp-export
    "$export_tool" --checkpoint "$work/sharded" --out "$work/hf_sharded" --no-tokenizer >"$work/x1.log" 2>&1
    for f in model.safetensors config.json; do
      cmp "$work/hf_tp1/$f" "$work/hf_tp4/$f" || { echo "tp-1 and tp-4 exports differ in $f"; exit 1; }
      cmp "$work/hf_tp1/$f" "$work/hf_sharded/$f" || { echo "dyncp-export of the tp-2 checkpoint differs in $f"; exit 1; }
    done
    # The single-writer checkpoint: dyncp-export of it equals a tp-1 run's export of it.
    run "${heads[@]}" train.train_iters=3 checkpoint.load="$work/single" checkpoint.sharded=false \
      checkpoint.export_hf="$work/hf_single_tp1" >"$work/e5.log" 2>&1
    "$export_tool" --checkpoint "$work/single" --out "$work/hf_single" --no-tokenizer >"$work/x2.log" 2>&1
    cmp "$work/hf_single_tp1/model.safetensors" "$work/hf_single/model.safetensors" \
      || { echo "dyncp-export of the tp-2 single-writer checkpoint differs from the tp-1 export"; exit 1; }
    echo "tensor_parallel: HF exports by tp 1, tp 4 and dyncp-export of the tp-2 checkpoints are byte-identical"
    ;;
  pipeline)
    # Pipeline stages through the trainer, on 4 layers. pp 2 x cp 2 (dynamic CP, EP 2) runs the
    # schedule of the 2-rank pool that pp 1 x cp 2 runs: the same losses bit for bit, and so do
    # interleaved 1F1B (vpp 2) and ddp.overlap_grad_reduce. Saved at pp 2 step 2, resumed at pp 2 (bitwise), then pp 1 on 2
    # ranks, then pp 4 on 4 ranks (a one-rank pool, static), each resuming the last one's
    # shards with the uninterrupted losses to fp32 round-off. The HF exports of the last
    # checkpoint at pp 4, 2 and 1 and dyncp-export's are byte-identical, and so are the
    # single-writer checkpoints the three layouts save from it.
    common=(model.num_hidden_layers=4 scheduler.lr_decay_iters=6)
    pp2=(model.pipeline_model_parallel_size=2)
    pp4=(model.pipeline_model_parallel_size=4 model.dynamic_context_parallel=false
         model.sequence_packing_scheduler=dp_balanced model.context_parallel_size=1
         model.expert_model_parallel_size=1 model.max_seqlen_per_dp_cp_rank=256)
    runs() { local n=$1; shift; mpirun -np "$n" "$train" --config "$recipe" "${common[@]}" "$@"; }
    runs 4 "${pp2[@]}" train.train_iters=6 logger.metrics_path="$work/full.jsonl" >"$work/full.log" 2>&1
    runs 2 train.train_iters=6 logger.metrics_path="$work/flat.jsonl" >"$work/flat.log" 2>&1
    runs 4 "${pp2[@]}" model.virtual_pipeline_model_parallel_size=2 train.train_iters=3 \
      logger.metrics_path="$work/vpp.jsonl" >"$work/vpp.log" 2>&1
    runs 4 "${pp2[@]}" ddp.overlap_grad_reduce=true ddp.bucket_size=2000 train.train_iters=3 \
      logger.metrics_path="$work/overlap.jsonl" >"$work/overlap.log" 2>&1
    runs 4 "${pp2[@]}" train.train_iters=2 checkpoint.save="$work/c2" \
      logger.metrics_path="$work/s2.jsonl" >"$work/s2.log" 2>&1
    runs 4 "${pp2[@]}" train.train_iters=3 checkpoint.load="$work/c2" checkpoint.save="$work/c2b" \
      logger.metrics_path="$work/s2b.jsonl" >"$work/s2b.log" 2>&1
    runs 2 train.train_iters=4 checkpoint.load="$work/c2b" checkpoint.save="$work/c1" \
      logger.metrics_path="$work/s1.jsonl" >"$work/s1.log" 2>&1
    runs 4 "${pp4[@]}" train.train_iters=6 checkpoint.load="$work/c1" checkpoint.save="$work/c4" \
      logger.metrics_path="$work/s4.jsonl" >"$work/s4.log" 2>&1
    for log in s2b s1 s4; do
      grep -q "resumed from .*/iter_000000" "$work/$log.log" || { echo "$log did not resume"; exit 1; }
    done
    grep -q "layout: world 4 = pp 2" "$work/full.log" || { echo "not 2 stages"; head "$work/full.log"; exit 1; }
    python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def rows(name):
    return {r["iteration"]: r for r in map(json.loads, open(f"{work}/{name}.jsonl"))}
full, flat, vpp, overlap = rows("full"), rows("flat"), rows("vpp"), rows("overlap")
assert sorted(full) == list(range(1, 7)), full
for i in full:
    assert full[i]["loss"] == flat[i]["loss"], (i, full[i]["loss"], flat[i]["loss"])
    assert abs(full[i]["grad_norm"] - flat[i]["grad_norm"]) <= 1e-12 * flat[i]["grad_norm"], i
for i in vpp:
    assert vpp[i]["loss"] == full[i]["loss"], (i, vpp[i]["loss"], full[i]["loss"])
for i in overlap:  # buckets summed during each chunk's last backward: the same bits
    assert (overlap[i]["loss"], overlap[i]["grad_norm"]) == (full[i]["loss"], full[i]["grad_norm"]), i
saved = {**rows("s2"), **rows("s2b")}
assert sorted(saved) == [1, 2, 3] and all(saved[i]["loss"] == full[i]["loss"] for i in saved), saved
for name, steps, what in (("s1", [4], "pp 1, 2 ranks"), ("s4", [5, 6], "pp 4, 4 ranks")):
    run = rows(name)
    assert sorted(run) == steps, (name, run)
    for step in steps:
        error = abs(run[step]["loss"] - full[step]["loss"]) / abs(full[step]["loss"])
        assert error <= 1e-6, (name, step, run[step]["loss"], full[step]["loss"])
        print(f"pipeline: step {step} at {what}: {run[step]['loss']!r} against "
              f"{full[step]['loss']!r} ({error:.2g})")
print("pipeline: pp 2 (1F1B, interleaved, overlapped reduction) gives pp 1's losses on the same "
      "pool bit for bit; saved at pp 2 and resumed at pp 2 bitwise")
PY
    runs 4 "${pp4[@]}" train.train_iters=6 checkpoint.load="$work/c4" checkpoint.export_hf="$work/hf4" \
      >"$work/e4.log" 2>&1
    runs 4 "${pp2[@]}" train.train_iters=6 checkpoint.load="$work/c4" checkpoint.export_hf="$work/hf2" \
      >"$work/e2.log" 2>&1
    runs 2 train.train_iters=6 checkpoint.load="$work/c4" checkpoint.export_hf="$work/hf1" \
      >"$work/e1.log" 2>&1
    export_tool=${train%/dyncp-train/dyncp-train}/dyncp-export/dyncp-export
    "$export_tool" --checkpoint "$work/c4" --out "$work/hfx" --no-tokenizer >"$work/ex.log" 2>&1
    for f in model.safetensors config.json; do
      for other in hf2 hf1 hfx; do
        cmp "$work/hf4/$f" "$work/$other/$f" || { echo "the pp 4 export and $other differ in $f"; exit 1; }
      done
    done
    echo "pipeline: the HF exports at pp 4, 2, 1 and dyncp-export's are byte-identical"
    # Single-writer checkpoints: rank 0 receives every other stage's tensors from that stage's
    # first rank (its EP group gathering the experts). Loading c4 and training nothing, each
    # layout saves what it loaded: the files are byte for byte the same at pp 4, 2 and 1.
    runs 4 "${pp4[@]}" train.train_iters=6 checkpoint.load="$work/c4" checkpoint.sharded=false \
      checkpoint.save="$work/w4" >"$work/w4.log" 2>&1
    runs 4 "${pp2[@]}" train.train_iters=6 checkpoint.load="$work/c4" checkpoint.sharded=false \
      checkpoint.save="$work/w2" >"$work/w2.log" 2>&1
    runs 2 train.train_iters=6 checkpoint.load="$work/c4" checkpoint.sharded=false \
      checkpoint.save="$work/w1" >"$work/w1.log" 2>&1
    for f in model/model.safetensors optimizer.safetensors state.json; do
      for other in w4 w2; do
        cmp "$work/w1/iter_0000006/$f" "$work/$other/iter_0000006/$f" ||
          { echo "the single-writer $f of $other differs from pp 1's"; exit 1; }
      done
    done
    echo "pipeline: single-writer checkpoints saved at pp 4, 2 and 1 are byte-identical"
    # The embedding and the loss counted in the split: 2 layers + 2 over 4 stages leave stage 0
    # the embedding alone and stage 3 the final norm, head and loss alone.
    two=(model.num_hidden_layers=2 model.account_for_embedding_in_pipeline_split=true
         model.account_for_loss_in_pipeline_split=true train.train_iters=2)
    runs 4 "${pp4[@]}" "${two[@]}" logger.metrics_path="$work/bare4.jsonl" >"$work/bare4.log" 2>&1
    runs 1 "${pp4[@]:1}" "${two[@]}" logger.metrics_path="$work/bare1.jsonl" >"$work/bare1.log" 2>&1
    grep -q "stage 0: 0 layers .*+ embedding" "$work/bare4.log" ||
      { echo "stage 0 does not hold the embedding alone"; exit 1; }
    diff <(losses "$work/bare4.jsonl") <(losses "$work/bare1.jsonl")
    echo "pipeline: stages holding only the embedding or only the loss give pp 1's losses bit for bit"
    ;;
  pipeline_held_out)
    # Held-out evaluation runs the forward-only schedule through the stages: the demo recipe's 3
    # layers with the embedding counted in the split (stage 0: embedding + 1 layer, stage 1: 2
    # layers + head) at pp 2 gives pp 1's training and held-out losses on the same pool, bit
    # for bit.
    python3 "$source_dir/tools/make_demo_data.py" --out "$work/demo" --num-samples 300 >/dev/null
    python3 "$source_dir/tools/make_demo_data.py" --out "$work/demo/heldout" --seed 2 \
      --num-samples 60 >/dev/null
    demo=("$source_dir/configs/demo/tiny_moe.yaml" dataset.data_path="$work/demo/train.jsonl"
          tokenizer.tokenizer_model="$work/demo/tokenizer" dataset.cache_dir="$work/cache"
          dataset.validation_data_path="$work/demo/heldout/train.jsonl"
          validation.eval_interval=2 validation.eval_iters=2 train.train_iters=4
          scheduler.lr_warmup_iters=1 checkpoint.save= checkpoint.export_hf=
          model.account_for_embedding_in_pipeline_split=true model.max_seqlen_per_dp_cp_rank=1024)
    mpirun -np 4 "$train" --config "${demo[@]}" model.pipeline_model_parallel_size=2 \
      logger.metrics_path="$work/staged.jsonl" >"$work/staged.log" 2>&1
    mpirun -np 2 "$train" --config "${demo[@]}" logger.metrics_path="$work/flat.jsonl" \
      >"$work/flat.log" 2>&1
    python3 - "$work/staged.jsonl" "$work/flat.jsonl" <<'PY'
import json, sys
staged, flat = ([json.loads(l) for l in open(path)] for path in sys.argv[1:3])
assert len(staged) == len(flat) == 4
held_out = [(a["validation_loss"], b["validation_loss"]) for a, b in zip(staged, flat)
            if "validation_loss" in a]
assert len(held_out) == 2 and all(a == b for a, b in held_out), held_out
assert all(a["loss"] == b["loss"] for a, b in zip(staged, flat))
print(f"pipeline_held_out: held-out losses {[a for a, _ in held_out]} at pp 2 equal pp 1's")
PY
    ;;
  tensor_pipeline)
    # Tensor and pipeline parallelism together: 3 steps at pp 2 x tp 2 with sequence
    # parallelism (4 ranks, 4 layers, 4 K/V heads), saved sharded and single-writer, each
    # resumed at pp 1 x tp 1 (dp 4) for steps 4-6 with the uninterrupted dp-4 run's losses to
    # fp32 round-off (1e-5: steps 1-3's round-off grows to about 5e-7 by step 5 here; a misplaced
    # piece moves the loss by percents). The HF exports of that checkpoint by dp 4, pp 2 x tp 2 and tp 4
    # runs that resume it without training are byte-identical.
    layout=(model.num_hidden_layers=4 model.num_key_value_heads=4 model.context_parallel_size=1
            model.dynamic_context_parallel=false model.sequence_packing_scheduler=dp_balanced
            model.max_seqlen_per_dp_cp_rank=256 model.expert_model_parallel_size=1
            model.expert_tensor_parallel_size=1 scheduler.lr_decay_iters=6)
    stages=(model.tensor_model_parallel_size=2 model.sequence_parallel=true
            model.pipeline_model_parallel_size=2)
    run "${layout[@]}" train.train_iters=6 logger.metrics_path="$work/straight.jsonl" \
      checkpoint.save= >"$work/straight.log" 2>&1
    for sharded in true false; do
      run "${layout[@]}" "${stages[@]}" train.train_iters=3 checkpoint.sharded=$sharded \
        checkpoint.save="$work/ckpt_$sharded" checkpoint.save_interval=3 \
        logger.metrics_path="$work/first_$sharded.jsonl" >"$work/first_$sharded.log" 2>&1
      run "${layout[@]}" train.train_iters=6 checkpoint.load="$work/ckpt_$sharded" checkpoint.save= \
        logger.metrics_path="$work/resumed_$sharded.jsonl" >"$work/resumed_$sharded.log" 2>&1
      grep -q "resumed from" "$work/resumed_$sharded.log"
      python3 - "$work/straight.jsonl" "$work/first_$sharded.jsonl" "$work/resumed_$sharded.jsonl" \
        "$sharded" <<'PY'
import json, sys
load = lambda path: {r["iteration"]: r["loss"] for r in map(json.loads, open(path))}
straight, first, resumed = (load(p) for p in sys.argv[1:4])
assert sorted(first) == [1, 2, 3] and sorted(resumed) == [4, 5, 6], (first, resumed)
ran = {**first, **resumed}
worst = max(abs(ran[i] - straight[i]) / straight[i] for i in straight)
assert worst <= 1e-5, f"losses differ by {worst:.2e}"
print(f"tensor_pipeline: pp 2 x tp 2 (sharded={sys.argv[4]}) saved, resumed at dp 4: worst "
      f"relative loss difference over 6 steps {worst:.1e}")
PY
    done
    resume=("${layout[@]}" train.train_iters=3 checkpoint.load="$work/ckpt_true" checkpoint.save=)
    run "${resume[@]}" checkpoint.export_hf="$work/hf_dp4" >"$work/x1.log" 2>&1
    run "${resume[@]}" "${stages[@]}" checkpoint.export_hf="$work/hf_stages" >"$work/x2.log" 2>&1
    run "${resume[@]}" model.tensor_model_parallel_size=4 checkpoint.export_hf="$work/hf_tp4" \
      >"$work/x3.log" 2>&1
    for other in hf_stages hf_tp4; do
      cmp "$work/hf_dp4/model.safetensors" "$work/$other/model.safetensors" ||
        { echo "the $other export differs from the dp-4 one"; exit 1; }
    done
    echo "tensor_pipeline: HF exports by dp 4, pp 2 x tp 2 and tp 4 are byte-identical"
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
