// ops::DeviceOps on kernels/: each method turns tensors into the kernel's raw arguments.
// Arguments arrive checked by the entry points (shapes, dtypes, devices); what is left here
// is what only the device can check (ids and labels, flagged by the kernels and raised as the
// CPU op raises them) and the few host values the kernels need.
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "attention.hpp"
#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "cross_entropy.hpp"
#include "cuda_check.hpp"
#include "device_info.hpp"
#include "gemm.hpp"
#include "grouped_gemm.hpp"
#include "hybrid.hpp"
#include "moe_dispatch.hpp"
#include "ops.hpp"
#include "ops/attention_backend.hpp"
#include "ops/cuda/cuda_backend.hpp"
#include "ops/cuda/cuda_device_memory.hpp"
#include "ops/cuda/cuda_hybrid_ops.hpp"
#include "ops/cuda/cuda_op_args.hpp"
#include "ops/cuda/cuda_vocab_shard_ops.hpp"
#include "ops/cuda/cudnn_attention_ops.hpp"
#include "ops/device_ops.hpp"

namespace dyncp::ops::cuda {
namespace {

using core::DType;

// The group offsets of a host i32 cu_seqlens tensor, uploaded for the kernels.
const std::int32_t* upload(core::Arena& scratch, const Tensor& host) {
  const Tensor device = scratch.allocate(host.shape(), host.dtype());
  device.copy_from(host);
  return device.data<std::int32_t>();
}

using kernels::bf16;

// An fp32 copy holding the bf16-rounded values of `t` (operands of an fp32 kernel that stands in
// for a bf16 one the shape does not fit).
const float* bf16_rounded(core::Arena& scratch, const Tensor& t, cudaStream_t stream) {
  const Tensor copy = scratch.allocate(t.shape(), DType::f32);
  kernels::convert_bf16_to_f32(to_bf16(scratch, t, stream), f32(copy), t.numel(), stream);
  return f32(copy);
}

// The bf16 attention kernel's head sizes (kernels/attention_tile.cuh).
bool bf16_attention_fits(std::int64_t head_dim) {
  return head_dim > 0 && head_dim % 16 == 0 && head_dim <= 256;
}

int max_rows(const Tensor& cu) {
  const std::int32_t* v = cu.data<std::int32_t>();
  int most = 0;
  for (std::int64_t s = 0; s + 1 < cu.size(0); ++s) most = std::max(most, v[s + 1] - v[s]);
  return most;
}

class CudaOps final : public CudaVocabShardOps {
 public:
  void embedding_forward(const OpContext& ctx, const Tensor& token_ids, const Tensor& table,
                         const Tensor& out) override {
    core::Arena& scratch = scratch_of(ctx, "embedding_forward");
    core::ArenaScope temporaries(scratch);
    std::int32_t* bad = device_scalar<std::int32_t>(scratch, INT32_MAX);
    kernels::embedding_forward(i32(token_ids), f32(table), f32(out), token_ids.size(0),
                               table.size(0), table.size(1), bad, stream_of(ctx));
    const std::int32_t first_bad = read_back(bad);
    if (first_bad != INT32_MAX) {
      core::throw_data_error("token " + std::to_string(first_bad),
                             "embedding_forward: a token id is outside the vocabulary [0, " +
                                 std::to_string(table.size(0)) +
                                 "); check the tokenizer matches the model's vocab_size");
    }
  }

  void embedding_backward(const OpContext& ctx, const Tensor& token_ids, const Tensor& dout,
                          const Tensor& dtable, std::int64_t padding_idx) override {
    kernels::embedding_backward(i32(token_ids), f32(dout), f32(dtable), token_ids.size(0),
                                dtable.size(0), dtable.size(1), padding_idx, stream_of(ctx));
  }

  void rmsnorm_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight, double eps,
                       RmsNormVariant variant, const Tensor& y, RmsNormSaved& saved) override {
    const std::int64_t n = x.shape().last();
    kernels::rmsnorm_forward(f32(x), f32(weight), f32(y), f32(saved.inv_rms), x.numel() / n, n,
                             static_cast<float>(eps), variant == RmsNormVariant::one_plus_weight,
                             stream_of(ctx));
  }

