#include "ops/cuda/cudnn_attention_ops.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ops/attention_backend.hpp"
#include "ops/attention_blocks.hpp"
#include "ops/cuda/cuda_backend.hpp"

#ifdef DYNCP_HAVE_CUDNN
#include "attention.hpp"
#include "cudnn_attention.hpp"
#include "ops.hpp"
#include "ops/cuda/cuda_op_args.hpp"
#endif

namespace dyncp::ops::cuda {

#ifdef DYNCP_HAVE_CUDNN
namespace {

using core::DType;
using kernels::bf16;

class CudnnFusedAttention final : public FusedAttention {
 public:
  std::string name() const override { return kernels::cudnn_attention_library(); }
  std::string unsupported_reason(const AttentionProblem& problem) const override {
    kernels::CudnnAttentionDims dims;
    dims.q_heads = problem.q_heads;
    dims.kv_heads = problem.kv_heads;
    dims.head_dim = problem.head_dim;
    dims.scale = 1.0f / std::sqrt(static_cast<float>(std::max(problem.head_dim, 1)));
    return kernels::cudnn_attention_unsupported(dims, problem.sliding_window);
  }
};

bf16* bf16_copy(core::Arena& scratch, const Tensor& t, cudaStream_t stream) {
  const Tensor copy = scratch.allocate(t.shape(), DType::bf16);
  kernels::convert_f32_to_bf16(f32(t), static_cast<bf16*>(copy.raw_data()), t.numel(), stream);
  return static_cast<bf16*>(copy.raw_data());
}

bf16* bf16_zeros(core::Arena& scratch, const Shape& shape) {
  const Tensor t = scratch.allocate(shape, DType::bf16);
  t.fill_zero();
  return static_cast<bf16*>(t.raw_data());
}

// The layout with its positions on the host (the planner's input).
VarlenAttentionLayout host_layout(core::Arena& host, const VarlenAttentionLayout& layout) {
  VarlenAttentionLayout out = layout;
  for (Tensor* t : {&out.q_positions, &out.kv_positions}) {
    if (t->device() == Device::cpu) continue;
    const Tensor copy = host.allocate(t->shape(), DType::i32);
    copy.copy_from(*t);
    core::device_traffic().device_to_host_bytes += copy.numel() * 4;
    *t = copy;
  }
  return out;
}

std::int32_t bucket(std::int32_t n, std::int32_t least) {
  return static_cast<std::int32_t>(std::bit_ceil(static_cast<std::uint32_t>(std::max(n, least))));
}

// One block call's device arrays (lengths and ragged offsets), in one upload.
kernels::CudnnAttentionCall upload_call(core::Arena& scratch, const AttentionBlockCall& call,
                                        std::int64_t q_tokens, std::int64_t kv_tokens,
                                        std::int64_t hq, std::int64_t hkv, std::int64_t d) {
  if (q_tokens * hq * d > INT_MAX || kv_tokens * hkv * d > INT_MAX) {
    core::throw_runtime_error("cuDNN attention: a bin of more than 2^31 elements per tensor");
  }
  std::vector<AttentionBlock> blocks = call.blocks;
  std::sort(blocks.begin(), blocks.end(),
            [](const auto& a, const auto& b) { return a.q_row < b.q_row; });
  const std::int32_t batch = bucket(static_cast<std::int32_t>(blocks.size()), 1);
  // [q_rows | kv_rows | q_offsets | kv_offsets | stats_offsets]
  std::vector<std::int32_t> host(static_cast<std::size_t>(5 * batch + 3), 0);
  std::int32_t* q_rows = host.data();
  std::int32_t* kv_rows = q_rows + batch;
  std::int32_t* q_off = kv_rows + batch;
  std::int32_t* kv_off = q_off + batch + 1;
  std::int32_t* stats_off = kv_off + batch + 1;
  for (std::int32_t b = 0; b <= batch; ++b) {
    const bool real = b < static_cast<std::int32_t>(blocks.size());
    const std::int64_t q_row = real ? blocks[b].q_row : q_tokens;
    const std::int64_t kv_row = real ? blocks[b].kv_row : kv_tokens;
    if (b < batch) {
      q_rows[b] = real ? blocks[b].q_rows : 0;
      kv_rows[b] = real ? blocks[b].kv_rows : 0;
    }
    q_off[b] = static_cast<std::int32_t>(q_row * hq * d);
    kv_off[b] = static_cast<std::int32_t>(kv_row * hkv * d);
    stats_off[b] = static_cast<std::int32_t>(q_row * hq);
  }
  const Tensor device = scratch.allocate({static_cast<std::int64_t>(host.size())}, DType::i32);
  DYNCP_CUDA_CHECK(
      cudaMemcpy(device.raw_data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  core::device_traffic().host_to_device_bytes += host.size() * 4;
  const std::int32_t* base = device.data<std::int32_t>();
  kernels::CudnnAttentionCall out;
  out.causal = call.mask == AttentionBlockMask::causal;
  out.left_bound = call.left_bound;
  out.batch = batch;
  out.max_q_rows = bucket(call.max_q_rows, 64);
  out.max_kv_rows = bucket(call.max_kv_rows, 64);
  out.total_q_rows = bucket(static_cast<std::int32_t>(q_tokens), 64);
  out.total_kv_rows = bucket(static_cast<std::int32_t>(kv_tokens), 64);
  out.q_rows = base;
  out.kv_rows = base + batch;
  out.q_offsets = base + 2 * batch;
  out.kv_offsets = base + 3 * batch + 1;
  out.stats_offsets = base + 4 * batch + 2;
  return out;
}

kernels::CudnnAttentionDims dims_of(const Tensor& q, const Tensor& k, double scale) {
  kernels::CudnnAttentionDims dims;
  dims.q_heads = static_cast<int>(q.size(1));
  dims.kv_heads = static_cast<int>(k.size(1));
  dims.head_dim = static_cast<int>(q.size(2));
  dims.scale = static_cast<float>(scale);
  return dims;
}

core::Arena& host_arena() {
  static core::Arena* arena = new core::Arena("cudnn-attention-host", 1 << 20);
  return *arena;
}

}  // namespace

void install_cudnn_attention() {
  static CudnnFusedAttention fused;
  install_fused_attention(&fused);
}

void cudnn_attention_forward(core::Arena& scratch, cudaStream_t stream, const Tensor& q,
                             const Tensor& k, const Tensor& v, const VarlenAttentionLayout& layout,
                             double scale, const Tensor& out, const Tensor& lse) {
  core::ArenaScope host_scope(host_arena());
  const AttentionBlockPlan plan =
      plan_attention_blocks(host_layout(host_arena(), layout), /*disjoint_keys=*/false);
  const kernels::CudnnAttentionDims dims = dims_of(q, k, scale);
  const std::int64_t tq = q.size(0), tk = k.size(0), hq = dims.q_heads, hkv = dims.kv_heads,
                     d = dims.head_dim;
  const bf16* q16 = bf16_copy(scratch, q, stream);
  const bf16* k16 = bf16_copy(scratch, k, stream);
  const bf16* v16 = bf16_copy(scratch, v, stream);
  const float minus_inf = -std::numeric_limits<float>::infinity();
  kernels::fill_f32(f32(lse), lse.numel(), minus_inf, stream);
  if (!plan.merges) {
    // Every query row is in at most one call: each writes its rows straight into lse and
    // into one bf16 output (zero where no block covers a row).
    bf16* o16 = bf16_zeros(scratch, out.shape());
    for (const AttentionBlockCall& call : plan.calls) {
      const auto c = upload_call(scratch, call, tq, tk, hq, hkv, d);
      kernels::cudnn_attention_forward(dims, c, q16, k16, v16, o16, f32(lse), stream);
    }
    kernels::convert_bf16_to_f32(o16, f32(out), out.numel(), stream);
    return;
  }
  out.fill_zero();
  const Tensor part = scratch.allocate(out.shape(), DType::f32);
  const Tensor part_lse = scratch.allocate(lse.shape(), DType::f32);
  bf16* o16 = static_cast<bf16*>(scratch.allocate(out.shape(), DType::bf16).raw_data());
  for (const AttentionBlockCall& call : plan.calls) {
    const auto c = upload_call(scratch, call, tq, tk, hq, hkv, d);
    DYNCP_CUDA_CHECK(cudaMemsetAsync(o16, 0, out.numel() * sizeof(bf16), stream));
    kernels::fill_f32(f32(part_lse), part_lse.numel(), minus_inf, stream);
    kernels::cudnn_attention_forward(dims, c, q16, k16, v16, o16, f32(part_lse), stream);
    kernels::convert_bf16_to_f32(o16, f32(part), part.numel(), stream);
    kernels::attention_merge_f32(f32(out), f32(lse), f32(part), f32(part_lse), lse.numel(), d,
                                 stream);
  }
}

void cudnn_attention_backward(core::Arena& scratch, cudaStream_t stream, const Tensor& dout,
                              const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const VarlenAttentionLayout& layout, double scale,
                              const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  core::ArenaScope host_scope(host_arena());
  const AttentionBlockPlan plan =
      plan_attention_blocks(host_layout(host_arena(), layout), /*disjoint_keys=*/true);
  const kernels::CudnnAttentionDims dims = dims_of(q, k, scale);
  const std::int64_t tq = q.size(0), tk = k.size(0), hq = dims.q_heads, hkv = dims.kv_heads,
                     d = dims.head_dim;
  const bf16* q16 = bf16_copy(scratch, q, stream);
  const bf16* k16 = bf16_copy(scratch, k, stream);
  const bf16* v16 = bf16_copy(scratch, v, stream);
  const bf16* o16 = bf16_copy(scratch, out, stream);
  const bf16* do16 = bf16_copy(scratch, dout, stream);
  bf16* dq16 = static_cast<bf16*>(scratch.allocate(dq.shape(), DType::bf16).raw_data());
  bf16* dk16 = static_cast<bf16*>(scratch.allocate(dk.shape(), DType::bf16).raw_data());
  bf16* dv16 = static_cast<bf16*>(scratch.allocate(dv.shape(), DType::bf16).raw_data());
  for (const AttentionBlockCall& call : plan.calls) {
    const auto c = upload_call(scratch, call, tq, tk, hq, hkv, d);
    DYNCP_CUDA_CHECK(cudaMemsetAsync(dq16, 0, dq.numel() * sizeof(bf16), stream));
    DYNCP_CUDA_CHECK(cudaMemsetAsync(dk16, 0, dk.numel() * sizeof(bf16), stream));
    DYNCP_CUDA_CHECK(cudaMemsetAsync(dv16, 0, dv.numel() * sizeof(bf16), stream));
    kernels::cudnn_attention_backward(dims, c, q16, k16, v16, o16, do16, f32(lse), dq16, dk16, dv16,
                                      stream);
    kernels::add_bf16_to_f32(dq16, f32(dq), dq.numel(), stream);
    kernels::add_bf16_to_f32(dk16, f32(dk), dk.numel(), stream);
    kernels::add_bf16_to_f32(dv16, f32(dv), dv.numel(), stream);
  }
}

#else  // no cuDNN in this build

void install_cudnn_attention() {
#ifdef DYNCP_CUDA_EMULATION
  set_fused_attention_absence("the emulated CUDA backend has no cuDNN");
#else
  set_fused_attention_absence(
      "this binary was built without cuDNN's fused attention (CMake found no cuDNN or no "
      "cudnn-frontend headers: run tools/install-deps.sh with network access and rebuild)");
#endif
}

void cudnn_attention_forward(core::Arena&, cudaStream_t, const Tensor&, const Tensor&,
                             const Tensor&, const VarlenAttentionLayout&, double, const Tensor&,
                             const Tensor&) {
  core::throw_runtime_error("attention_forward: no cuDNN fused attention in this build");
}

void cudnn_attention_backward(core::Arena&, cudaStream_t, const Tensor&, const Tensor&,
                              const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const VarlenAttentionLayout&, double, const Tensor&, const Tensor&,
                              const Tensor&) {
  core::throw_runtime_error("attention_backward: no cuDNN fused attention in this build");
}

#endif

}  // namespace dyncp::ops::cuda
