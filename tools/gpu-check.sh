#!/usr/bin/env bash
# The real-GPU check as one prepared command (docs/cuda.md section 5): on a machine with one GPU,
# CUDA 13 and NCCL, no package registry and none of the trainer's host libraries, in at most
# 8 minutes end to end:
#   1 build      the GPU-check build (cmake/GpuTestsOnly.cmake): dyncp-train with the CUDA
#                backend, tests/gpu and the GEMM anchor, against the host libraries of
#                out/gpu-prefix.tar.xz (tools/gpu-prefix.sh, made on a Debian machine)
#   2 tests/gpu  every test the GPU test binary holds (new kernels' tests join by being in it):
#                each kernel against its CPU op, NcclComm on one rank, and the whole model step
#                GPU vs CPU on the tiny Qwen3-MoE fixture in fp32 and bf16_mixed; the gated
#                delta rule's chunked kernels vs the CPU op vs the token-by-token kernels, with
#                the times of both kernel pairs (a line of the closing table); cuDNN's fused
#                attention against our kernel against the CPU op on both seed models' attention
#                shapes, with a timing line each (summary row "cudnn")
#   3 sanitizer  compute-sanitizer memcheck and racecheck over the attention tests
#   4 training   the tiny recipe for 50 steps on one rank, GPU against CPU: fp32 (steps 1-3 to
#                1e-5, every step to 1e-4) and bf16_mixed (every step within 2e-2 of CPU fp32
#                and 1e-2 of CPU bf16_mixed, docs/precision.md); GPU fp32 again with each
#                overlap key on (ddp.overlap_grad_reduce; with the distributed optimizer
#                overlap_grad_reduce + overlap_param_gather; the tiny hybrid with
#                model.moe_shared_expert_overlap): bitwise the same as off, median step times
#   5 bench      tools/bench/gpu_step.sh (Qwen3-30B-A3B-shaped layers, targets printed), with
#                model.attention_backend fused and flash
#   6 model      the modelled step's table (docs/step-model.md) against phase 5's measurements,
#                per op class (tools/bench/step_model_vs_measured.py): the calibration
# Multi-rank NCCL cannot run on one GPU: the emulated backend covers it (ctest -L cuda_emulated).
#
#   tools/gpu-check.sh                    # on the GPU machine, with out/gpu-prefix.tar.xz carried
#   DYNCP_GPU_CHECK_EMULATE=1 tools/gpu-check.sh
#       every phase against the emulated backend (dyncp-train-emulated, dyncp_gpu_tests_emulated,
#       bench_gemm_emulated) at tiny sizes, from a normal build folder (default build/): tests
#       the script itself on a machine without a GPU
# Settings (environment):
#   DYNCP_GPU_BUILD_DIR       build folder (build-gpu-check/; emulated: build/)
#   DYNCP_GPU_CHECK_NO_BUILD  1: use the binaries already built there (ctest)
#   DYNCP_GPU_CHECK_STEPS     training steps (50; emulated 6)
#   DYNCP_GPU_CHECK_SANITIZE  0: skip phase 3 (default 1 on a GPU)
#   DYNCP_GPU_CHECK_BENCH     0: skip phase 5
#   DYNCP_GPU_CHECK_BENCH_LAYERS, DYNCP_GPU_CHECK_BENCH_STEPS   gpu_step.sh's (4 and 4; emulated 2, 3)
#   DYNCP_GPU_PREFIX          an unpacked prefix to use instead of out/gpu-prefix.tar.xz
#   DYNCP_GPU_CHECK_ALLOW_SKIP=1  no GPU visible: build, then exit 0 instead of 3
# Log: $OUT/gpu-check.log when OUT is set, else BUILD_DIR/gpu-check.log; the phase table at the
# end gives each phase's time against its budget. Exit 0 only when every phase passed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
emulate=${DYNCP_GPU_CHECK_EMULATE:-0}
if [[ $emulate == 1 ]]; then
  build_dir=${DYNCP_GPU_BUILD_DIR:-$root/build}
  steps=${DYNCP_GPU_CHECK_STEPS:-6}
  sanitize=0