  void rmsnorm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                        const Tensor& weight, RmsNormVariant variant, const RmsNormSaved& saved,
                        const Tensor& dx, const Tensor& dweight, GradMode dx_mode) override {
    if (!dx.defined())
      DeviceOps::rmsnorm_backward(ctx, dy, x, weight, variant, saved, dx, dweight, dx_mode);
    const std::int64_t n = x.shape().last();
    kernels::rmsnorm_backward(f32(dy), f32(x), f32(weight), f32(saved.inv_rms), f32(dx),
                              f32(dweight), x.numel() / n, n,
                              variant == RmsNormVariant::one_plus_weight,
                              dx_mode == GradMode::accumulate, stream_of(ctx));
  }

  void rope(const OpContext& ctx, const Tensor& x, const Tensor& positions,
            const RopeParams& params, const Tensor& y, bool inverse) override {
    const RopeFrequencies frequencies = rope_frequencies(params);
    kernels::RopeTable table{};
    for (int i = 0; i < frequencies.count && i < kernels::kRopeMaxPairs; ++i)
      table.inv_freq[i] = static_cast<float>(frequencies.inv_freq[i]);
    table.attention_factor = static_cast<float>(frequencies.attention_factor);
    kernels::rope_apply(f32(x), i32(positions), f32(y), x.size(0), x.size(1), x.size(2),
                        params.rotary_dim, table, inverse, stream_of(ctx));
  }

  void swiglu_forward(const OpContext& ctx, const Tensor& gate, const Tensor& up,
                      const Tensor& out) override {
    const std::int64_t width = gate.shape().last(), rows = width == 0 ? 0 : gate.numel() / width;
    kernels::swiglu_forward(f32(gate), f32(up), width, f32(out), rows, width, stream_of(ctx));
  }

  void swiglu_backward(const OpContext& ctx, const Tensor& dout, const Tensor& gate,
                       const Tensor& up, const Tensor& dgate, const Tensor& dup) override {
    const std::int64_t width = gate.shape().last(), rows = width == 0 ? 0 : gate.numel() / width;
    kernels::swiglu_backward(f32(dout), f32(gate), f32(up), width, f32(dgate), f32(dup), width,
                             rows, width, stream_of(ctx));
  }

  void swiglu_fused_forward(const OpContext& ctx, const Tensor& gate_up,
                            const Tensor& out) override {
    const Tensor om = out.as_matrix();
    const std::int64_t width = om.size(1);
    if (gate_up.dtype() == DType::bf16) {  // bf16 activations' kept gate_up
      const bf16* base = static_cast<const bf16*>(gate_up.raw_data());
      kernels::swiglu_forward(base, base + width, 2 * width, f32(out), om.size(0), width,
                              stream_of(ctx));
      return;
    }
    const float* base = f32(gate_up);
    kernels::swiglu_forward(base, base + width, 2 * width, f32(out), om.size(0), width,
                            stream_of(ctx));
  }

  void swiglu_fused_backward(const OpContext& ctx, const Tensor& dout, const Tensor& gate_up,
                             const Tensor& dgate_up) override {
    const Tensor dm = dout.as_matrix();
    const std::int64_t width = dm.size(1);
    float* grad = f32(dgate_up);
    if (gate_up.dtype() == DType::bf16) {  // bf16 activations' kept gate_up
      const bf16* base = static_cast<const bf16*>(gate_up.raw_data());
      kernels::swiglu_backward(f32(dout), base, base + width, 2 * width, grad, grad + width,
                               2 * width, dm.size(0), width, stream_of(ctx));
      return;
    }
    const float* base = f32(gate_up);
    kernels::swiglu_backward(f32(dout), base, base + width, 2 * width, grad, grad + width,
                             2 * width, dm.size(0), width, stream_of(ctx));
  }

  void router_forward(const OpContext& ctx, const Tensor& logits, int top_k, bool normalize_top_k,
                      const Tensor& expert_ids, const Tensor& weights,
                      RouterSaved& saved) override {
    kernels::router_forward(f32(logits), logits.size(0), static_cast<int>(logits.size(1)), top_k,
                            normalize_top_k, i32(expert_ids), f32(weights), f32(saved.probs),
                            stream_of(ctx));
  }

