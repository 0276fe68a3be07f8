// One pass of a run of layers over one microbatch: the forward and backward that run_bin and a
// pipeline stage are made of (qwen3_moe_model.hpp, microbatch_state.hpp).

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/decoder_layer.hpp"
#include "model/microbatch_state.hpp"
#include "model/qwen3_moe_model.hpp"
#include "ops/elementwise.hpp"

namespace dyncp::model {

using core::DType;

namespace {

void require_i32_vector(const Tensor& tensor, const char* name, std::int64_t length) {
  if (!tensor.defined() || tensor.dtype() != DType::i32 || tensor.rank() != 1 ||
      (length >= 0 && tensor.size(0) != length))
    core::throw_data_error(std::string("bin.") + name,
                           "expected i32 [" + (length >= 0 ? std::to_string(length) : "n") +
                               "], got " + (tensor.defined() ? tensor.describe() : "nothing"));
}

// Real tokens of each whole sequence, for dynamic RoPE: bin.sequence_lengths, or, without it,
// each sequence's last real row + 1 (its length when the bin holds whole sequences).
void fill_sequence_lengths(const PackedBin& bin, std::vector<std::int64_t>& lengths) {
  const std::int64_t sequences = bin.cu_seqlens.size(0) - 1;
  lengths.assign(static_cast<std::size_t>(sequences), 0);
  if (bin.sequence_lengths.defined()) {
    require_i32_vector(bin.sequence_lengths, "sequence_lengths", sequences);
    if (bin.sequence_lengths.device() != core::Device::cpu)
      core::throw_data_error("bin.sequence_lengths", "must be a host tensor");
    const std::int32_t* given = bin.sequence_lengths.data<std::int32_t>();
    for (std::int64_t s = 0; s < sequences; ++s) lengths[static_cast<std::size_t>(s)] = given[s];
    return;
  }
  const Tensor& positions = bin.host_positions.defined() ? bin.host_positions : bin.positions;
  if (positions.device() != core::Device::cpu ||
      (bin.token_is_real.defined() && bin.token_is_real.device() != core::Device::cpu))
    core::throw_data_error("bin.sequence_lengths",
                           "needed for rope_type dynamic when the rows are device tensors (the "
                           "real length of each sequence is then not read from them)");
  const std::int32_t* cu = bin.cu_seqlens.data<std::int32_t>();
  const std::int32_t* position = positions.data<std::int32_t>();
  const std::uint8_t* real =
      bin.token_is_real.defined() ? bin.token_is_real.data<std::uint8_t>() : nullptr;
  for (std::int64_t s = 0; s < sequences; ++s) {
    for (std::int32_t row = cu[s]; row < cu[s + 1]; ++row) {
      if (real != nullptr && real[row] == 0) continue;
      auto& length = lengths[static_cast<std::size_t>(s)];
      length = std::max<std::int64_t>(length, std::int64_t{position[row]} + 1);
    }
  }
}

void check_bin(const PackedBin& bin) {
  require_i32_vector(bin.token_ids, "token_ids", -1);
  const std::int64_t tokens = bin.token_ids.size(0);
  require_i32_vector(bin.labels, "labels", tokens);
  require_i32_vector(bin.positions, "positions", tokens);
  require_i32_vector(bin.cu_seqlens, "cu_seqlens", -1);
  const std::int32_t* cu = bin.cu_seqlens.data<std::int32_t>();
  const std::int64_t entries = bin.cu_seqlens.size(0);
  if (entries < 2 || cu[0] != 0 || cu[entries - 1] != tokens)
    core::throw_data_error("bin.cu_seqlens", "must start at 0 and end at the " +
                                                 std::to_string(tokens) + " tokens of the bin");
  for (std::int64_t s = 1; s < entries; ++s)
    if (cu[s] < cu[s - 1])
      core::throw_data_error("bin.cu_seqlens", "decreases at entry " + std::to_string(s) + " (" +
                                                   std::to_string(cu[s - 1]) + " -> " +
                                                   std::to_string(cu[s]) + ")");
  if (bin.token_is_real.defined() &&
      (bin.token_is_real.dtype() != DType::u8 || bin.token_is_real.numel() != tokens))
    core::throw_data_error("bin.token_is_real", "expected u8 [" + std::to_string(tokens) +
                                                    "], got " + bin.token_is_real.describe());
  if (bin.loss_mask.defined() &&
      (bin.loss_mask.dtype() != DType::u8 || bin.loss_mask.numel() != tokens))
    core::throw_data_error("bin.loss_mask", "expected u8 [" + std::to_string(tokens) + "], got " +
                                                bin.loss_mask.describe());
}

// The bin's positions and the model's MoE and recompute settings, as every layer reads them.
void set_bin_and_moe_options(LayerRunContext& run, const PackedBin& bin,
                             const ModelOptions& model_options, const BinOptions& options,
                             std::vector<std::int64_t>& sequence_lengths) {
  run.positions = bin.positions;
  run.cu_seqlens = bin.cu_seqlens;
  run.token_is_real = bin.token_is_real;
  if (run.architecture->rope_scaling.rope_type == "dynamic") {
    fill_sequence_lengths(bin, sequence_lengths);
    run.sequence_lengths = sequence_lengths;
  }
  run.aux_loss = model_options.aux_loss;
  run.aux_num_sequences_global = options.aux_num_sequences_global;
  run.aux_loss_grad_scale = options.aux_loss_grad_scale;
  run.recompute = model_options.selective;
  run.moe_grouped_gemm = model_options.moe_grouped_gemm;
  run.moe_permute_fusion = model_options.moe_permute_fusion;
  run.moe_shared_expert_overlap = model_options.moe_shared_expert_overlap;
  run.moe_router_force_load_balancing = model_options.moe_router_force_load_balancing;
}

// The aux losses the chunk's layers left in device memory (a row per whole-model layer), summed
// in layer order as the returned values are (dense layers' rows stay 0): one copy to the host.
double sum_of_layer_aux_losses(const Tensor& aux_losses, core::Arena& host,
                               const Qwen3MoeParameters& parameters, std::size_t first,
                               std::size_t count) {
  const Tensor host_aux = host.allocate(aux_losses.shape(), DType::f64);
  host_aux.copy_from(aux_losses);
  const double* values = host_aux.data<double>();
  double sum = 0.0;
  for (std::size_t layer = first; layer < first + count; ++layer)
    sum += values[parameters.layer_id(layer)];
  return sum;
}

// Before a full-attention layer's backward: the seam may start the exchange of the K / V its
// attention backward reads (they exist from the forward or its recomputation).
void prepare_attention_backward(const LayerRunContext& run, int layer,
                                const DecoderLayerParams& params,
                                const DecoderLayerActivations& saved) {
  if (params.mixer == config::LayerMixer::full_attention)
    run.seams.attention->prepare_backward(run.seam, layer, saved.k, saved.v);
}

// A model built for a TP rank runs only with the seam of that rank's TP group.
void check_tensor_parallel_seam(const TensorParallelShape& tensor_parallel, const BinSeams& seams) {
  if (tensor_parallel.active() &&
      (seams.tensor_parallel == nullptr || seams.tensor_parallel->size() != tensor_parallel.size ||
       seams.tensor_parallel->rank() != tensor_parallel.index))
    core::throw_runtime_error("a model built for TP rank " + std::to_string(tensor_parallel.index) +
                              " of " + std::to_string(tensor_parallel.size) +
                              " needs the tensor-parallel seam of that rank's TP group");
}

}  // namespace

MicrobatchState::MicrobatchState(core::Device device, std::size_t layers, bool in_scratch)
    : activations("model.activations", core::Arena::kDefaultBlockBytes, device),
      layer_saves("model.layer_saves", core::Arena::kDefaultBlockBytes, device),
      host_saves("model.host_saves", std::size_t{1} << 20),
      layer_inputs(layers),
      per_layer(layers),
      saved_from(layers),
      stream_in_scratch(in_scratch) {}

std::size_t MicrobatchState::high_water_bytes() const {
  return activations.high_water_bytes() + layer_saves.high_water_bytes();
}

std::size_t Qwen3MoeModel::chunk_positions(const ChunkPass& chunk) const {
  // A chunk without layers (the embedding or loss counted in the split) reads no layer.
  const std::int64_t first =
      chunk.num_layers == 0 ? 0 : parameters_.position_of_layer(chunk.first_layer);
  bool held = first >= 0 && chunk.num_layers >= 0;
  for (std::int64_t j = 0; held && j < chunk.num_layers; ++j)
    held = parameters_.position_of_layer(chunk.first_layer + j) == first + j;
  const ModelPart& part = parameters_.part();
  if (!held || (chunk.embedding && !part.embedding) || (chunk.loss && !part.head))
    core::throw_runtime_error("a chunk of layers [" + std::to_string(chunk.first_layer) + ", " +
                              std::to_string(chunk.first_layer + chunk.num_layers) + ")" +
                              (chunk.embedding ? " with the embedding" : "") +
                              (chunk.loss ? " with the loss" : "") +
                              " is not held by this model part");
  return static_cast<std::size_t>(first);
}

BinResult Qwen3MoeModel::forward_chunk(MicrobatchState& state, const PackedBin& bin,
                                       const BinSeams& seams, const BinOptions& options,
                                       const ChunkPass& chunk, const Tensor& input,
                                       const Tensor& output) {
  check_bin(bin);
  DYNCP_CHECK(seams.attention != nullptr && seams.experts != nullptr && seams.statistics != nullptr,
              "run_bin needs the attention, expert and statistics seams");
  check_tensor_parallel_seam(parameters_.tensor_parallel(), seams);
  const std::size_t first = chunk_positions(chunk);
  const auto count = static_cast<std::size_t>(chunk.num_layers);
  const bool has_linear_attention =
      std::any_of(parameters_.layers.begin() + static_cast<std::ptrdiff_t>(first),
                  parameters_.layers.begin() + static_cast<std::ptrdiff_t>(first + count),
                  [](const DecoderLayerParams& layer) {
                    return layer.mixer == config::LayerMixer::linear_attention;
                  });
  if (has_linear_attention && seams.linear_attention == nullptr)
    core::throw_runtime_error(
        "this layout has no linear-attention seam, which Gated DeltaNet layers need");
  state.activations.reset();
  scratch_.reset();
  state.layer_saves.reset();
  state.host_saves.reset();
  state.stream_scope.reset();
  state.bin = &bin;
  state.options = options;
  state.chunk = chunk;
  state.first_position = first;

  const auto& a = parameters_.local_architecture();
  const DType dtype = parameters_.all_values().dtype();
  const std::int64_t hidden = a.hidden_size;
  // The residual stream's rows: every row of the bin, or under sequence parallelism this TP
  // rank's equal share (the alignment pads every sequence to a multiple of tp).
  const TensorParallelShape& tensor_parallel = parameters_.tensor_parallel();
  const bool sequence_parallel = tensor_parallel.active() && tensor_parallel.sequence_parallel;
  if (sequence_parallel && bin.token_ids.size(0) % tensor_parallel.size != 0)
    core::throw_data_error("bin.token_ids",
                           std::to_string(bin.token_ids.size(0)) + " rows do not divide over " +
                               std::to_string(tensor_parallel.size) +
                               " TP ranks (sequence parallelism pads every sequence to a "
                               "multiple of 2 x cp x tp)");
  const std::int64_t rows = stage_rows(bin);
  if (!chunk.embedding && (input.dtype() != dtype || input.rank() != 2 || input.size(0) != rows ||
                           input.size(1) != hidden))
    core::throw_runtime_error("forward_chunk: the input must be [" + std::to_string(rows) + ", " +
                              std::to_string(hidden) + "] " + std::string(core::dtype_name(dtype)) +
                              ", got " + input.describe());
  auto& inputs = state.layer_inputs;
  auto& per_layer = state.per_layer;
  auto& saved_from = state.saved_from;

  LayerRunContext& run = state.run;
  run = LayerRunContext{};
  run.seam.ops.device = options_.device;
  run.seam.ops.precision = options_.precision;
  run.seam.host = &state.host_saves;
  run.seam.ops.scratch = &scratch_;
  run.seam.bf16_activations = bf16_activations_;
  run.seam.activations = &state.layer_saves;  // what a layer saves for its backward
  run.seam.scratch = &scratch_;
  run.seams = seams;
  run.architecture = &a;
  run.sequence_parallel = sequence_parallel;
  set_bin_and_moe_options(run, bin, options_, options, state.sequence_lengths);

  SeamContext bin_context = run.seam;
  bin_context.activations = &state.activations;
  const LocalBinLayout layout{bin.cu_seqlens, bin.positions,
                              bin.host_positions.defined() ? bin.host_positions : bin.positions,
                              static_cast<std::int32_t>(architecture().sliding_window)};
  seams.attention->begin_bin(bin_context, layout);
  if (has_linear_attention) seams.linear_attention->begin_bin(bin_context, layout);

  BinResult result;
  // On the GPU the layers leave their aux losses in device memory (a row per whole-model
  // layer); one copy brings them back.
  if (run.aux_loss != ops::MoeAuxLossType::none && options_.device == core::Device::cuda) {
    run.aux_losses = state.activations.allocate({a.num_hidden_layers, 1}, DType::f64);
    run.aux_losses.fill_zero();
  }
  // bf16 activations: the kept layer inputs are bf16 and the layers run on two fp32 buffers
  // (the residual stream rounded to bf16 at every layer boundary, as Megatron keeps its hidden
  // states), which live until the final norm's backward: in scratch for run_bin, in the state's
  // arena for a pipeline pass. The final norm's input (the last layer's output) stays fp32.
  if (bf16_activations_ && state.stream_in_scratch) state.stream_scope.emplace(scratch_);
  core::Arena& stream_arena =
      bf16_activations_ && state.stream_in_scratch ? scratch_ : state.activations;
  Tensor current = stream_arena.allocate({rows, hidden}, dtype);
  Tensor spare = bf16_activations_ ? stream_arena.allocate({rows, hidden}, dtype) : Tensor{};
  if (chunk.embedding)
    embedding_forward(state, current);
  else
    current.copy_from(input);
  const auto recomputed = [this, first](std::size_t position) {
    return options_.recompute_full &&
           (options_.recompute_first_layers < 0 ||
            static_cast<std::int64_t>(position - first) < options_.recompute_first_layers);
  };
  for (std::size_t layer = first; layer < first + count; ++layer) {
    const int layer_id = static_cast<int>(parameters_.layer_id(layer));
    options.before_forward_of(layer_id);
    if (bf16_activations_) {
      inputs[layer] = state.activations.allocate({rows, hidden}, DType::bf16);
      ops::convert(run.seam.ops, current, inputs[layer]);
      ops::convert(run.seam.ops, inputs[layer], current);  // the layer reads what it keeps
    } else {
      inputs[layer] = current;
    }
    const Tensor layer_output =
        bf16_activations_ ? spare : state.activations.allocate({rows, hidden}, dtype);
    saved_from[layer] = state.layer_saves.mark();
    result.aux_loss += decoder_layer_forward(run, layer_id, parameters_.layers[layer], current,
                                             per_layer[layer], layer_output);
    // A recomputed layer keeps only its input; backward rebuilds the rest.
    if (recomputed(layer)) state.layer_saves.release(saved_from[layer]);
    spare = current;
    current = layer_output;
  }
  state.chunk_output = current;
  if (run.aux_losses.defined())
    result.aux_loss +=
        sum_of_layer_aux_losses(run.aux_losses, state.host_saves, parameters_, first, count);
  if (chunk.loss)
    head_and_loss_forward(state, stream_arena, current, result);
  else
    output.copy_from(current);
  state.awaiting_backward = options.compute_gradients;
  return result;
}

void Qwen3MoeModel::backward_chunk(MicrobatchState& state, const Tensor& output_grad,
                                   const Tensor& input_grad) {
  if (!state.awaiting_backward)
    core::throw_runtime_error("backward_chunk: this state holds no forward awaiting its backward");
  state.awaiting_backward = false;
  const DType dtype = parameters_.all_values().dtype();
  const std::int64_t rows = stage_rows(*state.bin);
  const std::int64_t hidden = parameters_.architecture().hidden_size;
  const std::size_t first = state.first_position;
  const auto count = static_cast<std::size_t>(state.chunk.num_layers);
  LayerRunContext& run = state.run;
  auto& inputs = state.layer_inputs;
  // The residual-stream gradient, updated in place layer by layer.
  const Tensor grad = state.activations.allocate({rows, hidden}, dtype);
  if (state.chunk.loss)
    head_and_loss_backward(state, grad);
  else
    grad.copy_from(output_grad);
  state.stream_scope
      .reset();  // bf16 activations in scratch: the fp32 stream and the final norm's rows go
  for (std::size_t layer = first + count; layer-- > first;) {
    const int layer_id = static_cast<int>(parameters_.layer_id(layer));
    // bf16 activations: the layer's input widened into scratch for its recompute and backward.
    std::optional<core::ArenaScope> widened_scope;
    Tensor input = inputs[layer];
    if (bf16_activations_) {
      widened_scope.emplace(scratch_);
      input = scratch_.allocate({rows, hidden}, dtype);
      ops::convert(run.seam.ops, inputs[layer], input);
    }
    // Kept layers sit below this point in reverse order of backward, so releasing to where a
    // layer's saves start frees exactly that layer; a recomputed one saves above the top.
    const bool recomputed = options_.recompute_full && (options_.recompute_first_layers < 0 ||
                                                        static_cast<std::int64_t>(layer - first) <
                                                            options_.recompute_first_layers);
    if (recomputed) {
      state.saved_from[layer] = state.layer_saves.mark();
      const Tensor discarded_output = state.layer_saves.allocate({rows, hidden}, dtype);
      decoder_layer_forward(run, layer_id, parameters_.layers[layer], input, state.per_layer[layer],
                            discarded_output);
    }
    // The attention's K / V exchange may start before the MLP backward: its buffers stay in
    // scratch until the layer's backward returns.
    const core::ArenaScope exchange_scope(scratch_);
    prepare_attention_backward(run, layer_id, parameters_.layers[layer], state.per_layer[layer]);
    decoder_layer_backward(run, layer_id, parameters_.layers[layer], input, state.per_layer[layer],
                           grad);
    state.layer_saves.release(state.saved_from[layer]);
    state.options.after_backward_of(layer_id);
  }
  if (state.chunk.embedding)
    embedding_backward(state, grad);
  else
    input_grad.copy_from(grad);
}

}  // namespace dyncp::model