else
  build_dir=${DYNCP_GPU_BUILD_DIR:-$root/build-gpu-check}
  steps=${DYNCP_GPU_CHECK_STEPS:-50}
  sanitize=${DYNCP_GPU_CHECK_SANITIZE:-1}
fi
bench=${DYNCP_GPU_CHECK_BENCH:-1}
mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)
log=${OUT:+$OUT/gpu-check.log}
log=${log:-$build_dir/gpu-check.log}
mkdir -p "$(dirname "$log")"
exec > >(tee "$log") 2>&1
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS
phase_start=$SECONDS
summary=()
failed=0
phase() { echo "== $1 (at $((SECONDS - start)) s)"; phase_start=$SECONDS; }
# phase_end NAME BUDGET_S STATUS: one row of the closing table
phase_end() {
  local took=$((SECONDS - phase_start))
  # The budgets are the GPU machine's; emulated times are not held to them.
  summary+=("$(printf '  %-10s %-8s %4d s (budget %3d s)%s' "$1" "$3" "$took" "$2" \
               "$([[ $took -gt $2 && $emulate != 1 ]] && echo ' OVER')")")
  [[ $3 == passed || $3 == skipped ]] || failed=1
}
finish() {
  echo "== summary ($([[ $emulate == 1 ]] && echo emulated backend || echo GPU))"
  printf '%s\n' "${summary[@]}"
  local total=$((SECONDS - start))
  echo "  total      $total s of the 480 s budget$([[ $total -gt 480 && $emulate != 1 ]] && echo ': OVER')"
  echo "gpu-check: $([[ $failed == 0 ]] && echo passed || echo FAILED)"
  exit $((failed == 0 ? 0 : 1))
}

# ---- 1. environment and build -------------------------------------------------------------
phase "1 build"
if [[ $emulate == 1 ]]; then
  gpu_tests=$build_dir/tests/gpu/dyncp_gpu_tests_emulated
  train_gpu=$build_dir/apps/dyncp-train/dyncp-train-emulated
  gemm_bench=$build_dir/tools/bench/gpu/bench_gemm_emulated
  targets=(dyncp-train dyncp-train-emulated dyncp_gpu_tests_emulated bench_gemm_emulated)
  device_line="device: emulated CUDA device 0"
else
  gpu_tests=$build_dir/tests/gpu/dyncp_gpu_tests
  train_gpu=$build_dir/apps/dyncp-train/dyncp-train
  gemm_bench=$build_dir/tools/bench/gpu/bench_gemm
  targets=(dyncp-train dyncp_gpu_tests bench_gemm bench_model)
  device_line="device: CUDA device 0"
fi
train_cpu=$build_dir/apps/dyncp-train/dyncp-train

