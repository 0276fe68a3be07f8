#include "parallel/pipeline_stage.hpp"

namespace dyncp::parallel {

model::ModelPart stage_model_part(const config::PipelineSplit& split, std::int64_t stage) {
  model::ModelPart part;
  part.embedding = false;
  part.head = false;
  for (std::int64_t v = 0; v < split.virtual_size; ++v) {
    const config::LayerChunk& chunk = split.chunk(stage, v);
    if (chunk.num_layers > 0) part.layers.push_back({chunk.first_layer, chunk.num_layers});
    part.embedding = part.embedding || chunk.holds_embedding;
    part.head = part.head || chunk.holds_loss;
  }
  // A stage that holds no layer at all is still a part (its embedding or head); ModelPart's
  // empty list means every layer, so name an empty run.
  if (part.layers.empty()) part.layers.push_back({0, 0});
  return part;
}

std::vector<model::ChunkPass> stage_chunk_passes(const config::PipelineSplit& split,
                                                 std::int64_t stage) {
  std::vector<model::ChunkPass> passes;
  for (std::int64_t v = 0; v < split.virtual_size; ++v) {
    const config::LayerChunk& chunk = split.chunk(stage, v);
    passes.push_back(
        {chunk.first_layer, chunk.num_layers, chunk.holds_embedding, chunk.holds_loss});
  }
  return passes;
}

}  // namespace dyncp::parallel
