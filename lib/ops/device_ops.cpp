#include "ops/device_ops.hpp"

#include <string>

#include "core/error.hpp"

namespace dyncp::ops {
namespace {

DeviceOps* installed = nullptr;

}  // namespace

void install_device_ops(DeviceOps* ops) {
  installed = ops;
}

bool has_device_ops() {
  return installed != nullptr;
}

namespace detail {

DeviceOps& device_ops(std::string_view op) {
  if (installed == nullptr) {
    core::throw_runtime_error(std::string(op) +
                              ": no CUDA backend in this binary (built without CUDA): run "
                              "with dist.device: cpu");
  }
  return *installed;
}

}  // namespace detail

void DeviceOps::unsupported(std::string_view op) {
  core::throw_runtime_error(std::string(op) +
                            ": no CUDA implementation yet; this op runs on the CPU only "
                            "(docs/cuda.md lists what runs on the GPU)");
}

void DeviceOps::embedding_forward(const OpContext&, const Tensor&, const Tensor&, const Tensor&) {
  unsupported("embedding_forward");
}
void DeviceOps::embedding_backward(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                                   std::int64_t) {
  unsupported("embedding_backward");
}
void DeviceOps::embedding_shard_forward(const OpContext&, const Tensor&, const Tensor&,
                                        const VocabShardRange&, const Tensor&) {
  unsupported("embedding_shard_forward");
}
void DeviceOps::embedding_shard_backward(const OpContext&, const Tensor&, const Tensor&,
                                         const Tensor&, const VocabShardRange&, std::int64_t) {
  unsupported("embedding_shard_backward");
}
void DeviceOps::rmsnorm_forward(const OpContext&, const Tensor&, const Tensor&, double,
                                RmsNormVariant, const Tensor&, RmsNormSaved&) {
  unsupported("rmsnorm_forward");
}
void DeviceOps::rmsnorm_backward(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                                 RmsNormVariant, const RmsNormSaved&, const Tensor&, const Tensor&,
                                 GradMode) {
  unsupported("rmsnorm_backward");
}
void DeviceOps::rope(const OpContext&, const Tensor&, const Tensor&, const RopeParams&,
                     const Tensor&, bool) {
  unsupported("rope");
}
void DeviceOps::swiglu_forward(const OpContext&, const Tensor&, const Tensor&, const Tensor&) {
  unsupported("swiglu_forward");
}
void DeviceOps::swiglu_backward(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                                const Tensor&, const Tensor&) {
  unsupported("swiglu_backward");
}
void DeviceOps::swiglu_fused_forward(const OpContext&, const Tensor&, const Tensor&) {
  unsupported("swiglu_fused_forward");
}
void DeviceOps::swiglu_fused_backward(const OpContext&, const Tensor&, const Tensor&,
                                      const Tensor&) {
  unsupported("swiglu_fused_backward");
}
void DeviceOps::router_forward(const OpContext&, const Tensor&, int, bool, const Tensor&,
                               const Tensor&, RouterSaved&) {
  unsupported("router_forward");
}
void DeviceOps::balanced_router_forward(const OpContext&, const Tensor&, const Tensor&, int, int,
                                        bool, const Tensor&, const Tensor&, RouterSaved&) {
  unsupported("balanced_router_forward");
}
void DeviceOps::router_backward(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                                const RouterSaved&, bool, const Tensor&) {
  unsupported("router_backward");
}
void DeviceOps::build_permute_plan(const OpContext&, const Tensor&, int, PermutePlan&) {
  unsupported("build_permute_plan");
}
void DeviceOps::moe_aux_loss_finish_to_device(const OpContext&, const Tensor&, const Tensor&, int,
                                              double, std::int64_t, const Tensor&, const Tensor&) {
  unsupported("moe_aux_loss_finish");
}
void DeviceOps::route_and_permute(const OpContext&, const Tensor&, int, bool, const Tensor&,
                                  const Tensor&, const Tensor&, RouterSaved&, PermutePlan&,
                                  const Tensor&) {
  unsupported("route_and_permute");
}
void DeviceOps::permute_forward(const OpContext&, const Tensor&, const PermutePlan&,
                                const Tensor&) {
  unsupported("permute_forward");
}
void DeviceOps::permute_backward(const OpContext&, const Tensor&, const PermutePlan&, const Tensor&,
                                 GradMode) {
  unsupported("permute_backward");
}
void DeviceOps::unpermute_forward(const OpContext&, const Tensor&, const PermutePlan&,
                                  const Tensor&, const Tensor&) {
  unsupported("unpermute_forward");
}
void DeviceOps::unpermute_backward(const OpContext&, const Tensor&, const Tensor&,
                                   const PermutePlan&, const Tensor&, const Tensor&,
                                   const Tensor&) {
  unsupported("unpermute_backward");
}
void DeviceOps::add(const OpContext&, const Tensor&, const Tensor&, const Tensor&) {
  unsupported("add");
}
void DeviceOps::convert(const OpContext&, const Tensor&, const Tensor&) {
  unsupported("convert");
}
void DeviceOps::gemm(const OpContext&, const Tensor&, Transpose, const Tensor&, Transpose,
                     const Tensor&, double, bool) {
  unsupported("gemm");
}
void DeviceOps::grouped_linear_forward(const OpContext&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&) {
  unsupported("grouped_linear_forward");
}
void DeviceOps::grouped_linear_backward(const OpContext&, const Tensor&, const Tensor&,
                                        const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        GradMode) {
  unsupported("grouped_linear_backward");
}
CrossEntropyResult DeviceOps::fused_cross_entropy(const OpContext&, const Tensor&, const Tensor&,
                                                  const Tensor&, const Tensor&, const Tensor&,
                                                  const Tensor&, const Tensor&,
                                                  const CrossEntropyOptions&) {
  unsupported("fused_cross_entropy");
}
void DeviceOps::vocab_shard_logsumexp(const OpContext&, const Tensor&, const Tensor&,
                                      const VocabShardRange&, const Tensor&, const Tensor&,
                                      const Tensor&, const Tensor&, const CrossEntropyOptions&) {
  unsupported("vocab_shard_logsumexp");
}
void DeviceOps::combine_shard_logsumexp(const OpContext&, const Tensor&, const Tensor&) {
  unsupported("combine_shard_logsumexp");
}
CrossEntropyResult DeviceOps::vocab_shard_cross_entropy(const OpContext&, const Tensor&,
                                                        const Tensor&, const VocabShardRange&,
                                                        const Tensor&, const Tensor&, const Tensor&,
                                                        const Tensor&, const Tensor&, const Tensor&,
                                                        const Tensor&, const CrossEntropyOptions&) {
  unsupported("vocab_shard_cross_entropy");
}
void DeviceOps::attention_forward(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                                  const VarlenAttentionLayout&, double, const Tensor&,
                                  AttentionSaved&) {
  unsupported("attention_forward");
}
void DeviceOps::attention_backward(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                                   const Tensor&, const Tensor&, const AttentionSaved&,
                                   const VarlenAttentionLayout&, double, const Tensor&,
                                   const Tensor&, const Tensor&, AttentionGradModes) {
  unsupported("attention_backward");
}
void DeviceOps::attention_merge(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                                const Tensor&) {
  unsupported("attention_merge");
}
void DeviceOps::adamw_step(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const AdamWParams&, bool) {
  unsupported("adamw_step");
}
double DeviceOps::sum_of_squares(const OpContext&, const Tensor&) {
  unsupported("sum_of_squares");
}

}  // namespace dyncp::ops