if [[ $emulate != 1 ]]; then
  # Host libraries: the carried prefix, unpacked once into the build folder.
  prefix=${DYNCP_GPU_PREFIX:-}
  if [[ -z $prefix ]]; then
    tarball=$root/out/gpu-prefix.tar.xz
    prefix=$build_dir/gpu-prefix
    if [[ ! -d $prefix/usr/include/spdlog ]]; then
      [[ -f $tarball ]] || { echo "gpu-check: no $tarball: run tools/gpu-prefix.sh on a Debian 12" \
                                  "machine and carry out/gpu-prefix.tar.xz (or set DYNCP_GPU_PREFIX)" >&2; exit 2; }
      tar -C "$build_dir" -xJf "$tarball"
    fi
  fi
  [[ -d $prefix/usr/include/spdlog ]] || { echo "gpu-check: $prefix is not a gpu-prefix" >&2; exit 2; }
  nvcc=$(command -v nvcc || true)
  [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
  [[ -n "$nvcc" ]] || { echo "gpu-check: nvcc not found (PATH or /usr/local/cuda/bin)" >&2; exit 2; }
  cuda_root=$(dirname "$(dirname "$nvcc")")
  # NCCL: the toolkit's, the system's, or the one inside Python's nvidia-nccl wheel.
  nccl_home=${NCCL_HOME:-}
  if [[ -z "$nccl_home" ]]; then
    for dir in "$cuda_root" /usr /usr/local; do
      if [[ -f "$dir/include/nccl.h" ]]; then nccl_home=$dir; break; fi
    done
  fi
  if [[ -z "$nccl_home" ]] && command -v python3 >/dev/null; then
    nccl_home=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  fi
  [[ -n "$nccl_home" ]] || { echo "gpu-check: nccl.h not found; set NCCL_HOME" >&2; exit 2; }
  export NCCL_HOME=$nccl_home
  # cuDNN (fused attention): the toolkit's, or the one in Python's nvidia-cudnn wheel (its
  # libcudnn.so.9 is found by that name; cudnn-frontend's headers travel in the prefix).
  if [[ -z ${CUDNN_HOME:-} && ! -f $cuda_root/include/cudnn.h ]] && command -v python3 >/dev/null; then
    for module in nvidia.cudnn nvidia.cu13; do
      dir=$(python3 -c "import $module as m; print(list(m.__path__)[0])" 2>/dev/null || true)
      if [[ -n $dir && -f $dir/include/cudnn.h ]]; then export CUDNN_HOME=$dir; break; fi
    done
  fi
  if [[ -n ${CUDNN_HOME:-} ]]; then
    export LD_LIBRARY_PATH=$CUDNN_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "cuDNN from $CUDNN_HOME"
  fi
  # cuBLAS(Lt): normally in the toolkit; otherwise Python's nvidia-cublas wheel, which ships
  # only versioned libraries, so link names are made for it in the build folder.
  extra_flags=() shim=$build_dir/shim
  if [[ ! -f "$cuda_root/include/cublasLt.h" ]] && command -v python3 >/dev/null; then
    cublas_home=$(python3 -c 'import nvidia.cublas as m; print(list(m.__path__)[0])' 2>/dev/null || true)
    if [[ -n "$cublas_home" && -f "$cublas_home/include/cublasLt.h" ]]; then
      mkdir -p "$shim"
      for lib in "$cublas_home"/lib/libcublas*.so.* "$NCCL_HOME"/lib/libnccl.so.*; do
        if [[ -e "$lib" ]]; then ln -sfn "$lib" "$shim/$(basename "${lib%%.so.*}").so"; fi
      done
      extra_flags=(-DCMAKE_CXX_FLAGS="-I$cublas_home/include" -DCMAKE_CUDA_FLAGS="-I$cublas_home/include"
                   -DCMAKE_LIBRARY_PATH="$shim;$NCCL_HOME/lib")
      export LD_LIBRARY_PATH=$cublas_home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      echo "cuBLAS from $cublas_home"
    fi
  fi
  "$nvcc" --version | tail -2
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  echo "NCCL_HOME=$NCCL_HOME prefix=$prefix ($(du -sh "$prefix" | cut -f1))"
  multiarch=$prefix/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$multiarch:$multiarch/openblas-pthread:$multiarch/openmpi/lib:$NCCL_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # One rank as an Open MPI singleton from the relocated prefix: no mpirun, no daemon, shared
  # memory and self transports only.
  export OPAL_PREFIX=$prefix/usr OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_pml=ob1
  export OMPI_MCA_btl=self,vader OMPI_MCA_osc=^ucx OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export PMIX_INSTALL_PREFIX=$prefix/usr
fi
cmake --version | head -1
if [[ ${DYNCP_GPU_CHECK_NO_BUILD:-0} == 1 ]]; then
  echo "build: skipped (DYNCP_GPU_CHECK_NO_BUILD=1): using the binaries in $build_dir"
  build_status=skipped
else
  build_status=passed
  generator=()
  command -v ninja >/dev/null && [[ ! -f $build_dir/Makefile ]] && generator=(-G Ninja)
  if [[ $emulate != 1 ]]; then
    # CMAKE_POLICY_VERSION_MINIMUM: a CMake 4 (PyPI's) still reads the Debian packages' CMake
    # files, which name policies of CMake 2.8 to 3.22.
    cmake -S "$root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DDYNCP_GPU_TESTS_ONLY=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
      -DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_LIBRARY_PATH="$NCCL_HOME/lib" "${extra_flags[@]}" \
      >"$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log"; build_status=FAILED; }
    grep -E '^-- dyncp' "$build_dir/configure.log" || true
  elif [[ ! -f $build_dir/CMakeCache.txt ]]; then
    cmake -S "$root" -B "$build_dir" "${generator[@]}" -DDYNCP_TESTS=ON >"$build_dir/configure.log" 2>&1 \
      || { cat "$build_dir/configure.log"; build_status=FAILED; }
  fi
  if [[ $build_status == passed ]]; then
    cmake --build "$build_dir" --target "${targets[@]}" --parallel "${DYNCP_BUILD_JOBS:-$(nproc)}" \
      || build_status=FAILED
  fi
