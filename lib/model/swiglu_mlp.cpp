#include "model/swiglu_mlp.hpp"

#include "ops/gemm.hpp"
#include "ops/swiglu.hpp"

namespace dyncp::model {

using core::DType;
using ops::GradMode;

void swiglu_mlp_forward(const ops::OpContext& ctx, core::Arena& keep, core::Arena& scratch,
                        const DenseMlpParams& mlp, const Tensor& input, Tensor& gate_up,
                        Tensor& hidden, const Tensor& out, MlpKept kept) {
  const DType dtype = input.dtype();
  const std::int64_t tokens = input.size(0);
  const std::int64_t twice_intermediate = mlp.gate_up.value.size(0);
  core::ArenaScope temporaries(scratch);
  const Tensor projected =
      (kept == MlpKept::input_only ? scratch : keep).allocate({tokens, twice_intermediate}, dtype);
  const Tensor activation = (kept == MlpKept::everything ? keep : scratch)
                                .allocate({tokens, twice_intermediate / 2}, dtype);
  ops::linear_forward(ctx, input, mlp.gate_up.value, projected);
  ops::swiglu_fused_forward(ctx, projected, activation);
  ops::linear_forward(ctx, activation, mlp.down.value, out);
  gate_up = kept == MlpKept::input_only ? Tensor{} : projected;
  hidden = kept == MlpKept::everything ? activation : Tensor{};
}

void swiglu_mlp_backward(const ops::OpContext& ctx, core::Arena& scratch, const DenseMlpParams& mlp,
                         const Tensor& dout, const Tensor& input, const Tensor& kept_gate_up,
                         const Tensor& kept_hidden, const Tensor& dinput, GradMode mode) {
  const DType dtype = dout.dtype();
  core::ArenaScope temporaries(scratch);
  Tensor gate_up = kept_gate_up;
  if (!gate_up.defined()) {
    gate_up = scratch.allocate({input.size(0), mlp.gate_up.value.size(0)}, dtype);
    ops::linear_forward(ctx, input, mlp.gate_up.value, gate_up);
  }
  Tensor hidden = kept_hidden;
  if (!hidden.defined()) {
    hidden = scratch.allocate({gate_up.size(0), gate_up.size(1) / 2}, dtype);
    ops::swiglu_fused_forward(ctx, gate_up, hidden);
  }
  const Tensor dhidden = scratch.allocate(hidden.shape(), dtype);
  const Tensor dgate_up = scratch.allocate(gate_up.shape(), dtype);
  ops::linear_backward(ctx, dout, hidden, mlp.down.value, dhidden, mlp.down.grad);
  ops::swiglu_fused_backward(ctx, dhidden, gate_up, dgate_up);
  ops::linear_backward(ctx, dgate_up, input, mlp.gate_up.value, dinput, mlp.gate_up.grad, mode);
}

}  // namespace dyncp::model
