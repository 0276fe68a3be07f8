#pragma once
// What the sharded checkpoint's writer and reader share (train/sharded_checkpoint.hpp): the
// tensors a rank holds, by their place in its flat buffer and in the whole model's list.

#include <cstdint>
#include <vector>

#include "model/qwen3_moe_parameters.hpp"
#include "model/whole_model_tensors.hpp"
#include "train/sharded_checkpoint_index.hpp"

namespace dyncp::train::detail {

struct LocalTensor {
  std::int64_t flat_offset = 0;  // in all_values()
  std::int64_t numel = 0;
  std::int64_t whole_index = 0;  // in model::whole_model_tensors
  const model::HfTensor* tensor = nullptr;
};

// Every tensor `parameters` hold, in flat order.
std::vector<LocalTensor> local_tensors(const model::Qwen3MoeParameters& parameters,
                                       const std::vector<model::WholeModelTensor>& whole);

// A run of rows of a tensor a rank holds: the block of the whole tensor it is, and where its
// first element sits in the rank's storage of the tensor (the block's elements follow it
// row by row).
struct LocalBlock {
  IndexBlock block;
  std::int64_t storage = 0;
};

// One per row run of `tensor` (model::HfTensor::for_each_row_run), in local row order.
std::vector<LocalBlock> local_blocks(const model::HfTensor& tensor);

}  // namespace dyncp::train::detail
