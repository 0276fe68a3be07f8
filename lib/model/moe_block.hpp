#pragma once
// The MoE block of a decoder layer (internal to lib/model): router, aux-loss statistics,
// permutation, the experts behind the ExpertDispatcher seam, un-permutation, and the hybrid
// family's gated shared expert.
//
// Under tensor parallelism the routed experts run on the rank's rows only, so every token is
// routed once over the TP group: its rows of the residual stream under sequence parallelism,
// else its slice of the (replicated) rows, whose outputs are then gathered over TP. The router
// and the shared-expert gate see only those rows (their gradients are partial over TP), the
// aux-loss statistics are summed over TP too, and the shared expert runs like the dense MLP
// (every row, the rank's columns) with its sum reduced to the block's rows.

#include "model/decoder_layer.hpp"

namespace dyncp::model {

// mlp_out [T, h] (the layer's rows) = the MoE block of saved.normed_mid (overwrite). Returns
// the layer's aux loss (0 when off, or when it goes to run.aux_losses).
double moe_block_forward(const LayerRunContext& run, int layer, const DecoderLayerParams& params,
                         DecoderLayerActivations& saved, const Tensor& mlp_out);

// dnormed_mid [T, h] (overwrite) from grad = d(mlp_out), normed_mid being the block's input as
// the forward saw it (kept or recomputed). Parameter gradients accumulate.
void moe_block_backward(const LayerRunContext& run, int layer, const DecoderLayerParams& params,
                        const DecoderLayerActivations& saved, const Tensor& normed_mid,
                        const Tensor& grad, const Tensor& dnormed_mid);

}  // namespace dyncp::model
