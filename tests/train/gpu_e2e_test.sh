#!/usr/bin/env bash
# The training loop on the GPU path against the CPU path, run by ctest with the emulated CUDA
# backend (dyncp-train-emulated runs kernels/ on the host, device memory unreadable by host
# code):
#   gpu_e2e_test.sh DYNCP_TRAIN DYNCP_TRAIN_EMULATED SOURCE_DIR CASE
# CASE:
#   matches_cpu   one rank, fp32: the same recipe on dist.device cpu and cuda; every step's
#                 loss and gradient norm agree to 1e-5 relative (the model step itself is
#                 checked tensor by tensor in tests/gpu/model_step_test.cpp)
#   checkpoints   a checkpoint saved by the GPU path resumes on the CPU path and the other way
#                 round; each resumed run's first loss equals, to 1e-5, the loss the saving
#                 run's own device reaches at that step (GPU to CPU with both Adam moments in
#                 bf16, the precision-aware optimizer; CPU to GPU with fp32 moments)
#   bitwise_state a checkpoint saved by the GPU path, loaded by the CPU path and saved again
#                 without a step (a run that resumes from another folder and trains nothing
#                 saves what it loaded), is byte for byte the GPU's: model, optimizer and
#                 state.json; and the other way round; fp32 and bf16 Adam moments
#   refusals      what the GPU path does not run yet exits 2 naming the key
#   attention_backend
#                 model.attention_backend: fused is refused (exit 2, naming the key and the
#                 reason) on the emulated backend (no cuDNN), in an fp32 run and on the CPU path;
#                 auto takes our own kernel there and says so in one log line; flash likewise;
#                 Bridge's unfused is refused; auto and flash train the same losses bit for bit
#   four_ranks    mpirun -np 4, dynamic CP over dp 2 x cp 2 with EP 2, fp32: the trainer on the
#                 emulated GPU (tensors over the emulated NCCL, metadata over MPI) and on the
#                 CPU give every step's loss and gradient norm to 1e-5
#   four_ranks_bf16_distopt
#                 the same layout with mixed_precision=bf16_mixed and the distributed optimizer
#                 (gradients reduce-scattered into device pieces, the sharded update and the
#                 parameter all-gather on the device): every step's loss within 1e-2 of the
#                 CPU run's, the bf16 GPU-vs-CPU tolerance of docs/precision.md
#   distopt_checkpoints
#                 mpirun -np 2 (dp 2, so every piece of the state is sharded), the distributed
#                 optimizer with both Adam moments in bf16: the emulated GPU's 3 steps equal
#                 the CPU's to 1e-5; a GPU checkpoint resumed on the GPU is bitwise the
#                 uninterrupted run; one saved by the GPU resumes on the CPU and one saved by
#                 the CPU on the GPU, each resumed step equal to the saving device's own run
#   pipeline_four_ranks
#                 pp 2 x cp 2 on 4 emulated GPUs: fp32 equal to the CPU to 1e-5, bf16_mixed
#                 (bf16 activations) bit for bit pp 1's on the same pool
#   sharded_checkpoints
#                 the same with checkpoint.sharded and checkpoint.async_save: every emulated
#                 GPU writes its own shard in the background, with the same resume checks
#                 to 1e-5 (the devices' round-off)
#   tensor_parallel_checkpoints
#                 mpirun -np 2 at tp 2 with sequence parallelism (every split tensor in two
#                 pieces, one per emulated GPU): the GPU's asynchronous sharded checkpoint and its
#                 single-writer one resume on the GPU at tp 2 bit for bit, and on the CPU at tp 1
#                 (one rank, whole tensors) with the GPU run's next step to 1e-5
#   hybrid_two_ranks  mpirun -np 2, the tiny hybrid recipe (Gated DeltaNet, gated attention)
#                 with dynamic CP over cp 2, the ring exchange, EP 2 and the MoE aux loss: the
#                 DeltaNet states pass between the emulated GPUs; every step's loss and gradient
#                 norm equal the CPU run's to 1e-5
set -euo pipefail
cpu_train=$1
gpu_train=$2
source_dir=$3
case_name=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-gpu-e2e-$case_name.XXXXXX")
trap 'rm -rf "$work"' EXIT
recipe=$source_dir/configs/smoke/tiny_mock.yaml
# One rank, static layout; a small batch keeps the emulated run to seconds per step.
one_rank=(model.context_parallel_size=1 model.expert_model_parallel_size=1
          model.dynamic_context_parallel=false model.max_seqlen_per_dp_cp_rank=256
          model.moe_router_load_balancing_type=none train.global_batch_size=4
          dataset.mock_length_distribution="lognormal(min=16,max=96,mean=48,sigma=0.5)")