fi
for binary in "$gpu_tests" "$train_gpu" "$train_cpu" "$gemm_bench"; do
  [[ -x $binary ]] || { echo "gpu-check: $binary was not built"; build_status=FAILED; }
done
phase_end build 180 "$build_status"
[[ $build_status == FAILED ]] && finish
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8}

# ---- 2. tests/gpu ---------------------------------------------------------------------------
phase "2 tests/gpu: $(basename "$gpu_tests"), every test it holds"
set +e
# The emulated suite runs every kernel on the CPU's fibers (about 55 CPU-s, 150 s wall on two
# loaded cores): its cap is wider than the GPU's.
timeout "$([[ $emulate == 1 ]] && echo 420 || echo 180)" "$gpu_tests" >"$work/gpu-tests.log" 2>&1
rc=$?
set -e
cat "$work/gpu-tests.log"
if [[ $rc -eq 77 ]]; then
  phase_end tests/gpu 30 "no-GPU"
  echo "gpu-check: no GPU visible, tests skipped"
  [[ ${DYNCP_GPU_CHECK_ALLOW_SKIP:-0} == 1 ]] && { echo "gpu-check: build checked only"; exit 0; }
  exit 3
fi
status=passed
[[ $rc -eq 0 ]] || status=FAILED
# The model step GPU vs CPU must be among them (fp32 and bf16_mixed), and the gated delta rule's
# chunked kernels against the CPU op and against the token-by-token reference kernels, whose
# test times both (on a GPU at Qwen3.5-35B-A3B's heads and 8,192 tokens).
for name in model_step_matches_cpu_fp32 model_step_bf16_matches_cpu_bf16 \
            gated_delta_rule_chunked_qwen35_heads gated_delta_rule_chunked_long_sequence \
            gated_delta_rule_chunked_vs_token_kernels hybrid_model_step_matches_cpu_fp32 \
            hybrid_model_step_token_reference_matches_cpu_fp32; do
  grep -q "^\[$name\] passed" "$work/gpu-tests.log" || { echo "gpu-check: $name did not pass"; status=FAILED; }
done
gdn_timing=$(grep -m1 '^gated delta rule timing' "$work/gpu-tests.log" || true)
[[ -n $gdn_timing ]] || { echo "gpu-check: the gated delta rule timing was not printed"; status=FAILED; }
phase_end tests/gpu 30 "$status"
summary+=("  ${gdn_timing:-gated delta rule timing: missing}")
# cuDNN's fused attention: its tests ran in phase 2 when the build found cuDNN and
# cudnn-frontend (the configure line says which); their pass lines and timings again here.
if [[ $emulate == 1 ]]; then
  echo "cudnn: the emulated backend has no cuDNN (gpu_e2e:attention_backend checks the refusal)"
  summary+=("$(printf '  %-10s %-8s' cudnn skipped)")
