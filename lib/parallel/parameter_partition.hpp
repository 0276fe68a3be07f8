#pragma once
// Which parts of the flat parameter / gradient buffers this rank owns and how each part is
// synchronised, derived once from the HF tensor list:
//   dense tensors  every rank holds a replica; gradients summed over the whole pool
//   expert tensors EP rank j holds only experts [j E/ep, (j+1) E/ep) (the model is built
//                  with that slice, parallel/expert_gather.hpp); their gradients are summed
//                  over the expert-data-parallel group (ranks with the same EP index).
// Adjacent tensors of the same kind and weight-decay class are merged into one range, so a
// reduction or an optimizer update touches a few large contiguous ranges. A tied LM head
// aliases the embedding and is listed once (on a last pipeline stage it is a copy of the
// first stage's embedding, left out of the gradient norm).

#include <cstdint>
#include <string>
#include <vector>

#include "model/qwen3_moe_parameters.hpp"

namespace dyncp::parallel {

struct ParameterRange {
  std::int64_t offset = 0;  // elements into all_values() / all_grads()
  std::int64_t count = 0;
  bool is_expert = false;
  bool weight_decay = true;  // false for norm weights
  // A tied LM head's copy on the last pipeline stage: the first stage's embedding, whose
  // gradient (which the copy's equals once summed over the embedding group) counts once in the
  // norm and which that stage writes to checkpoints.
  bool tied_copy = false;
  // Tensor parallelism: a piece of tensors split over the TP (or expert-TP) group, whose
  // squares are summed over it for the gradient norm; and whole tensors whose gradient is a
  // TP rank's part, summed over the TP group before the data-parallel sums.
  model::TensorSplit split = model::TensorSplit::whole;
  bool tp_partial_grad = false;

  // Whether `other` may be merged into one range with this one (same treatment everywhere).
  bool same_kind(const ParameterRange& other) const {
    return is_expert == other.is_expert && weight_decay == other.weight_decay &&
           tied_copy == other.tied_copy && split == other.split &&
           tp_partial_grad == other.tp_partial_grad;
  }
};

struct ParameterPartition {
  std::vector<ParameterRange> ranges;  // ascending offsets
  std::int64_t dense_elements = 0;
  std::int64_t expert_elements = 0;
};

// Expert index from an HF name "...mlp.experts.{e}...."; -1 for a non-expert tensor.
std::int64_t expert_index_of(const std::string& hf_name);
// True for tensors excluded from weight decay (every norm weight).
bool is_norm_weight(const std::string& hf_name);

// Every tensor `parameters` hold: all of them are this rank's (experts: its slice; under
// tensor parallelism its pieces).
ParameterPartition partition_parameters(const model::Qwen3MoeParameters& parameters);

}  // namespace dyncp::parallel
