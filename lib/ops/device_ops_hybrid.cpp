// DeviceOps' refusing bodies for the ops of the hybrid layers and the MoE aux loss (the class
// is in device_ops.hpp): a backend that does not implement one names it.
#include "ops/device_ops.hpp"

namespace dyncp::ops {

void DeviceOps::moe_aux_loss_statistics(const OpContext&, const Tensor&, const Tensor&,
                                        const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        bool) {
  unsupported("moe_aux_loss_statistics");
}
double DeviceOps::moe_aux_loss_finish(const OpContext&, const Tensor&, const Tensor&, int, double,
                                      std::int64_t, const Tensor&) {
  unsupported("moe_aux_loss_finish");
}
void DeviceOps::moe_aux_loss_backward(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, const Tensor&, double) {
  unsupported("moe_aux_loss_backward");
}
void DeviceOps::sigmoid_gate_forward(const OpContext&, const Tensor&, const Tensor&,
                                     const Tensor&) {
  unsupported("sigmoid_gate_forward");
}
void DeviceOps::sigmoid_gate_backward(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, const Tensor&) {
  unsupported("sigmoid_gate_backward");
}
void DeviceOps::sigmoid_row_gate_forward(const OpContext&, const Tensor&, const Tensor&,
                                         const Tensor&, GradMode) {
  unsupported("sigmoid_row_gate_forward");
}
void DeviceOps::sigmoid_row_gate_backward(const OpContext&, const Tensor&, const Tensor&,
                                          const Tensor&, const Tensor&, const Tensor&) {
  unsupported("sigmoid_row_gate_backward");
}
void DeviceOps::head_halves(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                            bool to_halves) {
  unsupported(to_halves ? "split_head_halves" : "merge_head_halves");
}
void DeviceOps::gated_delta_gates_forward(const OpContext&, const Tensor&, const Tensor&,
                                          const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&) {
  unsupported("gated_delta_gates_forward");
}
void DeviceOps::gated_delta_gates_backward(const OpContext&, const Tensor&, const Tensor&,
                                           const Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, const Tensor&) {
  unsupported("gated_delta_gates_backward");
}
void DeviceOps::causal_conv1d_silu_forward(const OpContext&, const Tensor&, const Tensor&,
                                           const Tensor&, const Tensor&) {
  unsupported("causal_conv1d_silu_forward");
}
void DeviceOps::causal_conv1d_silu_backward(const OpContext&, const Tensor&, const Tensor&,
                                            const Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&) {
  unsupported("causal_conv1d_silu_backward");
}
void DeviceOps::l2norm_forward(const OpContext&, const Tensor&, double, const Tensor&,
                               L2NormSaved&) {
  unsupported("l2norm_forward");
}
void DeviceOps::l2norm_backward(const OpContext&, const Tensor&, const Tensor&, const L2NormSaved&,
                                const Tensor&) {
  unsupported("l2norm_backward");
}
void DeviceOps::gated_rmsnorm_forward(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                                      double, const Tensor&, RmsNormSaved&) {
  unsupported("gated_rmsnorm_forward");
}
void DeviceOps::gated_rmsnorm_backward(const OpContext&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&, const RmsNormSaved&,
                                       const Tensor&, const Tensor&, const Tensor&) {
  unsupported("gated_rmsnorm_backward");
}
void DeviceOps::gated_delta_rule_forward(const OpContext&, const GatedDeltaRuleInputs&,
                                         const GatedDeltaRuleParams&, const Tensor&, const Tensor&,
                                         GatedDeltaRuleSaved&) {
  unsupported("gated_delta_rule_forward");
}
void DeviceOps::gated_delta_rule_backward(const OpContext&, const Tensor&, const Tensor&,
                                          const GatedDeltaRuleInputs&, const GatedDeltaRuleParams&,
                                          const GatedDeltaRuleSaved&, const GatedDeltaRuleGrads&) {
  unsupported("gated_delta_rule_backward");
}

void DeviceOps::compose_segment_prefixes(const OpContext&, const Tensor&, const Tensor&,
                                         const Tensor&, std::int64_t, std::int64_t, const Tensor&) {
  unsupported("compose_segment_prefixes");
}
void DeviceOps::compose_segment_suffixes(const OpContext&, const Tensor&, const Tensor&,
                                         const Tensor&, const Tensor&, std::int64_t, std::int64_t,
                                         const Tensor&) {
  unsupported("compose_segment_suffixes");
}
void DeviceOps::segment_state_grads(const OpContext&, const Tensor&, const Tensor&, const Tensor&,
                                    const Tensor&) {
  unsupported("segment_state_grads");
}
void DeviceOps::copy_columns(const OpContext&, const Tensor&, std::int64_t, const Tensor&,
                             std::int64_t, std::int64_t) {
  unsupported("copy_columns");
}
void DeviceOps::set_identity_columns(const OpContext&, const Tensor&, std::int64_t) {
  unsupported("set_identity_columns");
}

}  // namespace dyncp::ops