  void balanced_router_forward(const OpContext& ctx, const Tensor& logits, const Tensor& positions,
                               int layer, int top_k, bool normalize_top_k, const Tensor& expert_ids,
                               const Tensor& weights, RouterSaved& saved) override {
    kernels::balanced_router_forward(
        f32(logits), i32(positions), logits.size(0), static_cast<int>(logits.size(1)), layer, top_k,
        normalize_top_k, i32(expert_ids), f32(weights), f32(saved.probs), stream_of(ctx));
  }

  void router_backward(const OpContext& ctx, const Tensor& dweights, const Tensor& expert_ids,
                       const Tensor& weights, const RouterSaved& saved, bool normalize_top_k,
                       const Tensor& dlogits) override {
    kernels::router_backward(f32(dweights), i32(expert_ids), f32(weights), f32(saved.probs),
                             dlogits.size(0), static_cast<int>(dlogits.size(1)),
                             static_cast<int>(expert_ids.size(1)), normalize_top_k, f32(dlogits),
                             stream_of(ctx));
  }

  // Host offsets come back to the host (a synchronisation: per-expert products and the expert
  // dispatch size their work from them); device offsets stay for the grouped products.
  void build_permute_plan(const OpContext& ctx, const Tensor& expert_ids, int num_experts,
                          PermutePlan& plan) override {
    core::Arena& scratch = scratch_of(ctx, "build_permute_plan");
    core::ArenaScope temporaries(scratch);
    const bool on_device = plan.expert_offsets.device() == Device::cuda;
    const Tensor offsets =
        on_device ? plan.expert_offsets : scratch.allocate({num_experts + 1}, DType::i64);
    std::int32_t* bad = device_scalar<std::int32_t>(scratch, INT32_MAX);
    kernels::build_permute_plan(i32(expert_ids), expert_ids.numel(), num_experts,
                                i32(plan.expert_order), i32(plan.assignment_row),
                                offsets.data<std::int64_t>(), bad, stream_of(ctx));
    const std::int32_t first_bad = read_back(bad);
    if (first_bad != INT32_MAX) {
      core::throw_runtime_error("build_permute_plan: the expert id of assignment " +
                                std::to_string(first_bad) + " is outside [0, " +
                                std::to_string(num_experts) + ")");
    }
    if (on_device) return;
    plan.expert_offsets.copy_from(offsets);
    if (!plan.tokens_per_expert.defined()) return;
    const std::int64_t* host = plan.expert_offsets.data<std::int64_t>();
    std::int64_t* counts = plan.tokens_per_expert.data<std::int64_t>();
    for (int e = 0; e < num_experts; ++e) counts[e] = host[e + 1] - host[e];
  }

  void route_and_permute(const OpContext& ctx, const Tensor& logits, int top_k,
                         bool normalize_top_k, const Tensor& x, const Tensor& expert_ids,
                         const Tensor& weights, RouterSaved& saved, PermutePlan& plan,
                         const Tensor& x_perm) override {
    core::Arena& scratch = scratch_of(ctx, "route_and_permute");
    core::ArenaScope temporaries(scratch);
    kernels::DispatchShape shape;
    shape.tokens = logits.size(0);
    shape.experts = static_cast<int>(logits.size(1));
    shape.top_k = top_k;
    shape.normalize_top_k = normalize_top_k;
    shape.hidden = x.size(1);
    const bool on_device = plan.expert_offsets.device() == Device::cuda;
    const Tensor offsets =
        on_device ? plan.expert_offsets : scratch.allocate({shape.experts + 1}, DType::i64);
    const Tensor counts = scratch.allocate({kernels::route_and_permute_scratch(shape)}, DType::i64);
    kernels::route_and_permute(shape, f32(logits), f32(x), i32(expert_ids), f32(weights),
                               f32(saved.probs), i32(plan.expert_order), i32(plan.assignment_row),
                               offsets.data<std::int64_t>(), f32(x_perm),
                               counts.data<std::int64_t>(), stream_of(ctx));
    if (on_device) return;
    plan.expert_offsets.copy_from(offsets);  // host offsets asked for: one copy down
    if (!plan.tokens_per_expert.defined()) return;
    const std::int64_t* host = plan.expert_offsets.data<std::int64_t>();
    std::int64_t* per_expert = plan.tokens_per_expert.data<std::int64_t>();
    for (int e = 0; e < shape.experts; ++e) per_expert[e] = host[e + 1] - host[e];
  }