else
  status=passed
  grep -E '^-- dyncp: fused attention' "$build_dir/configure.log" 2>/dev/null || true
  for name in fused_sdpa_qwen3_30b_a3b_shape fused_sdpa_qwen3_5_35b_a3b_shape; do
    grep -q "^\[$name\] passed" "$work/gpu-tests.log" || { echo "gpu-check: $name did not pass (or was not built)"; status=FAILED; }
  done
  grep -E "timing |cuDNN rejects" "$work/gpu-tests.log" || true
  summary+=("$(printf '  %-10s %-8s (in phase 2)' cudnn "$status")")
  [[ $status == passed ]] || failed=1
fi

# ---- 3. compute-sanitizer over the attention kernels -----------------------------------------
phase "3 compute-sanitizer (attention tests)"
if [[ $sanitize != 1 ]]; then
  if [[ $emulate == 1 ]]; then
    echo "sanitizer: a GPU tool; in emulation phase 2 already ran the attention kernels under the" \
         "emulator's checks (device memory unreadable by the host, NaN-filled shared memory," \
         "barrier hangs reported)"
  else
    echo "sanitizer: skipped (DYNCP_GPU_CHECK_SANITIZE=0)"
  fi
  phase_end sanitizer 90 skipped
else
  sanitizer=$(command -v compute-sanitizer || echo "$cuda_root/bin/compute-sanitizer")
  status=passed
  for tool in memcheck racecheck; do
    set +e
    timeout 120 "$sanitizer" --tool "$tool" --error-exitcode 9 "$gpu_tests" attention \
      >"$work/sanitizer-$tool.log" 2>&1
    rc=$?
    set -e
    if [[ $rc -eq 0 ]]; then
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|GPU tests passed" "$work/sanitizer-$tool.log" || true
    elif [[ $rc -eq 124 ]]; then
      tail -5 "$work/sanitizer-$tool.log"
      echo "gpu-check: compute-sanitizer $tool timed out after 120 s: the attention kernels are not checked"
      status=TIMEOUT
    else
      tail -40 "$work/sanitizer-$tool.log"
      echo "gpu-check: compute-sanitizer $tool failed (exit $rc; 9: it reported errors)"
      status=FAILED
    fi
  done
  phase_end sanitizer 90 "$status"
fi

# ---- 4. training: GPU against CPU, fp32 and bf16_mixed ---------------------------------------
phase "4 training: $steps steps of the tiny recipe on one rank, GPU vs CPU"
# Learnable token data (each sample counts up from a random start in a random stride, modulo
# the vocabulary), so the loss falls and the runs are compared on real training dynamics.
python3 - "$work/tokens.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
with open(sys.argv[1], "w") as out:
    for _ in range(256):
        start, stride, length = rng.randrange(512), rng.choice([1, 2, 3, 5]), rng.randrange(12, 29)
        out.write(json.dumps({"input_ids": [(start + stride * i) % 512 for i in range(length)]}) + "\n")
PY
tiny=(--config "$root/configs/smoke/tiny_mock.yaml" model.context_parallel_size=1
      model.expert_model_parallel_size=1 model.dynamic_context_parallel=false model.seq_length=64
      model.max_seqlen_per_dp_cp_rank=64 model.head_dim=16 model.moe_router_load_balancing_type=none
      train.global_batch_size=2 dataset.type=token_jsonl dataset.data_path="$work/tokens.jsonl"
      dataset.cache_dir="$work/cache" optimizer.lr=3e-3 scheduler.lr_warmup_iters=2
      logger.log_interval=10 train.train_iters="$steps" scheduler.lr_decay_iters="$steps")