run() {
  local binary=$1 device=$2
  shift 2
  OPENBLAS_NUM_THREADS=1 "$binary" --config "$recipe" "${one_rank[@]}" dist.device="$device" "$@"
}
# compare A.jsonl B.jsonl FIRST_ITERATION [TOLERANCE [KEYS]]: per step from FIRST_ITERATION on,
# each key's relative difference <= TOLERANCE (default 1e-5; 0 means bitwise), KEYS default
# "loss grad_norm".
compare() {
  python3 - "$1" "$2" "$3" "${4:-1e-5}" "${5:-loss grad_norm}" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
first, tolerance, keys = int(sys.argv[3]), float(sys.argv[4]), sys.argv[5].split()
b_by_iter = {r["iteration"]: r for r in b}
checked = 0
for r in a:
    if r["iteration"] < first or r["iteration"] not in b_by_iter:
        continue
    s = b_by_iter[r["iteration"]]
    for key in keys:
        rel = abs(r[key] - s[key]) / max(abs(s[key]), 1e-30)
        print(f"iteration {r['iteration']} {key}: {r[key]!r} vs {s[key]!r} (relative {rel:.2e})")
        assert (r[key] == s[key]) if tolerance == 0 else rel <= tolerance, (key, r, s)
    checked += 1
assert checked >= 1, "no common iterations"
PY
}