  void moe_aux_loss_finish_to_device(const OpContext& ctx, const Tensor& counts,
                                     const Tensor& prob_sums, int top_k, double coef,
                                     std::int64_t num_sequences_global, const Tensor& grad_coeff,
                                     const Tensor& loss_out) override {
    core::Arena& scratch = scratch_of(ctx, "moe_aux_loss_finish");
    core::ArenaScope temporaries(scratch);
    const std::int64_t sequences = counts.size(0);
    const Tensor per_sequence =
        scratch.allocate({std::max<std::int64_t>(sequences, 1)}, DType::f64);
    kernels::moe_aux_loss_finish(f32(counts), f32(prob_sums), sequences, counts.size(1), top_k,
                                 coef / static_cast<double>(num_sequences_global), f32(grad_coeff),
                                 per_sequence.data<double>(), loss_out.data<double>(),
                                 stream_of(ctx));
  }

  void permute_forward(const OpContext& ctx, const Tensor& x, const PermutePlan& plan,
                       const Tensor& x_perm) override {
    const std::int64_t tokens = x.size(0);
    kernels::permute_forward(f32(x), i32(plan.expert_order), f32(x_perm), tokens,
                             top_k_of(plan, tokens), x.size(1), stream_of(ctx));
  }

  void permute_backward(const OpContext& ctx, const Tensor& dx_perm, const PermutePlan& plan,
                        const Tensor& dx, GradMode dx_mode) override {
    const std::int64_t tokens = dx.size(0);
    kernels::permute_backward(f32(dx_perm), i32(plan.assignment_row), f32(dx), tokens,
                              top_k_of(plan, tokens), dx.size(1), dx_mode == GradMode::accumulate,
                              stream_of(ctx));
  }

  void unpermute_forward(const OpContext& ctx, const Tensor& y_perm, const PermutePlan& plan,
                         const Tensor& weights, const Tensor& y) override {
    const std::int64_t tokens = y.size(0);
    if (y_perm.dtype() == DType::bf16) {
      kernels::unpermute_forward(static_cast<const bf16*>(y_perm.raw_data()),
                                 i32(plan.assignment_row), f32(weights), f32(y), tokens,
                                 top_k_of(plan, tokens), y.size(1), stream_of(ctx));
      return;
    }
    kernels::unpermute_forward(f32(y_perm), i32(plan.assignment_row), f32(weights), f32(y), tokens,
                               top_k_of(plan, tokens), y.size(1), stream_of(ctx));
  }

  void unpermute_backward(const OpContext& ctx, const Tensor& dy, const Tensor& y_perm,
                          const PermutePlan& plan, const Tensor& weights, const Tensor& dy_perm,
                          const Tensor& dweights) override {
    const std::int64_t tokens = dy.size(0);
    if (y_perm.dtype() == DType::bf16) {
      kernels::unpermute_backward(f32(dy), static_cast<const bf16*>(y_perm.raw_data()),
                                  i32(plan.assignment_row), f32(weights), f32(dy_perm),
                                  f32(dweights), tokens, top_k_of(plan, tokens), dy.size(1),
                                  stream_of(ctx));
      return;
    }
    kernels::unpermute_backward(f32(dy), f32(y_perm), i32(plan.assignment_row), f32(weights),
                                f32(dy_perm), f32(dweights), tokens, top_k_of(plan, tokens),
                                dy.size(1), stream_of(ctx));
  }

  void add(const OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out) override {
    kernels::add(f32(a), f32(b), f32(out), out.numel(), stream_of(ctx));
  }

  void convert(const OpContext& ctx, const Tensor& src, const Tensor& dst) override {
    if (src.dtype() == DType::f32) {
      kernels::convert_f32_to_bf16(f32(src), static_cast<bf16*>(dst.raw_data()), src.numel(),
                                   stream_of(ctx));
    } else {
      kernels::convert_bf16_to_f32(static_cast<const bf16*>(src.raw_data()), f32(dst), src.numel(),
                                   stream_of(ctx));
    }
  }

