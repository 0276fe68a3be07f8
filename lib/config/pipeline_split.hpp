#pragma once
// Megatron's split of the decoder layers over pipeline stages and their virtual chunks, as one
// pure function of the model.* pipeline keys (docs/dist.md "Pipeline stages").
//
// Virtual stage k = v x pp + s (chunk v of stage s) holds a contiguous run of layers, and the
// runs follow k: chunk 0 of every stage, then chunk 1, ... (interleaved 1F1B visits them in
// that order). The run lengths:
//   even split      L' = num_layers (+ 1 with account_for_embedding, + 1 with account_for_loss)
//                   must divide by pp, and L' / pp by vpp: every virtual stage gets L' / (pp vpp)
//                   layers, less one on virtual stage 0 (it holds the embedding) and on the last
//                   (it holds the loss) when those count.
//   uneven split    num_layers_in_first / _last_pipeline_stage give stage 0 / pp - 1 their
//                   layers; the rest divide evenly over the middle stages; each stage's layers
//                   divide by vpp. Not combined with account_for_* (as in Megatron).
// A chunk's first layer is the sum of the runs before it, so the layer types of a hybrid model
// keep their global order: chunk (s, v) runs layers [first, first + count) of the whole model.

#include <cstdint>
#include <string>
#include <vector>

#include "config/config_container.hpp"

namespace dyncp::config {

struct PipelineSplitInput {
  std::int64_t num_layers = 1;
  std::int64_t pipeline_size = 1;
  std::int64_t virtual_size = 1;         // chunks per stage (1: no interleaving)
  std::int64_t first_stage_layers = -1;  // -1: unset
  std::int64_t last_stage_layers = -1;
  bool account_for_embedding = false;
  bool account_for_loss = false;
};

struct LayerChunk {
  std::int64_t stage = 0;
  std::int64_t virtual_index = 0;
  std::int64_t first_layer = 0;
  std::int64_t num_layers = 0;
  bool holds_embedding = false;  // virtual stage 0
  bool holds_loss = false;       // the last virtual stage
};

struct PipelineSplit {
  std::int64_t pipeline_size = 1;
  std::int64_t virtual_size = 1;
  std::vector<LayerChunk> chunks;  // in virtual-stage order: k = v x pp + s

  const LayerChunk& chunk(std::int64_t stage, std::int64_t virtual_index) const {
    return chunks[static_cast<std::size_t>(virtual_index * pipeline_size + stage)];
  }
  std::int64_t layers_of_stage(std::int64_t stage) const;
  // "stage 0: layers [0, 12) (+ embedding); stage 1: ..." one line per stage.
  std::string describe() const;
};

// The input the resolved keys imply.
PipelineSplitInput pipeline_split_input(const ModelConfig& model);

// Every violated rule as {key, value, rule}; empty when the split is valid.
struct PipelineSplitProblem {
  std::string key, value, rule;
};
std::vector<PipelineSplitProblem> pipeline_split_problems(const PipelineSplitInput& input);

// The split; throws a config error naming the first violated key when the input is invalid.
PipelineSplit split_layers(const PipelineSplitInput& input);

}  // namespace dyncp::config