case $case_name in
  matches_cpu)
    run "$cpu_train" cpu train.train_iters=3 logger.metrics_path="$work/cpu.jsonl" >"$work/cpu.log" 2>&1
    run "$gpu_train" cuda train.train_iters=3 logger.metrics_path="$work/gpu.jsonl" >"$work/gpu.log" 2>&1 \
      || { cat "$work/gpu.log"; exit 1; }
    grep -q "device: emulated CUDA device 0" "$work/gpu.log"
    compare "$work/gpu.jsonl" "$work/cpu.jsonl" 1
    echo "matches_cpu: 3 steps on the emulated GPU equal the CPU steps to 1e-5"
    ;;
  checkpoints)
    # Each device trains 2 steps and saves; the other device resumes for step 3. Step 3's loss
    # after the resume must be what the saving device itself reaches at step 3 (to the CPU /
    # GPU round-off), so the checkpoint carried the whole state across.
    for pair in "gpu cuda cpu cpu bfloat16" "cpu cpu gpu cuda float32"; do
      read -r save_name save_device load_name load_device moments <<<"$pair"
      state=(optimizer.use_precision_aware_optimizer=true optimizer.exp_avg_dtype="$moments"
             optimizer.exp_avg_sq_dtype="$moments" scheduler.lr_decay_iters=3)
      save_binary=$cpu_train; [[ $save_name == gpu ]] && save_binary=$gpu_train
      load_binary=$cpu_train; [[ $load_name == gpu ]] && load_binary=$gpu_train
      ckpt=$work/ckpt-$save_name
      run "$save_binary" "$save_device" train.train_iters=3 "${state[@]}" \
        logger.metrics_path="$work/$save_name-full.jsonl" >"$work/$save_name-full.log" 2>&1
      run "$save_binary" "$save_device" train.train_iters=2 "${state[@]}" \
        checkpoint.save="$ckpt" checkpoint.save_interval=2 >"$work/$save_name-save.log" 2>&1
      run "$load_binary" "$load_device" train.train_iters=3 "${state[@]}" \
        checkpoint.load="$ckpt" logger.metrics_path="$work/$load_name-resumed.jsonl" \
        >"$work/$load_name-resume.log" 2>&1 || { cat "$work/$load_name-resume.log"; exit 1; }
      grep -q "resumed from" "$work/$load_name-resume.log"
      compare "$work/$load_name-resumed.jsonl" "$work/$save_name-full.jsonl" 3
      echo "checkpoints: saved on $save_name, resumed on $load_name"
    done
    ;;
  bitwise_state)
    for pair in "gpu cuda cpu cpu float32" "cpu cpu gpu cuda bfloat16"; do
      read -r save_name save_device load_name load_device moments <<<"$pair"
      # Single-writer files (checkpoint.sharded=false); sharded_checkpoints crosses devices with
      # sharded ones.
      state=(optimizer.use_precision_aware_optimizer=true optimizer.exp_avg_dtype="$moments"
             optimizer.exp_avg_sq_dtype="$moments" checkpoint.sharded=false)
      save_binary=$cpu_train; [[ $save_name == gpu ]] && save_binary=$gpu_train
      load_binary=$cpu_train; [[ $load_name == gpu ]] && load_binary=$gpu_train
      saved=$work/saved-$save_name resaved=$work/resaved-$load_name
      run "$save_binary" "$save_device" train.train_iters=2 "${state[@]}" \
        checkpoint.save="$saved" checkpoint.save_interval=2 >"$work/save.log" 2>&1 \
        || { cat "$work/save.log"; exit 1; }
      run "$load_binary" "$load_device" train.train_iters=2 "${state[@]}" \
        checkpoint.load="$saved" checkpoint.save="$resaved" >"$work/resave.log" 2>&1 \
        || { cat "$work/resave.log"; exit 1; }
      grep -q "resumed from" "$work/resave.log"
      for file in model/model.safetensors model/config.json optimizer.safetensors state.json \
                  manifest.json; do
        cmp "$saved/iter_0000002/$file" "$resaved/iter_0000002/$file" \
          || { echo "$file differs after $save_name -> $load_name"; exit 1; }
      done
      echo "bitwise_state: saved on $save_name ($moments moments), re-saved on $load_name: identical"
    done
    ;;
  four_ranks | four_ranks_bf16_distopt)
    mpiexec=${DYNCP_MPIEXEC:-mpirun}
    layout=(model.context_parallel_size=2 model.expert_model_parallel_size=2
            model.dynamic_context_parallel=true model.max_seqlen_per_dp_cp_rank=48
            model.seq_length=96 model.moe_router_load_balancing_type=none
            train.global_batch_size=8 train.train_iters=2
            dataset.mock_length_distribution="lognormal(min=16,max=96,mean=40,sigma=0.5)")
    tolerance=1e-5 keys="loss grad_norm"
    if [[ $case_name == four_ranks_bf16_distopt ]]; then
      # The issue's command: the same binary on both devices, bf16 products, sharded state.
      layout+=(mixed_precision=bf16_mixed ddp.use_distributed_optimizer=true train.train_iters=3)
      cpu_train=$gpu_train tolerance=1e-2 keys=loss
    fi
    for pair in "cpu $cpu_train" "cuda $gpu_train"; do
      read -r device binary <<<"$pair"
      OPENBLAS_NUM_THREADS=1 "$mpiexec" -np 4 "$binary" --config "$recipe" "${layout[@]}" \
        dist.device="$device" logger.metrics_path="$work/$device.jsonl" >"$work/$device.log" 2>&1 \
        || { cat "$work/$device.log"; exit 1; }
    done
    grep -q "cp2:" "$work/cuda.log"  # a microbatch ran on a CP group of two
    if [[ $case_name == four_ranks_bf16_distopt ]]; then
      grep -q "precision: bf16_mixed" "$work/cuda.log"
      grep -q "distributed optimizer: this rank holds .*, on cuda)" "$work/cuda.log"
    fi
    compare "$work/cuda.jsonl" "$work/cpu.jsonl" 1 "$tolerance" "$keys"
    echo "$case_name: dynamic CP + EP on 4 emulated GPUs equal the CPU run to $tolerance"
    ;;
  pipeline_four_ranks)
    # Pipeline stages on the GPU path: pp 2 x cp 2 (dynamic CP, EP 2) on 4 emulated GPUs, 4
    # layers, activations and gradients over the emulated NCCL. fp32: every step's loss and
    # gradient norm equal the CPU run's to 1e-5. bf16_mixed with the distributed optimizer (bf16
    # activations, their fp32 stream kept per microbatch in flight): every loss bit for bit that
    # of pp 1 on the same 2-rank pool.
    mpiexec=${DYNCP_MPIEXEC:-mpirun}
    layout=(model.context_parallel_size=2 model.expert_model_parallel_size=2
            model.dynamic_context_parallel=true model.max_seqlen_per_dp_cp_rank=48
            model.seq_length=96 model.num_hidden_layers=4 train.global_batch_size=8
            train.train_iters=2
            dataset.mock_length_distribution="lognormal(min=16,max=96,mean=40,sigma=0.5)")
    stages=(model.pipeline_model_parallel_size=2)
    bf16=(mixed_precision=bf16_mixed ddp.use_distributed_optimizer=true)
    go() {  # go RANKS BINARY DEVICE NAME ARGS...
      local ranks=$1 binary=$2 device=$3 name=$4
      shift 4
      OPENBLAS_NUM_THREADS=1 "$mpiexec" -np "$ranks" "$binary" --config "$recipe" "${layout[@]}" \
        dist.device="$device" logger.metrics_path="$work/$name.jsonl" "$@" >"$work/$name.log" 2>&1 \
        || { cat "$work/$name.log"; exit 1; }
    }
    go 4 "$cpu_train" cpu cpu "${stages[@]}"
    go 4 "$gpu_train" cuda cuda "${stages[@]}"
    go 4 "$gpu_train" cuda bf16_staged "${stages[@]}" "${bf16[@]}"
    go 2 "$gpu_train" cuda bf16_flat "${bf16[@]}"
    grep -q "layout: world 4 = pp 2" "$work/cuda.log"
    compare "$work/cuda.jsonl" "$work/cpu.jsonl" 1
    compare "$work/bf16_staged.jsonl" "$work/bf16_flat.jsonl" 1 0 loss
    echo "pipeline_four_ranks: pp 2 on 4 emulated GPUs equals the CPU to 1e-5; bf16 pp 2 equals pp 1 bit for bit"
    ;;
  distopt_checkpoints)
    mpiexec=${DYNCP_MPIEXEC:-mpirun}
    state=(ddp.use_distributed_optimizer=true optimizer.use_precision_aware_optimizer=true
           optimizer.exp_avg_dtype=bfloat16 optimizer.exp_avg_sq_dtype=bfloat16
           scheduler.lr_decay_iters=3)
    run2() {  # run2 NAME DEVICE ARGS...: 2 ranks, metrics in $work/NAME.jsonl
      local name=$1 device=$2 binary=$cpu_train
      shift 2
      [[ $device == cuda ]] && binary=$gpu_train
      OPENBLAS_NUM_THREADS=1 "$mpiexec" -np 2 "$binary" --config "$recipe" "${one_rank[@]}" \
        "${state[@]}" dist.device="$device" logger.metrics_path="$work/$name.jsonl" "$@" \
        >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
    }
    # Each device's uninterrupted run saves at iteration 2 on its way to 3; the resumes load
    # that checkpoint (checkpoint.ckpt_step) and run step 3 again.
    for device in cpu cuda; do
      run2 "$device-full" "$device" train.train_iters=3 checkpoint.save="$work/ckpt-$device" \
        checkpoint.save_interval=2
    done
    grep -q "distributed optimizer: this rank holds .*exp_avg bf16, exp_avg_sq bf16, on cuda" \
      "$work/cuda-full.log"
    compare "$work/cuda-full.jsonl" "$work/cpu-full.jsonl" 1
    echo "distopt_checkpoints: bf16 moments, sharded over 2 emulated GPUs, equal the CPU run"
    run2 cuda-resumed-cuda cuda train.train_iters=3 checkpoint.load="$work/ckpt-cuda" \
      checkpoint.ckpt_step=2
    compare "$work/cuda-resumed-cuda.jsonl" "$work/cuda-full.jsonl" 3 0
    echo "distopt_checkpoints: resumed on the GPU, bitwise the uninterrupted GPU run"
    for pair in "cuda cpu" "cpu cuda"; do
      read -r saved_on resumed_on <<<"$pair"
      run2 "$resumed_on-resumed-$saved_on" "$resumed_on" train.train_iters=3 \
        checkpoint.load="$work/ckpt-$saved_on" checkpoint.ckpt_step=2
      grep -q "resumed from" "$work/$resumed_on-resumed-$saved_on.log"
      compare "$work/$resumed_on-resumed-$saved_on.jsonl" "$work/$saved_on-full.jsonl" 3
      echo "distopt_checkpoints: saved on $saved_on, resumed on $resumed_on"
    done
    ;;
  sharded_checkpoints)
    # The same with checkpoint.sharded and checkpoint.async_save: each emulated GPU writes its
    # own shard from a host snapshot in the background; the GPU resumes its own checkpoint bit
    # for bit, and each device resumes the other's.
    mpiexec=${DYNCP_MPIEXEC:-mpirun}
    state=(ddp.use_distributed_optimizer=true optimizer.use_precision_aware_optimizer=true
           optimizer.exp_avg_dtype=bfloat16 optimizer.exp_avg_sq_dtype=bfloat16
           scheduler.lr_decay_iters=3 checkpoint.sharded=true checkpoint.async_save=true)
    run2() {  # run2 NAME DEVICE ARGS...: 2 ranks, metrics in $work/NAME.jsonl
      local name=$1 device=$2 binary=$cpu_train
      shift 2
      [[ $device == cuda ]] && binary=$gpu_train
      OPENBLAS_NUM_THREADS=1 "$mpiexec" -np 2 "$binary" --config "$recipe" "${one_rank[@]}" \
        "${state[@]}" dist.device="$device" logger.metrics_path="$work/$name.jsonl" "$@" \
        >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
    }
    # Each device's uninterrupted run saves at iteration 2 on its way to 3; the resumes load
    # that checkpoint (checkpoint.ckpt_step) and run step 3 again.
    for device in cpu cuda; do
      run2 "$device-full" "$device" train.train_iters=3 checkpoint.save="$work/ckpt-$device" \
        checkpoint.save_interval=2
    done
    compare "$work/cuda-full.jsonl" "$work/cpu-full.jsonl" 1
    for f in shards/rank_00000.bin shards/rank_00001.bin index.json; do
      [[ -s $work/ckpt-cuda/iter_0000002/$f ]] || { echo "sharded_checkpoints: no $f"; exit 1; }
    done
    grep -q '"format": 3' "$work/ckpt-cuda/iter_0000002/state.json"
    echo "sharded_checkpoints: each emulated GPU wrote its own shard in the background"
    run2 cuda-resumed-cuda cuda train.train_iters=3 checkpoint.load="$work/ckpt-cuda" \
      checkpoint.ckpt_step=2
    compare "$work/cuda-resumed-cuda.jsonl" "$work/cuda-full.jsonl" 3 0
    echo "sharded_checkpoints: resumed on the GPU, bitwise the uninterrupted GPU run"
    for pair in "cuda cpu" "cpu cuda"; do
      read -r saved_on resumed_on <<<"$pair"
      run2 "$resumed_on-resumed-$saved_on" "$resumed_on" train.train_iters=3 \
        checkpoint.load="$work/ckpt-$saved_on" checkpoint.ckpt_step=2
      grep -q "resumed from" "$work/$resumed_on-resumed-$saved_on.log"
      compare "$work/$resumed_on-resumed-$saved_on.jsonl" "$work/$saved_on-full.jsonl" 3
      echo "sharded_checkpoints: saved on $saved_on, resumed on $resumed_on"
    done
    ;;
  tensor_parallel_checkpoints)
    mpiexec=${DYNCP_MPIEXEC:-mpirun}
    tp2=(model.tensor_model_parallel_size=2 model.sequence_parallel=true scheduler.lr_decay_iters=3)
    gpu2() {  # gpu2 NAME ARGS...: 2 emulated GPUs at tp 2, metrics in $work/NAME.jsonl
      local name=$1
      shift
      OPENBLAS_NUM_THREADS=1 "$mpiexec" -np 2 "$gpu_train" --config "$recipe" "${one_rank[@]}" \
        "${tp2[@]}" dist.device=cuda logger.metrics_path="$work/$name.jsonl" "$@" \
        >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
    }
    for format in sharded single; do
      sharded=true
      [[ $format == single ]] && sharded=false
      # Saves at iteration 2 on its way to 3; the resumes run step 3 again.
      gpu2 "full-$format" train.train_iters=3 checkpoint.save="$work/ckpt-$format" \
        checkpoint.save_interval=2 checkpoint.sharded=$sharded checkpoint.async_save=$sharded
      gpu2 "gpu-resumed-$format" train.train_iters=3 checkpoint.load="$work/ckpt-$format" \
        checkpoint.ckpt_step=2 checkpoint.sharded=$sharded
      grep -q "resumed from" "$work/gpu-resumed-$format.log"
      compare "$work/gpu-resumed-$format.jsonl" "$work/full-$format.jsonl" 3 0
      run "$cpu_train" cpu train.train_iters=3 scheduler.lr_decay_iters=3 \
        checkpoint.load="$work/ckpt-$format" checkpoint.ckpt_step=2 \
        logger.metrics_path="$work/cpu-resumed-$format.jsonl" >"$work/cpu-$format.log" 2>&1 \
        || { cat "$work/cpu-$format.log"; exit 1; }
      grep -q "resumed from" "$work/cpu-$format.log"
      compare "$work/cpu-resumed-$format.jsonl" "$work/full-$format.jsonl" 3
      echo "tensor_parallel_checkpoints: $format, saved at tp 2 on 2 emulated GPUs: resumed there bit for bit, on the CPU at tp 1 to 1e-5"
    done
    grep -q '"format":2' "$work/ckpt-sharded/iter_0000002/index.json"
    ;;
  hybrid_two_ranks)
    mpiexec=${DYNCP_MPIEXEC:-mpirun}
    layout=(model.context_parallel_size=2 model.expert_model_parallel_size=2
            model.dynamic_context_parallel=true model.cp_comm_type=p2p
            model.max_seqlen_per_dp_cp_rank=48 model.seq_length=96
            model.moe_router_load_balancing_type=aux_loss train.global_batch_size=4
            train.train_iters=2
            dataset.mock_length_distribution="lognormal(min=16,max=96,mean=40,sigma=0.5)")
    for pair in "cpu $cpu_train" "cuda $gpu_train"; do
      read -r device binary <<<"$pair"
      OPENBLAS_NUM_THREADS=1 "$mpiexec" -np 2 "$binary" \
        --config "$source_dir/configs/smoke/tiny_hybrid_mock.yaml" "${layout[@]}" \
        dist.device="$device" logger.metrics_path="$work/$device.jsonl" >"$work/$device.log" 2>&1 \
        || { cat "$work/$device.log"; exit 1; }
    done
    grep -q "cp2:" "$work/cuda.log"  # a microbatch ran on a CP group of two
    compare "$work/cuda.jsonl" "$work/cpu.jsonl" 1
    echo "hybrid_two_ranks: the hybrid with DeltaNet state passing on 2 emulated GPUs equals the CPU run to 1e-5"
    ;;
  refusals)
    expect() {  # expect REGEX ARGS...: exit 2 and the message
      local pattern=$1
      shift
      set +e
      output=$(run "$gpu_train" cuda "$@" 2>&1)
      rc=$?
      set -e
      [[ $rc == 2 ]] || { echo "$output"; echo "exit $rc, expected 2"; exit 1; }
      grep -Eq -- "$pattern" <<<"$output" || { echo "$output"; echo "no /$pattern/"; exit 1; }
      echo "refused: $pattern"
    }
    DYNCP_EMULATED_GPUS=0 expect "dist.device: cuda: this binary has no CUDA backend or sees no GPU"
    ;;
  attention_backend)
    refused() {  # refused BINARY DEVICE REGEX ARGS...: exit 2 and the message
      local binary=$1 device=$2 pattern=$3
      shift 3
      set +e
      output=$(run "$binary" "$device" train.train_iters=1 "$@" 2>&1)
      rc=$?
      set -e
      [[ $rc == 2 ]] || { echo "$output"; echo "exit $rc, expected 2"; exit 1; }
      grep -Eq -- "$pattern" <<<"$output" || { echo "$output"; echo "no /$pattern/"; exit 1; }
      echo "refused: $pattern"
    }
    refused "$gpu_train" cuda "model.attention_backend.*fused: the emulated CUDA backend has no cuDNN" \
      mixed_precision=bf16_mixed model.attention_backend=fused
    refused "$gpu_train" cuda "model.attention_backend.*fused: cuDNN's fused attention takes bf16 operands" \
      model.attention_backend=fused
    refused "$cpu_train" cpu "model.attention_backend.*fused: cuDNN's fused attention runs on the GPU path only" \
      model.attention_backend=fused
    refused "$gpu_train" cuda "model.attention_backend.*unfused.*expected one of \[auto, flash, fused\]" \
      model.attention_backend=unfused
    for backend in auto flash; do
      run "$gpu_train" cuda train.train_iters=2 mixed_precision=bf16_mixed \
        model.attention_backend=$backend logger.metrics_path="$work/$backend.jsonl" \
        >"$work/$backend.log" 2>&1 || { cat "$work/$backend.log"; exit 1; }
      lines=$(grep -c "attention: " "$work/$backend.log" || true)
      [[ $lines == 1 ]] || { cat "$work/$backend.log"; echo "$lines attention lines, expected 1"; exit 1; }
      grep "attention: " "$work/$backend.log"
    done
    grep -q "attention: own flash kernel (model.attention_backend=auto: the emulated CUDA backend has no cuDNN)" "$work/auto.log"
    grep -q "attention: own flash kernel (model.attention_backend=flash)" "$work/flash.log"
    compare "$work/auto.jsonl" "$work/flash.jsonl" 1 0
    echo "attention_backend: fused refused three ways; auto takes our kernel on the emulated backend"
    ;;
  *)
    echo "unknown case $case_name" >&2
    exit 2
    ;;
esac
