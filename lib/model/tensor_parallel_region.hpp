#pragma once
// The two ends of a tensor-parallel block inside a layer (internal to lib/model): a
// column-parallel projection reads every row of the block's input, the rank's heads or FFN
// columns run locally, and a row-parallel projection leaves a partial sum over the TP group.
//
//                 forward                              backward
//   entry   SP: all-gather rows; else as is       SP: reduce-scatter; else all-reduce
//   exit    SP: reduce-scatter; else all-reduce   SP: all-gather rows; else as is
//
// Inactive (one TP rank) every call is the identity and the layers run exactly as without
// tensor parallelism. Temporaries come from run.seam.scratch: callers hold an ArenaScope.

#include <cstdint>

#include "model/decoder_layer.hpp"
#include "ops/context.hpp"

namespace dyncp::model {

class TensorParallelRegion {
 public:
  explicit TensorParallelRegion(const LayerRunContext& run);

  bool active() const { return context_ != nullptr && context_->size() > 1; }
  bool sequence_parallel() const { return active() && sequence_parallel_; }

  // Every row of the layer's rows `x` [T_local, ...]: x itself, or all rows gathered (SP).
  Tensor gathered(const Tensor& x) const;
  // A zeroed [rows, width] buffer for a block's partial output, where `rows` is every row.
  Tensor partial_output(std::int64_t rows, std::int64_t width, core::DType dtype) const;
  // destination (the layer's rows) = or += the partial output summed over TP.
  void sum_output(const Tensor& partial, const Tensor& destination, ops::GradMode mode) const;
  // Where a block writes the gradient of its input (every row): `dinput` itself unless SP.
  Tensor input_grad_buffer(const Tensor& dinput, std::int64_t rows) const;
  // dinput (the layer's rows; overwrite) = the buffer's partial gradient summed over TP.
  void sum_input_grad(const Tensor& buffer, const Tensor& dinput) const;

  // Plain collectives for the blocks that need other shapes (the MoE block's rows).
  void all_reduce(const Tensor& x) const;
  // full = every rank's rows in rank order (tensor_parallel_row_range of full's rows).
  void all_gather_rows(const Tensor& shard, const Tensor& full) const;

 private:
  const LayerRunContext& run_;
  TensorParallelContext* context_;
  bool sequence_parallel_;
};

}  // namespace dyncp::model
