#!/usr/bin/env bash
# The seed recipe (configs/qwen3_5_35b_a3b_dynamic_cp.yaml) on 8 emulated GPUs, at a tiny size:
# the same layout and features (Qwen3.5 hybrid, dynamic CP over dp 2 x cp 4 with groups of
# 1/2/4/8 ranks, EP 8, the aux loss, full recompute, folded alignment padding, chat data through
# the HF tokenizer, bf16_mixed, the distributed optimizer with bf16 moments), tiny widths. Every
# step's loss and gradient norm on the emulated GPU must track the same recipe on the CPU, the
# GPU run must have formed a group of 8 and saved its checkpoint. Both runs round the same
# operands to bf16 and differ only in accumulation order, which a bf16 rounding downstream can
# turn into one bf16 ulp (2^-8) in single elements: 1e-3 on the loss (a mean over tokens) and
# 1e-2 on the gradient norm; measured 5e-6 and 7e-5.
#   seed_recipe_gpu_test.sh DYNCP_TRAIN DYNCP_TRAIN_EMULATED SOURCE_DIR
set -euo pipefail
cpu_train=$1
gpu_train=$2
source_dir=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-seed-recipe.XXXXXX")
trap 'rm -rf "$work"' EXIT
mpiexec=${DYNCP_MPIEXEC:-mpirun}
demo=$source_dir/tests/fixtures/data/demo
tiny=(
  model.vocab_size=512 model.hidden_size=64 model.num_hidden_layers=4
  model.full_attention_interval=2 model.num_attention_heads=4 model.num_key_value_heads=2
  model.head_dim=32 model.linear_num_key_heads=2 model.linear_num_value_heads=4
  model.linear_key_head_dim=16 model.linear_value_head_dim=16 model.num_experts=8
  model.num_experts_per_tok=2 model.moe_intermediate_size=16
  model.shared_expert_intermediate_size=16 model.max_position_embeddings=4096
  # Groups of 1/2/4/8 ranks for sequences up to 32/64/128/256 tokens.
  model.seq_length=256 model.max_seqlen_per_dp_cp_rank=32
  dataset.data_path="$demo/train.jsonl" dataset.cache_dir="$work/cache" dataset.truncation=drop
  tokenizer.tokenizer_model="$demo/tokenizer" '~checkpoint.pretrained_checkpoint'
  train.global_batch_size=16 train.train_iters=3 scheduler.lr_warmup_iters=1
  scheduler.lr_decay_iters=3 checkpoint.save_interval=3
  optimizer.lr=1e-3
)
for device in cpu cuda; do
  binary=$cpu_train
  [[ $device == cuda ]] && binary=$gpu_train
  OPENBLAS_NUM_THREADS=1 "$mpiexec" -np 8 "$binary" \
    --config "$source_dir/configs/qwen3_5_35b_a3b_dynamic_cp.yaml" "${tiny[@]}" \
    dist.device=$device checkpoint.save="$work/ckpt-$device" \
    logger.metrics_path="$work/$device.jsonl" >"$work/$device.log" 2>&1 \
    || { cat "$work/$device.log"; exit 1; }
done
grep -q "device: emulated CUDA" "$work/cuda.log"
grep -q "checkpoint saved: $work/ckpt-cuda/iter_0000003" "$work/cuda.log"
grep -Eq "cp8:" "$work/cuda.log" || { cat "$work/cuda.log"; echo "no microbatch ran on 8 ranks"; exit 1; }
python3 - "$work/cuda.jsonl" "$work/cpu.jsonl" <<'PY'
import json, sys
gpu = [json.loads(l) for l in open(sys.argv[1])]
cpu = {r["iteration"]: r for r in map(json.loads, open(sys.argv[2]))}
assert len(gpu) == 3 and set(cpu) == {1, 2, 3}, (len(gpu), sorted(cpu))
for r in gpu:
    s = cpu[r["iteration"]]
    for key, tolerance in (("loss", 1e-3), ("grad_norm", 1e-2)):
        rel = abs(r[key] - s[key]) / max(abs(s[key]), 1e-30)
        print(f"iteration {r['iteration']} {key}: gpu {r[key]:.6g} cpu {s[key]:.6g} ({rel:.2e})")
        assert rel <= tolerance, (key, r[key], s[key])
PY
echo "seed recipe: 3 steps on 8 emulated GPUs track the CPU run"
