#pragma once
// Tensor parallelism as the model sees it (Megatron's TP and sequence parallelism,
// docs/dist.md "Tensor parallelism"): which part of every weight a TP rank holds, the sizes its
// layers compute with, and the seam through which they reach the other TP ranks.
//
// A TP rank of tp holds
//   - its 1/tp of the attention heads (q / gate / k / v rows, o_proj columns), of the Gated
//     DeltaNet's key and value heads (in_proj rows, conv channels, A_log / dt_bias, out_proj
//     columns), of the dense MLP's and the shared expert's intermediate columns (gate_up rows,
//     down columns) and of the vocabulary (embedding and LM head rows);
//   - its 1/etp of every expert's intermediate columns (expert_tensor_parallel_size etp = tp),
//     or whole experts (etp = 1);
//   - a whole copy of the norm weights, the q/k norms, the DeltaNet's output norm, the router
//     and the shared-expert gate.
// The layers run on a "local architecture" whose head counts, intermediate sizes and
// vocabulary are the rank's share; the whole architecture names the HF tensors.
//
// Activations between the blocks (the residual stream, the norms, the MoE block) are either
// whole on every TP rank, or with sequence parallelism split by rows: TP rank r holds rows
// [r T/tp, (r+1) T/tp) of the bin's T local rows. A column-parallel block gathers its input
// rows (SP) and a row-parallel block sums its partial output over TP (all-reduce, or with SP a
// reduce-scatter to the rank's rows); backward is the mirror. The MoE block always runs on
// the rank's rows (without SP a slice of the whole rows, gathered afterwards), so every token
// is routed once over the TP group, as the EP dispatch requires.

#include <cstdint>
#include <utility>

#include "config/model_architecture.hpp"
#include "model/seams.hpp"

namespace dyncp::model {

struct TensorParallelShape {
  int size = 1;   // model.tensor_model_parallel_size
  int index = 0;  // this rank's position in its TP group
  // model.expert_tensor_parallel_size (1 or size) and the position in the expert-TP group.
  int expert_size = 1;
  int expert_index = 0;
  bool sequence_parallel = false;  // model.sequence_parallel (only with size > 1)

  bool active() const { return size > 1; }
};

// Config errors (key model.tensor_model_parallel_size / expert_tensor_parallel_size) when the
// architecture's heads, intermediate sizes or vocabulary do not divide.
void validate_tensor_parallel_shape(const config::ModelArchitecture& whole,
                                    const TensorParallelShape& shape);

// The sizes a TP rank's layers compute with: heads, K/V heads, DeltaNet key/value heads, the
// dense and shared-expert intermediate sizes and the vocabulary divided by tp, the experts'
// intermediate size by etp. `whole` must be resolved; the result is not re-resolved.
config::ModelArchitecture local_architecture(const config::ModelArchitecture& whole,
                                             const TensorParallelShape& shape);

// Rows [first, second) of `rows` that TP rank `index` of `size` holds: equal shares under
// sequence parallelism (the alignment makes the rows divisible), floor splits otherwise.
std::pair<std::int64_t, std::int64_t> tensor_parallel_row_range(std::int64_t rows, int size,
                                                                int index);

// The collectives of the TP group on tensors (any device; the identity on one rank).
class TensorParallelContext {
 public:
  virtual ~TensorParallelContext() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // In place: `x` summed over the TP group (rank order, the same bits on every rank).
  virtual void all_reduce(const SeamContext& context, const Tensor& x) = 0;
  // full [R, ...] = every rank's `shard` rows in rank order, rank r holding rows
  // tensor_parallel_row_range(R, size, r) of it.
  virtual void all_gather_rows(const SeamContext& context, const Tensor& shard,
                               const Tensor& full) = 0;
  // shard [rows / size, ...] = this rank's equal share of `full` summed over the group.
  virtual void reduce_scatter_rows(const SeamContext& context, const Tensor& full,
                                   const Tensor& shard) = 0;
};

// One rank: nothing to exchange.
class LocalTensorParallelContext final : public TensorParallelContext {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void all_reduce(const SeamContext&, const Tensor&) override {}
  void all_gather_rows(const SeamContext&, const Tensor& shard, const Tensor& full) override;
  void reduce_scatter_rows(const SeamContext&, const Tensor& full, const Tensor& shard) override;
};

}  // namespace dyncp::model
