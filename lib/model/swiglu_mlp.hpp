#pragma once
// The SwiGLU MLP of dense layers and of the hybrid's shared expert (internal to lib/model):
// out = down(silu(gate) ⊙ up), with what it keeps for its backward chosen by selective
// recomputation.

#include "core/arena.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "ops/context.hpp"

namespace dyncp::model {

// What the SwiGLU MLP keeps for its backward; what it does not keep the backward recomputes
// with the same ops from what it does (selective recomputation).
enum class MlpKept {
  everything,  // gate_up and hidden = silu(gate) ⊙ up
  gate_up,     // moe_act: hidden is recomputed from gate_up
  input_only,  // mlp / shared_experts: gate_up and hidden are recomputed from the input
};

// out = down(silu(gate) ⊙ up) of `input` (overwrite). Tensors not kept are scratch temporaries
// and left undefined in gate_up / hidden.
void swiglu_mlp_forward(const ops::OpContext& ctx, core::Arena& keep, core::Arena& scratch,
                        const DenseMlpParams& mlp, const Tensor& input, Tensor& gate_up,
                        Tensor& hidden, const Tensor& out, MlpKept kept);

// dinput: overwrite or accumulate (mode). An undefined `gate_up` is recomputed from the
// input, an undefined `hidden` from gate_up.
void swiglu_mlp_backward(const ops::OpContext& ctx, core::Arena& scratch, const DenseMlpParams& mlp,
                         const Tensor& dout, const Tensor& input, const Tensor& kept_gate_up,
                         const Tensor& kept_hidden, const Tensor& dinput, ops::GradMode mode);

}  // namespace dyncp::model
