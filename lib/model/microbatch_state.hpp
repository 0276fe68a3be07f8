#pragma once
// What one microbatch keeps on this rank between the forward of a chunk of layers and its
// backward (model::Qwen3MoeModel::forward_chunk / backward_chunk). Internal to lib/model.
//
// Each state has its own arenas, so a pipeline stage can hold several microbatches' saved
// activations at once (1F1B up to pp, interleaved more) while they share the model's scratch,
// which every layer releases before it returns. The run context (seams, bin positions, options)
// is kept from the forward for the backward.

#include <optional>
#include <vector>

#include "core/arena.hpp"
#include "model/decoder_layer.hpp"
#include "model/qwen3_moe_model.hpp"

namespace dyncp::model {

class MicrobatchState {
 public:
  MicrobatchState(core::Device device, std::size_t layers, bool stream_in_scratch);

  std::size_t high_water_bytes() const;

  core::Arena activations;  // lives from the forward to the end of the backward
  // What layers save for their backward: kept layers' saves stacked in order and released
  // after each one's backward; a recomputed layer's only while it runs.
  core::Arena layer_saves;
  core::Arena host_saves;                      // SeamContext::host
  std::vector<std::int64_t> sequence_lengths;  // LayerRunContext::sequence_lengths
  // Per held layer (position in the model's layers): its input [T, h] (bf16 with bf16
  // activations), its saved activations (empty views under recompute) and where its saves
  // start in layer_saves.
  std::vector<Tensor> layer_inputs;
  std::vector<DecoderLayerActivations> per_layer;
  std::vector<core::Arena::Mark> saved_from;
  // bf16 activations: whether the fp32 residual stream lives in the model's scratch (run_bin:
  // nothing else runs between forward and backward) or in `activations` (a pipeline pass).
  bool stream_in_scratch = false;
  std::optional<core::ArenaScope> stream_scope;

  // From the forward, for the backward.
  LayerRunContext run;
  const PackedBin* bin = nullptr;
  BinOptions options;
  ChunkPass chunk;
  std::size_t first_position = 0;  // of the chunk's layers in the model's layers
  Tensor chunk_output;             // the last layer's output (the final norm's input)
  ops::RmsNormSaved final_norm_saved;
  Tensor dnormed_final;  // the loss chunk's gradient of the final norm's output
  bool awaiting_backward = false;
};

}  // namespace dyncp::model
