#include "model/qwen3_moe_model.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/decoder_layer.hpp"
#include "model/vocab_parallel.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/elementwise.hpp"
#include "ops/embedding.hpp"
#include "ops/rmsnorm.hpp"

namespace dyncp::model {

using core::DType;

struct Qwen3MoeModel::LayerActivations {
  // L + 1 tensors [T, h]; the last is the output (the final norm's input). With bf16
  // activations the first L are bf16 and the last is fp32 scratch.
  std::vector<Tensor> layer_inputs;
  std::vector<DecoderLayerActivations> per_layer;  // empty views under recompute
  // Where each kept layer's saved activations start in the layer arena: released after the
  // layer's backward (layers are saved in order and released in reverse).
  std::vector<core::Arena::Mark> saved_from;
};

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

// The aux losses the layers left in device memory, summed in layer order as the returned
// values are (dense layers' rows stay 0): one copy to the host.
double sum_of_layer_aux_losses(const Tensor& aux_losses, core::Arena& host) {
  const Tensor host_aux = host.allocate(aux_losses.shape(), DType::f64);
  host_aux.copy_from(aux_losses);
  const double* values = host_aux.data<double>();
  double sum = 0.0;
  for (std::int64_t l = 0; l < host_aux.numel(); ++l) sum += values[l];
  return sum;
}

ops::CrossEntropyOptions cross_entropy_options_for(const ModelOptions& model_options,
                                                   const BinOptions& options) {
  ops::CrossEntropyOptions cross_entropy_options;
  cross_entropy_options.token_chunk = model_options.cross_entropy_token_chunk;
  cross_entropy_options.vocab_chunk = model_options.cross_entropy_vocab_chunk;
  cross_entropy_options.grad_scale = options.loss_grad_scale;
  return cross_entropy_options;
}

// Before a full-attention layer's backward: the seam may start the exchange of the K / V its
// attention backward reads (they exist from the forward or its recomputation).
void prepare_attention_backward(const LayerRunContext& run, int layer,
                                const DecoderLayerParams& params,
                                const DecoderLayerActivations& saved) {
  if (params.mixer == config::LayerMixer::full_attention)
    run.seams.attention->prepare_backward(run.seam, layer, saved.k, saved.v);
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

}  // namespace

Qwen3MoeModel::Qwen3MoeModel(const config::ModelArchitecture& architecture, ModelOptions options)
    : parameters_(architecture, options.experts, options.dtype, options.device,
                  options.tensor_parallel),
      options_(options),
      activations_("model.activations", core::Arena::kDefaultBlockBytes, options.device),
      scratch_("model.scratch", core::Arena::kDefaultBlockBytes, options.device),
      host_saves_("model.host_saves", std::size_t{1} << 20) {
  layer_saves_ = std::make_unique<core::Arena>("model.layer_saves", core::Arena::kDefaultBlockBytes,
                                               options.device);
  if (options.precision == ops::ComputePrecision::bf16 && options.dtype != DType::f32) {
    core::throw_runtime_error(
        "Qwen3MoeModel: bf16 products round fp32 weights and activations; "
        "build the model with dtype f32 (got " +
        std::string(core::dtype_name(options.dtype)) + ")");
  }
  const bool bf16_products = options.precision == ops::ComputePrecision::bf16;
  bf16_activations_ =
      options.bf16_activations.value_or(bf16_products && options.device == core::Device::cuda);
  if (bf16_activations_ && !bf16_products)
    core::throw_runtime_error(
        "Qwen3MoeModel: bf16 activation storage needs bf16 products (mixed_precision: "
        "bf16_mixed); an fp32 run keeps every activation in fp32");
  layer_activations_ = std::make_unique<LayerActivations>();
  const auto layers = static_cast<std::size_t>(parameters_.architecture().num_hidden_layers);
  layer_activations_->layer_inputs.resize(layers + 1);
  layer_activations_->per_layer.resize(layers);
  layer_activations_->saved_from.resize(layers);
}

Qwen3MoeModel::~Qwen3MoeModel() = default;

std::size_t Qwen3MoeModel::activation_high_water_bytes() const {
  return activations_.high_water_bytes() + scratch_.high_water_bytes() +
         layer_saves_->high_water_bytes();
}

BinResult Qwen3MoeModel::run_bin(const PackedBin& bin, const BinSeams& seams,
                                 const BinOptions& options) {
  check_bin(bin);
  DYNCP_CHECK(seams.attention != nullptr && seams.experts != nullptr && seams.statistics != nullptr,
              "run_bin needs the attention, expert and statistics seams");
  const TensorParallelShape& tensor_parallel = parameters_.tensor_parallel();
  if (tensor_parallel.active() &&
      (seams.tensor_parallel == nullptr || seams.tensor_parallel->size() != tensor_parallel.size ||
       seams.tensor_parallel->rank() != tensor_parallel.index))
    core::throw_runtime_error("a model built for TP rank " + std::to_string(tensor_parallel.index) +
                              " of " + std::to_string(tensor_parallel.size) +
                              " needs the tensor-parallel seam of that rank's TP group");
  const bool has_linear_attention = std::any_of(
      parameters_.layers.begin(), parameters_.layers.end(), [](const DecoderLayerParams& layer) {
        return layer.mixer == config::LayerMixer::linear_attention;
      });
  if (has_linear_attention && seams.linear_attention == nullptr)
    core::throw_runtime_error(
        "this layout has no linear-attention seam, which Gated DeltaNet layers need");
  activations_.reset();
  scratch_.reset();
  layer_saves_->reset();
  host_saves_.reset();

  const auto& a = parameters_.local_architecture();
  const DType dtype = parameters_.all_values().dtype();
  const std::int64_t tokens = bin.token_ids.size(0);
  const std::int64_t hidden = a.hidden_size;
  // The residual stream's rows: every row of the bin, or under sequence parallelism this TP
  // rank's equal share (the alignment pads every sequence to a multiple of tp).
  const bool sequence_parallel = tensor_parallel.active() && tensor_parallel.sequence_parallel;
  if (sequence_parallel && tokens % tensor_parallel.size != 0)
    core::throw_data_error("bin.token_ids",
                           std::to_string(tokens) + " rows do not divide over " +
                               std::to_string(tensor_parallel.size) +
                               " TP ranks (sequence parallelism pads every sequence to a "
                               "multiple of 2 x cp x tp)");
  const std::int64_t rows = sequence_parallel ? tokens / tensor_parallel.size : tokens;
  auto& inputs = layer_activations_->layer_inputs;
  auto& per_layer = layer_activations_->per_layer;
  auto& saved_from = layer_activations_->saved_from;

  LayerRunContext run;
  run.seam.ops.device = options_.device;
  run.seam.ops.precision = options_.precision;
  run.seam.host = &host_saves_;
  run.seam.ops.scratch = &scratch_;
  run.seam.bf16_activations = bf16_activations_;
  const auto recomputed = [this](std::size_t layer) {
    return options_.recompute_full &&
           (options_.recompute_first_layers < 0 ||
            static_cast<std::int64_t>(layer) < options_.recompute_first_layers);
  };
  run.seam.activations = layer_saves_.get();  // what a layer saves for its backward
  run.seam.scratch = &scratch_;
  run.seams = seams;
  run.architecture = &a;
  run.sequence_parallel = sequence_parallel;
  set_bin_and_moe_options(run, bin, options_, options, sequence_lengths_);

  SeamContext bin_context = run.seam;
  bin_context.activations = &activations_;
  const LocalBinLayout layout{bin.cu_seqlens, bin.positions,
                              bin.host_positions.defined() ? bin.host_positions : bin.positions,
                              static_cast<std::int32_t>(architecture().sliding_window)};
  seams.attention->begin_bin(bin_context, layout);
  if (has_linear_attention) seams.linear_attention->begin_bin(bin_context, layout);

  BinResult result;
  // On the GPU the layers leave their aux losses in device memory; one copy brings them back.
  if (run.aux_loss != ops::MoeAuxLossType::none && options_.device == core::Device::cuda) {
    run.aux_losses =
        activations_.allocate({static_cast<std::int64_t>(per_layer.size()), 1}, DType::f64);
    run.aux_losses.fill_zero();
  }
  // bf16 activations: the kept layer inputs are bf16 and the layers run on two fp32 buffers in
  // scratch (the residual stream rounded to bf16 at every layer boundary, as Megatron keeps its
  // hidden states), which live until the final norm's backward. The final norm's input (the last
  // layer's output) stays fp32.
  std::optional<core::ArenaScope> stream_scope;
  if (bf16_activations_) stream_scope.emplace(scratch_);
  core::Arena& stream_arena = bf16_activations_ ? scratch_ : activations_;
  Tensor current = stream_arena.allocate({rows, hidden}, dtype);
  Tensor spare = bf16_activations_ ? scratch_.allocate({rows, hidden}, dtype) : Tensor{};
  options.before_forward_of(-1);
  vocabulary_embedding_forward(run, bin.token_ids, parameters_.embed_tokens.value, current);
  for (std::size_t layer = 0; layer < per_layer.size(); ++layer) {
    options.before_forward_of(static_cast<std::int64_t>(layer));
    if (bf16_activations_) {
      inputs[layer] = activations_.allocate({rows, hidden}, DType::bf16);
      ops::convert(run.seam.ops, current, inputs[layer]);
      ops::convert(run.seam.ops, inputs[layer], current);  // the layer reads what it keeps
    } else {
      inputs[layer] = current;
    }
    const Tensor output = bf16_activations_ ? spare : activations_.allocate({rows, hidden}, dtype);
    saved_from[layer] = layer_saves_->mark();
    result.aux_loss += decoder_layer_forward(
        run, static_cast<int>(layer), parameters_.layers[layer], current, per_layer[layer], output);
    // A recomputed layer keeps only its input; backward rebuilds the rest.
    if (recomputed(layer)) layer_saves_->release(saved_from[layer]);
    spare = current;
    current = output;
  }
  inputs.back() = current;
  if (run.aux_losses.defined())
    result.aux_loss += sum_of_layer_aux_losses(run.aux_losses, host_saves_);

  options.before_forward_of(static_cast<std::int64_t>(per_layer.size()));
  ops::RmsNormSaved final_norm_saved{activations_.allocate({rows}, dtype)};
  const Tensor normed_final = stream_arena.allocate({rows, hidden}, dtype);
  const ops::RmsNormVariant norm_variant = residual_norm_variant(a);
  ops::rmsnorm_forward(run.seam.ops, inputs.back(), parameters_.final_norm.value, a.rms_norm_eps,
                       norm_variant, normed_final, final_norm_saved);

  Tensor dnormed_final;
  Tensor dlm_head;
  if (options.compute_gradients) {
    dnormed_final = stream_arena.allocate({rows, hidden}, dtype);
    dlm_head = parameters_.lm_head.grad;
  }
  const auto cross_entropy = vocabulary_cross_entropy(
      run, normed_final, parameters_.lm_head.value, bin.labels, bin.loss_mask,
      options.per_token_loss, dnormed_final, dlm_head, cross_entropy_options_for(options_, options),
      options.final_hidden);
  result.loss_sum = cross_entropy.loss_sum;
  result.loss_tokens = cross_entropy.num_loss_tokens;
  if (!options.compute_gradients) return result;

  // The residual-stream gradient, updated in place layer by layer.
  const Tensor grad = activations_.allocate({rows, hidden}, dtype);
  ops::rmsnorm_backward(run.seam.ops, dnormed_final, inputs.back(), parameters_.final_norm.value,
                        norm_variant, final_norm_saved, grad, parameters_.final_norm.grad);
  stream_scope.reset();  // bf16 activations: the fp32 stream and the final norm's rows go
  for (std::size_t layer = per_layer.size(); layer-- > 0;) {
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
    if (recomputed(layer)) {
      saved_from[layer] = layer_saves_->mark();
      const Tensor discarded_output = layer_saves_->allocate({rows, hidden}, dtype);
      decoder_layer_forward(run, static_cast<int>(layer), parameters_.layers[layer], input,
                            per_layer[layer], discarded_output);
    }
    // The attention's K / V exchange may start before the MLP backward: its buffers stay in
    // scratch until the layer's backward returns.
    const core::ArenaScope exchange_scope(scratch_);
    prepare_attention_backward(run, static_cast<int>(layer), parameters_.layers[layer],
                               per_layer[layer]);
    decoder_layer_backward(run, static_cast<int>(layer), parameters_.layers[layer], input,
                           per_layer[layer], grad);
    layer_saves_->release(saved_from[layer]);
    options.after_backward_of(static_cast<std::int64_t>(layer));
  }
  vocabulary_embedding_backward(run, bin.token_ids, grad, parameters_.embed_tokens.grad,
                                architecture().pad_token_id);
  return result;
}

}  // namespace dyncp::model
