#include "model/tensor_parallel_region.hpp"

#include "core/error.hpp"
#include "ops/elementwise.hpp"

namespace dyncp::model {

TensorParallelRegion::TensorParallelRegion(const LayerRunContext& run)
    : run_(run), context_(run.seams.tensor_parallel), sequence_parallel_(run.sequence_parallel) {}

Tensor TensorParallelRegion::gathered(const Tensor& x) const {
  if (!sequence_parallel()) return x;
  const std::int64_t rows = x.size(0) * context_->size();
  core::Shape shape = x.shape();
  shape[0] = rows;
  const Tensor full = run_.seam.scratch->allocate(shape, x.dtype());
  all_gather_rows(x, full);
  return full;
}

Tensor TensorParallelRegion::partial_output(std::int64_t rows, std::int64_t width,
                                            core::DType dtype) const {
  const Tensor partial = run_.seam.scratch->allocate({rows, width}, dtype);
  partial.fill_zero();
  return partial;
}

void TensorParallelRegion::sum_output(const Tensor& partial, const Tensor& destination,
                                      ops::GradMode mode) const {
  const ops::OpContext& ctx = run_.seam.ops;
  Tensor summed = partial;
  if (sequence_parallel()) {
    summed = run_.seam.scratch->allocate(destination.shape(), partial.dtype());
    context_->reduce_scatter_rows(run_.seam, partial, summed);
  } else {
    context_->all_reduce(run_.seam, partial);
  }
  if (mode == ops::GradMode::overwrite) {
    destination.copy_from(summed);
  } else {
    ops::add(ctx, destination, summed, destination);
  }
}

Tensor TensorParallelRegion::input_grad_buffer(const Tensor& dinput, std::int64_t rows) const {
  if (!sequence_parallel()) return dinput;
  core::Shape shape = dinput.shape();
  shape[0] = rows;
  return run_.seam.scratch->allocate(shape, dinput.dtype());
}

void TensorParallelRegion::sum_input_grad(const Tensor& buffer, const Tensor& dinput) const {
  if (!active()) return;
  if (sequence_parallel()) {
    context_->reduce_scatter_rows(run_.seam, buffer, dinput);
  } else {
    DYNCP_CHECK(buffer.raw_data() == dinput.raw_data(), "without SP the block writes dinput");
    context_->all_reduce(run_.seam, dinput);
  }
}

void TensorParallelRegion::all_reduce(const Tensor& x) const {
  if (active()) context_->all_reduce(run_.seam, x);
}

void TensorParallelRegion::all_gather_rows(const Tensor& shard, const Tensor& full) const {
  if (!active()) {
    if (full.raw_data() != shard.raw_data()) full.copy_from(shard);
    return;
  }
  context_->all_gather_rows(run_.seam, shard, full);
}

}  // namespace dyncp::model