# The tiny hybrid (Gated DeltaNet, a shared expert) on the same data, one rank.
hybrid=(--config "$root/configs/smoke/tiny_hybrid_mock.yaml" model.context_parallel_size=1
        model.expert_model_parallel_size=1 model.dynamic_context_parallel=false model.seq_length=64
        model.max_seqlen_per_dp_cp_rank=64 train.global_batch_size=2 dataset.type=token_jsonl
        dataset.data_path="$work/tokens.jsonl" dataset.cache_dir="$work/cache-hybrid"
        logger.log_interval=10 train.train_iters="$steps" scheduler.lr_decay_iters="$steps")
status=passed
# The last runs: GPU fp32 again with each overlap key off and on (small buckets): the same bits,
# and the step time with the keys on against off (docs/dist.md; one rank runs no collective, so
# this measures what the keys cost there; the multi-rank proof is the emulated one).
overlap_keys=(ddp.overlap_grad_reduce=true ddp.bucket_size=4096)
for run in "cpu fp32" "cuda fp32" "cpu bf16_mixed" "cuda bf16_mixed" "cuda fp32 overlap" \
    "cuda fp32 distopt" "cuda fp32 distopt-overlap" "cuda fp32 hybrid" "cuda fp32 hybrid-overlap"; do
  read -r device precision variant <<<"$run"
  binary=$train_cpu
  [[ $device == cuda ]] && binary=$train_gpu
  name=$device-$precision${variant:+-$variant}
  recipe=("${tiny[@]}")
  extra=()
  case $variant in
    overlap) extra=("${overlap_keys[@]}") ;;
    distopt) extra=(ddp.use_distributed_optimizer=true) ;;
    distopt-overlap)
      extra=(ddp.use_distributed_optimizer=true "${overlap_keys[@]}" ddp.overlap_param_gather=true) ;;
    hybrid) recipe=("${hybrid[@]}") ;;
    hybrid-overlap) recipe=("${hybrid[@]}"); extra=(model.moe_shared_expert_overlap=true) ;;
  esac
  run_start=$SECONDS
  if OPENBLAS_NUM_THREADS=1 timeout 240 "$binary" "${recipe[@]}" dist.device="$device" \
      mixed_precision="$precision" "${extra[@]}" logger.metrics_path="$work/$name.jsonl" \
      >"$work/$name.log" 2>&1; then
    echo "$name: $steps steps in $((SECONDS - run_start)) s"
  else
    tail -30 "$work/$name.log"
    echo "gpu-check: the $name run failed"
    status=FAILED
  fi
  if [[ $device == cuda ]] && ! grep -q "$device_line" "$work/$name.log"; then
    echo "gpu-check: the $name run did not report '$device_line'"
    status=FAILED
  fi
done
if [[ $status == passed ]]; then
  python3 - "$work" <<'PY' || status=FAILED
import json, sys
work = sys.argv[1]
def rows(name):
    return {r["iteration"]: r for r in map(json.loads, open(f"{work}/{name}.jsonl"))}
def compare(a_name, b_name, tolerance, first_steps=None, key="loss"):
    a, b = rows(a_name), rows(b_name)
    common = sorted(set(a) & set(b))
    assert common, f"{a_name} and {b_name} share no iteration"
    if first_steps:
        common = common[:first_steps]
    worst = max(abs(a[i][key] - b[i][key]) / abs(b[i][key]) for i in common)
    verdict = "ok" if worst <= tolerance else "FAILED"
    print(f"  {a_name} vs {b_name}, {key}, steps {common[0]}-{common[-1]}: worst relative "
          f"difference {worst:.2e} (bound {tolerance:g}) {verdict}")
    return worst <= tolerance, worst