  void gemm(const OpContext& ctx, const Tensor& a, Transpose transpose_a, const Tensor& b,
            Transpose transpose_b, const Tensor& c, double alpha, bool accumulate) override {
    const Tensor am = a.as_matrix(), bm = b.as_matrix(), cm = c.as_matrix();
    const bool ta = transpose_a == Transpose::yes, tb = transpose_b == Transpose::yes;
    const std::int64_t m = cm.size(0), n = cm.size(1), k = ta ? am.size(0) : am.size(1);
    if (bf16_products(ctx)) {
      core::Arena& scratch = scratch_of(ctx, "gemm");
      core::ArenaScope temporaries(scratch);
      const cudaStream_t stream = stream_of(ctx);
      blas_.gemm(ta, tb, m, n, k, static_cast<float>(alpha), to_bf16(scratch, am, stream),
                 am.size(1), to_bf16(scratch, bm, stream), bm.size(1), accumulate ? 1.0f : 0.0f,
                 f32(cm), kernels::OutType::f32, n, stream);
      return;
    }
    blas_.gemm(ta, tb, m, n, k, static_cast<float>(alpha), f32(am), am.size(1), f32(bm), bm.size(1),
               accumulate ? 1.0f : 0.0f, f32(cm), n, stream_of(ctx));
  }

