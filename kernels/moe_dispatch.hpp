#pragma once
// Fused MoE dispatch (model.moe_permute_fusion, ops::route_and_permute): routing top-k, the
// stable counting sort of the assignments by expert and the permuted rows, in three launches
// with nothing read by the host:
//   1. per block of 128 tokens: each token's softmax / top-k / weights (the router kernel's
//      arithmetic, kernels/router_row.cuh), and the block's assignment count per expert;
//   2. one block: the expert offsets and, per (block, expert), where the block's first such
//      assignment goes (an exclusive scan over blocks within each expert);
//   3. per block of 128 tokens: each assignment's row (stable: token, then slot order), the
//      plan's order / inverse, and the token's row copied to its permuted place.
// A counting sort needs the global counts before any row can be placed, so routing and
// placement are two passes over the assignments; the logits are read once and the rows
// moved once. The result equals router_forward + build_permute_plan + permute_forward.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dyncp::kernels {

struct DispatchShape {
  std::int64_t tokens = 0;
  int experts = 0;  // 1 .. 4096
  int top_k = 0;    // 1 .. 32, <= experts
  bool normalize_top_k = false;
  std::int64_t hidden = 0;
};

// i64 elements of device scratch route_and_permute needs.
std::int64_t route_and_permute_scratch(const DispatchShape& shape);

// logits, probs [T, E]; ids, weights [T, k]; x [T, h]; order, assignment_row [T·k];
// offsets i64 [E + 1]; x_perm [T·k, h].
void route_and_permute(const DispatchShape& shape, const float* logits, const float* x,
                       std::int32_t* ids, float* weights, float* probs, std::int32_t* order,
                       std::int32_t* assignment_row, std::int64_t* offsets, float* x_perm,
                       std::int64_t* scratch, cudaStream_t stream);

}  // namespace dyncp::kernels