checks = [
    # fp32: the per-step tolerance of the GPU step (docs/cuda.md, gpu_e2e:matches_cpu) while
    # the weights are still nearly equal, then the curve.
    compare("cuda-fp32", "cpu-fp32", 1e-5, first_steps=3),
    compare("cuda-fp32", "cpu-fp32", 1e-5, first_steps=3, key="grad_norm"),
    compare("cuda-fp32", "cpu-fp32", 1e-4),
    # bf16_mixed: docs/precision.md's training-curve bound against fp32 and the GPU-vs-CPU bf16
    # bound (accumulation order, the attention kernel's bf16 P and dS).
    compare("cuda-bf16_mixed", "cpu-fp32", 2e-2),
    compare("cuda-bf16_mixed", "cpu-bf16_mixed", 1e-2),
]
# The overlap keys change no bit: each on-run against its off-run.
overlap_pairs = [("cuda-fp32-overlap", "cuda-fp32", "ddp.overlap_grad_reduce"),
                 ("cuda-fp32-distopt-overlap", "cuda-fp32-distopt",
                  "ddp.overlap_grad_reduce + overlap_param_gather (distributed optimizer)"),
                 ("cuda-fp32-hybrid-overlap", "cuda-fp32-hybrid", "model.moe_shared_expert_overlap")]
for on_name, off_name, _ in overlap_pairs:
    checks.append(compare(on_name, off_name, 0.0))
    checks.append(compare(on_name, off_name, 0.0, key="grad_norm"))
def median_step_ms(name):
    kept = rows(name)
    times = sorted(r["elapsed_ms"] for i, r in kept.items() if i > 1 or len(kept) == 1)
    return times[len(times) // 2] if times else float("nan")
for on_name, off_name, keys in overlap_pairs:
    on, off = median_step_ms(on_name), median_step_ms(off_name)
    print(f"  step with {keys} on / off: median {on:.2f} / {off:.2f} ms "
          f"({on / off:.2f}x; one rank: no collective to hide)")
cpu = rows("cpu-fp32")
print(f"  loss {cpu[min(cpu)]['loss']:.4f} -> {cpu[max(cpu)]['loss']:.4f} over {len(cpu)} CPU fp32 steps")
ok = all(c[0] for c in checks)
if checks[3][1] == 0:
    print("  bf16_mixed gave exactly the fp32 losses on the GPU: the precision had no effect")
    ok = False
sys.exit(0 if ok else 1)
PY
fi
phase_end training 80 "$status"

# ---- 5. step benchmark ------------------------------------------------------------------------
phase "5 step benchmark: tools/bench/gpu_step.sh"
if [[ $bench != 1 ]]; then
  echo "bench: skipped (DYNCP_GPU_CHECK_BENCH=0)"
  phase_end bench 120 skipped
else
  status=passed
  bench_layers=${DYNCP_GPU_CHECK_BENCH_LAYERS:-$([[ $emulate == 1 ]] && echo 2 || echo 4)}
  bench_steps=${DYNCP_GPU_CHECK_BENCH_STEPS:-$([[ $emulate == 1 ]] && echo 3 || echo 4)}
  DYNCP_BENCH_EMULATE=$emulate DYNCP_BENCH_KEEP=$work/bench timeout 300 \
    "$root/tools/bench/gpu_step.sh" "$build_dir" "$bench_layers" "$bench_steps" \
    || { echo "gpu-check: the step benchmark failed"; status=FAILED; }
  phase_end bench 120 "$status"
fi

# ---- 6. modelled against measured -------------------------------------------------------------
phase "6 modelled vs measured, per op class"
if [[ $bench != 1 || ! -f $work/bench/results.jsonl ]]; then
  echo "model: skipped (no step benchmark results)"
  phase_end model 10 skipped
else
  status=passed
  python3 "$root/tools/bench/step_model_vs_measured.py" "$work/bench/results.jsonl" \
    "$work"/bench/dry-run-*.txt || { echo "gpu-check: modelled vs measured incomplete"; status=FAILED; }
  phase_end model 10 "$status"
fi
finish
