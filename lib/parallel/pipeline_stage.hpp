#pragma once
// A pipeline stage as the model runs it, from Megatron's split of the layers
// (config/pipeline_split.hpp): the part of the model the stage's ranks hold (the layers of its
// virtual chunks, the embedding on the stage of virtual stage 0, the final norm and head on
// the stage of the last) and the pass each of its chunks runs.
//
//   pp 2, vpp 2, 8 layers: stage 0 holds layers [0, 2) (chunk 0, + embedding) and [4, 6)
//   (chunk 1); stage 1 holds [2, 4) and [6, 8) (chunk 1, + final norm, head and loss).

#include <cstdint>
#include <vector>

#include "config/pipeline_split.hpp"
#include "model/qwen3_moe_model.hpp"

namespace dyncp::parallel {

// What `stage` holds; the whole model when the split has one stage.
model::ModelPart stage_model_part(const config::PipelineSplit& split, std::int64_t stage);

// The pass of each virtual chunk of `stage`, in chunk order.
std::vector<model::ChunkPass> stage_chunk_passes(const config::PipelineSplit& split,
                                                 std::int64_t stage);

}  // namespace dyncp::parallel