  void grouped_linear_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight,
                              const Tensor& host_offsets, const Tensor& y) override {
    if (host_offsets.device() == Device::cuda) {
      if (x.dtype() == DType::bf16) {
        kernels::grouped_gemm_forward(grouped_shape(ctx, x, weight, host_offsets),
                                      static_cast<const bf16*>(x.raw_data()), f32(weight), f32(y),
                                      stream_of(ctx));
        return;
      }
      kernels::grouped_gemm_forward(grouped_shape(ctx, x, weight, host_offsets), f32(x),
                                    f32(weight), f32(y), stream_of(ctx));
      return;
    }
    if (bf16_products(ctx)) {
      core::Arena& scratch = scratch_of(ctx, "grouped_linear_forward");
      core::ArenaScope temporaries(scratch);
      const cudaStream_t stream = stream_of(ctx);
      kernels::grouped_linear_forward(
          blas_, to_bf16(scratch, x, stream), to_bf16(scratch, weight, stream),
          host_offsets.data<std::int64_t>(), static_cast<int>(weight.size(0)), f32(y),
          kernels::OutType::f32, weight.size(2), weight.size(1), stream);
      return;
    }
    kernels::grouped_linear_forward(blas_, f32(x), f32(weight), host_offsets.data<std::int64_t>(),
                                    static_cast<int>(weight.size(0)), f32(y), weight.size(2),
                                    weight.size(1), stream_of(ctx));
  }

  void grouped_linear_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                               const Tensor& weight, const Tensor& host_offsets, const Tensor& dx,
                               const Tensor& dweight, GradMode dx_mode) override {
    if (host_offsets.device() == Device::cuda) {
      // One launch for the data gradient, one for the weight gradient, over every expert.
      const kernels::GroupedGemmShape shape = grouped_shape(ctx, x, weight, host_offsets);
      if (dx.defined()) {
        kernels::grouped_gemm_data_grad(shape, f32(dy), f32(weight), f32(dx),
                                        dx_mode == GradMode::accumulate, stream_of(ctx));
      }
      if (dweight.defined() && x.dtype() == DType::bf16) {
        kernels::grouped_gemm_weight_grad(shape, f32(dy), static_cast<const bf16*>(x.raw_data()),
                                          f32(dweight), stream_of(ctx));
      } else if (dweight.defined()) {
        kernels::grouped_gemm_weight_grad(shape, f32(dy), f32(x), f32(dweight), stream_of(ctx));
      }
      return;
    }
    if (bf16_products(ctx)) {
      // dweight accumulates in fp32 from the bf16 products (main_grad).
      core::Arena& scratch = scratch_of(ctx, "grouped_linear_backward");
      core::ArenaScope temporaries(scratch);
      const cudaStream_t stream = stream_of(ctx);
      kernels::grouped_linear_backward(
          blas_, to_bf16(scratch, dy, stream), to_bf16(scratch, x, stream),
          to_bf16(scratch, weight, stream), host_offsets.data<std::int64_t>(),
          static_cast<int>(weight.size(0)), f32(dx), dx_mode == GradMode::accumulate, f32(dweight),
          weight.size(2), weight.size(1), stream);
      return;
    }
    kernels::grouped_linear_backward(
        blas_, f32(dy), f32(x), f32(weight), host_offsets.data<std::int64_t>(),
        static_cast<int>(weight.size(0)), f32(dx), dx_mode == GradMode::accumulate, f32(dweight),
        weight.size(2), weight.size(1), stream_of(ctx));
  }

  CrossEntropyResult fused_cross_entropy(const OpContext& ctx, const Tensor& hidden,
                                         const Tensor& lm_weight, const Tensor& labels,
                                         const Tensor& loss_mask, const Tensor& per_token_loss,
                                         const Tensor& dhidden, const Tensor& dlm_weight,
                                         const CrossEntropyOptions& options) override {
    core::Arena& scratch = scratch_of(ctx, "fused_cross_entropy");
    core::ArenaScope temporaries(scratch);
    const std::int64_t tokens = hidden.size(0), vocab = lm_weight.size(0);
    const std::int64_t chunk = std::max<std::int64_t>(1, std::min(options.token_chunk, tokens));
    const bool bf16 = bf16_products(ctx);
    const Tensor logits = scratch.allocate({chunk, vocab}, DType::f32);
    // bf16 products: bf16 hidden and W_lm, dlogits in bf16 (the kernel's mixed-precision path).
    const Tensor dlogits = scratch.allocate({chunk, vocab}, bf16 ? DType::bf16 : DType::f32);
    kernels::CrossEntropyArgs args;
    args.fp32 = !bf16;
    if (bf16) {
      args.hidden = to_bf16(scratch, hidden, stream_of(ctx));
      args.lm_weight = to_bf16(scratch, lm_weight, stream_of(ctx));
    } else {
      args.hidden = f32(hidden);
      args.lm_weight = f32(lm_weight);
    }
    args.labels = i32(labels);
    args.loss_mask = loss_mask.defined() ? loss_mask.data<std::uint8_t>() : nullptr;
    args.tokens = tokens;
    args.hidden_size = hidden.size(1);
    args.vocab = vocab;
    args.token_chunk = chunk;
    args.grad_scale = static_cast<float>(options.grad_scale);
    args.per_token_loss = f32(per_token_loss);
    args.dhidden = f32(dhidden);
    args.dlm_weight = f32(dlm_weight);
    args.loss_sum = device_scalar<double>(scratch, 0.0);
    args.num_loss_tokens = device_scalar<unsigned long long>(scratch, 0ull);
    args.bad_label = device_scalar<std::int32_t>(scratch, INT32_MAX);
    kernels::fused_cross_entropy(blas_, args, f32(logits), dlogits.raw_data(), stream_of(ctx));
    const std::int32_t bad = read_back(args.bad_label);
    if (bad != INT32_MAX) {
      core::throw_data_error("token " + std::to_string(bad),
                             "fused_cross_entropy: a label is outside the vocabulary [0, " +
                                 std::to_string(vocab) + ")");
    }
    CrossEntropyResult result;
    result.loss_sum = read_back(args.loss_sum);
    result.num_loss_tokens = static_cast<std::int64_t>(read_back(args.num_loss_tokens));
    return result;
  }

  void attention_forward(const OpContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                         const VarlenAttentionLayout& layout, double scale, const Tensor& out,
                         AttentionSaved& saved) override {
    core::Arena& scratch = scratch_of(ctx, "attention_forward");
    core::ArenaScope temporaries(scratch);
    const kernels::AttentionShape shape = shape_of(scratch, q, k, layout, scale);
    const cudaStream_t stream = stream_of(ctx);
    if (bf16_products(ctx) && fused_attention_selected()) {  // model.attention_backend
      cudnn_attention_forward(scratch, stream, q, k, v, layout, scale, out, saved.lse);
    } else if (bf16_products(ctx) && bf16_attention_fits(shape.head_dim)) {
      kernels::attention_forward(shape, to_bf16(scratch, q, stream), to_bf16(scratch, k, stream),
                                 to_bf16(scratch, v, stream), f32(out), f32(saved.lse), stream);
    } else if (bf16_products(ctx)) {
      // A head size the bf16 kernel does not take: the fp32 kernel on the bf16-rounded
      // operands (the CPU op's bf16 semantics; P is not rounded).
      kernels::attention_forward_f32(
          shape, bf16_rounded(scratch, q, stream), bf16_rounded(scratch, k, stream),
          bf16_rounded(scratch, v, stream), f32(out), f32(saved.lse), stream);
    } else {
      kernels::attention_forward_f32(shape, f32(q), f32(k), f32(v), f32(out), f32(saved.lse),
                                     stream);
    }
  }

  void attention_backward(const OpContext& ctx, const Tensor& dout, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& out,
                          const AttentionSaved& saved, const VarlenAttentionLayout& layout,
                          double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                          AttentionGradModes modes) override {
    core::Arena& scratch = scratch_of(ctx, "attention_backward");
    core::ArenaScope temporaries(scratch);
    const kernels::AttentionShape shape = shape_of(scratch, q, k, layout, scale);
    if (modes.dk == GradMode::overwrite) dk.fill_zero();
    if (modes.dv == GradMode::overwrite) dv.fill_zero();
    const cudaStream_t stream = stream_of(ctx);
    if (bf16_products(ctx) && fused_attention_selected()) {
      if (modes.dq == GradMode::overwrite) dq.fill_zero();
      cudnn_attention_backward(scratch, stream, dout, q, k, v, out, saved.lse, layout, scale, dq,
                               dk, dv);
    } else if (bf16_products(ctx) && bf16_attention_fits(shape.head_dim)) {
      // The bf16 kernel always accumulates dq (and dk / dv with accumulate_dkv): zeroed above
      // and here for overwrite.
      if (modes.dq == GradMode::overwrite) dq.fill_zero();
      const Tensor row_d = scratch.allocate({q.size(0), q.size(1)}, DType::f32);
      kernels::attention_backward(shape, to_bf16(scratch, q, stream), to_bf16(scratch, k, stream),
                                  to_bf16(scratch, v, stream), to_bf16(scratch, dout, stream),
                                  f32(out), f32(saved.lse), f32(dq), f32(dk), f32(dv),
                                  /*accumulate_dkv=*/true, f32(row_d), stream);
    } else if (bf16_products(ctx)) {
      kernels::attention_backward_f32(
          shape, bf16_rounded(scratch, q, stream), bf16_rounded(scratch, k, stream),
          bf16_rounded(scratch, v, stream), bf16_rounded(scratch, dout, stream), f32(out),
          f32(saved.lse), f32(dq), modes.dq == GradMode::accumulate, f32(dk), f32(dv), stream);
    } else {
      kernels::attention_backward_f32(shape, f32(q), f32(k), f32(v), f32(dout), f32(out),
                                      f32(saved.lse), f32(dq), modes.dq == GradMode::accumulate,
                                      f32(dk), f32(dv), stream);
    }
  }

  void attention_merge(const OpContext& ctx, const Tensor& out_acc, const Tensor& lse_acc,
                       const Tensor& out_part, const Tensor& lse_part) override {
    kernels::attention_merge_f32(f32(out_acc), f32(lse_acc), f32(out_part), f32(lse_part),
                                 lse_acc.numel(), out_acc.size(2), stream_of(ctx));
  }

  void adamw_step(const OpContext& ctx, const Tensor& param, const Tensor& grad,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq, const AdamWParams& params,
                  bool apply_weight_decay) override {
    kernels::AdamWKernelParams p;
    p.lr = params.lr;
    p.beta1 = params.beta1;
    p.beta2 = params.beta2;
    p.eps = params.eps;
    p.weight_decay = params.weight_decay;
    p.step = params.step;
    p.grad_scale = params.grad_scale;
    p.apply_weight_decay = apply_weight_decay;
    // Each moment is fp32 or bf16 (the precision-aware optimizer), independently.
    const auto bf16_of = [](const Tensor& t) { return static_cast<bf16*>(t.raw_data()); };
    const bool bf16_avg = exp_avg.dtype() == DType::bf16;
    const bool bf16_avg_sq = exp_avg_sq.dtype() == DType::bf16;
    const std::int64_t n = param.numel();
    if (bf16_avg && bf16_avg_sq) {
      kernels::adamw_step(f32(param), f32(grad), bf16_of(exp_avg), bf16_of(exp_avg_sq), n, p,
                          stream_of(ctx));
    } else if (bf16_avg) {
      kernels::adamw_step(f32(param), f32(grad), bf16_of(exp_avg), f32(exp_avg_sq), n, p,
                          stream_of(ctx));
    } else if (bf16_avg_sq) {
      kernels::adamw_step(f32(param), f32(grad), f32(exp_avg), bf16_of(exp_avg_sq), n, p,
                          stream_of(ctx));
    } else {
      kernels::adamw_step(f32(param), f32(grad), f32(exp_avg), f32(exp_avg_sq), n, p,
                          stream_of(ctx));
    }
  }

  double sum_of_squares(const OpContext& ctx, const Tensor& x) override {
    core::Arena& scratch = scratch_of(ctx, "sum_of_squares");
    core::ArenaScope temporaries(scratch);
    double* result = device_scalar<double>(scratch, 0.0);
    kernels::sum_of_squares(f32(x), x.numel(), result, stream_of(ctx));
    return read_back(result);
  }

 private:
  static kernels::GroupedGemmShape grouped_shape(const OpContext& ctx, const Tensor& x,
                                                 const Tensor& weight, const Tensor& offsets) {
    kernels::GroupedGemmShape shape;
    shape.offsets = offsets.data<std::int64_t>();
    shape.experts = static_cast<int>(weight.size(0));
    shape.rows = x.as_matrix().size(0);
    shape.out = weight.size(1);
    shape.in = weight.size(2);
    shape.bf16_products = bf16_products(ctx);
    return shape;
  }

  static int top_k_of(const PermutePlan& plan, std::int64_t tokens) {
    return tokens == 0 ? 0 : static_cast<int>(plan.expert_order.size(0) / tokens);
  }

  static kernels::AttentionShape shape_of(core::Arena& scratch, const Tensor& q, const Tensor& k,
                                          const VarlenAttentionLayout& layout, double scale) {
    kernels::AttentionShape shape;
    shape.q_tokens = q.size(0);
    shape.kv_tokens = k.size(0);
    shape.q_heads = static_cast<int>(q.size(1));
    shape.kv_heads = static_cast<int>(k.size(1));
    shape.head_dim = static_cast<int>(q.size(2));
    shape.num_seqs = static_cast<int>(layout.q_cu_seqlens.size(0) - 1);
    shape.max_q_rows = max_rows(layout.q_cu_seqlens);
    shape.max_kv_rows = max_rows(layout.kv_cu_seqlens);
    shape.q_cu_seqlens = upload(scratch, layout.q_cu_seqlens);
    shape.kv_cu_seqlens = upload(scratch, layout.kv_cu_seqlens);
    shape.q_positions = layout.q_positions.data<std::int32_t>();
    shape.kv_positions = layout.kv_positions.data<std::int32_t>();
    shape.scale = static_cast<float>(scale);
    shape.sliding_window = layout.sliding_window;
    return shape;
  }
};

}  // namespace

std::string backend_name() {
#ifdef DYNCP_CUDA_EMULATION
  return "emulated CUDA";
#else
  return "CUDA";
#endif
}

int visible_devices() {
  return kernels::visible_device_count();
}

int select_device(int local_rank, int rank) {
  try {
    return kernels::select_device_for_local_rank(local_rank);
  } catch (const core::Error& error) {
    core::throw_runtime_error("rank " + std::to_string(rank) + ": " + error.what());
  }
}

void install_backend() {
  // Lives until the process ends and is never destroyed: tearing down cuBLASLt handles and
  // device buffers during exit races the CUDA runtime's own teardown.
  static CudaOps* ops = nullptr;
  if (ops != nullptr) return;
  if (visible_devices() == 0) {
    core::throw_runtime_error(backend_name() +
                              ": no visible GPU (check the driver and "
                              "CUDA_VISIBLE_DEVICES)");
  }
  core::install_device_memory(&cuda_device_memory());
  ops = new CudaOps;
  install_device_ops(ops);
  install_cudnn_attention();
}

bool install_backend_if_visible() {
  if (visible_devices() == 0) return false;
  install_backend();
  return true;
}

}  // namespace dyncp::ops::cuda
