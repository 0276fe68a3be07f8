#pragma once
// Every rank stores every expert's weights (and optimizer moments) but updates only the experts
// of its EP index; the others go stale. Before a checkpoint or an HF export, the owners'
// up-to-date slices are all-gathered over the EP group so that every rank (rank 0 writes)
// holds the whole, current model. Expert tensors are fused per layer ([E, 2I, h] and
// [E, h, I]) and EP rank j owns the contiguous slice [j E/ep, (j+1) E/ep), so one all-gather
// per tensor rebuilds it in order.

#include <span>

#include "dist/comm.hpp"
#include "model/qwen3_moe_parameters.hpp"

namespace dyncp::parallel {

// `flat_buffers` are buffers laid out like parameters.all_values() (the values themselves,
// Adam moments, ...); each has its expert slices refreshed from their owners.
void gather_expert_replicas(const model::Qwen3MoeParameters& parameters,
                            std::span<const core::Tensor> flat_buffers, dist::Comm& expert_parallel);

}  // namespace dyncp::parallel
