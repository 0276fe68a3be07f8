#include "model/qwen3_moe_model.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/decoder_layer.hpp"
#include "model/microbatch_state.hpp"
#include "model/vocab_parallel.hpp"
#include "ops/elementwise.hpp"
#include "ops/rmsnorm.hpp"

namespace dyncp::model {

using core::DType;

Qwen3MoeModel::Qwen3MoeModel(const config::ModelArchitecture& architecture, ModelOptions options)
    : parameters_(architecture, options.experts, options.dtype, options.device,
                  options.tensor_parallel, options.part),
      options_(options),
      scratch_("model.scratch", core::Arena::kDefaultBlockBytes, options.device) {
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
  single_pass_ = std::make_unique<MicrobatchState>(options.device, parameters_.layers.size(),
                                                   /*stream_in_scratch=*/true);
}

Qwen3MoeModel::~Qwen3MoeModel() = default;

std::size_t Qwen3MoeModel::activation_high_water_bytes() const {
  std::size_t bytes = scratch_.high_water_bytes() + single_pass_->high_water_bytes();
  for (const auto& state : microbatch_states_) bytes += state->high_water_bytes();
  return bytes;
}

MicrobatchState& Qwen3MoeModel::microbatch_state(std::size_t index) {
  while (microbatch_states_.size() <= index) {
    microbatch_states_.push_back(std::make_unique<MicrobatchState>(
        options_.device, parameters_.layers.size(), /*stream_in_scratch=*/false));
  }
  return *microbatch_states_[index];
}

BinResult Qwen3MoeModel::run_bin(const PackedBin& bin, const BinSeams& seams,
                                 const BinOptions& options) {
  const ModelPart& part = parameters_.part();
  const auto layers = static_cast<std::int64_t>(parameters_.layers.size());
  if (!part.embedding || !part.head || layers != architecture().num_hidden_layers)
    core::throw_runtime_error(
        "run_bin runs the whole model; a pipeline stage's part runs forward_chunk / "
        "backward_chunk");
  const ChunkPass whole{0, layers, /*embedding=*/true, /*loss=*/true};
  const BinResult result = forward_chunk(*single_pass_, bin, seams, options, whole, {}, {});
  if (options.compute_gradients) backward_chunk(*single_pass_, {}, {});
  return result;
}

void Qwen3MoeModel::embedding_forward(const MicrobatchState& state, const Tensor& hidden) const {
  state.options.before_forward_of(-1);
  vocabulary_embedding_forward(state.run, state.bin->token_ids, parameters_.embed_tokens.value,
                               hidden);
}

void Qwen3MoeModel::embedding_backward(const MicrobatchState& state, const Tensor& grad) const {
  vocabulary_embedding_backward(state.run, state.bin->token_ids, grad,
                                parameters_.embed_tokens.grad, architecture().pad_token_id);
}

void Qwen3MoeModel::head_and_loss_forward(MicrobatchState& state, core::Arena& stream_arena,
                                          const Tensor& hidden, BinResult& result) {
  const auto& a = parameters_.architecture();
  const DType dtype = hidden.dtype();
  const std::int64_t rows = hidden.size(0);  // the stream's rows (SP: this TP rank's share)
  const BinOptions& options = state.options;
  const ops::OpContext& ctx = state.run.seam.ops;
  options.before_forward_of(a.num_hidden_layers);
  state.final_norm_saved = ops::RmsNormSaved{state.activations.allocate({rows}, dtype)};
  const Tensor normed_final = stream_arena.allocate({rows, a.hidden_size}, dtype);
  ops::rmsnorm_forward(ctx, hidden, parameters_.final_norm.value, a.rms_norm_eps,
                       residual_norm_variant(a), normed_final, state.final_norm_saved);

  Tensor dlm_head;
  state.dnormed_final = Tensor{};
  if (options.compute_gradients) {
    state.dnormed_final = stream_arena.allocate({rows, a.hidden_size}, dtype);
    dlm_head = parameters_.lm_head.grad;
  }
  ops::CrossEntropyOptions cross_entropy_options;
  cross_entropy_options.token_chunk = options_.cross_entropy_token_chunk;
  cross_entropy_options.vocab_chunk = options_.cross_entropy_vocab_chunk;
  cross_entropy_options.grad_scale = options.loss_grad_scale;
  const auto cross_entropy = vocabulary_cross_entropy(
      state.run, normed_final, parameters_.lm_head.value, state.bin->labels, state.bin->loss_mask,
      options.per_token_loss, state.dnormed_final, dlm_head, cross_entropy_options,
      options.final_hidden);
  result.loss_sum = cross_entropy.loss_sum;
  result.loss_tokens = cross_entropy.num_loss_tokens;
}

void Qwen3MoeModel::head_and_loss_backward(MicrobatchState& state, const Tensor& grad) {
  ops::rmsnorm_backward(state.run.seam.ops, state.dnormed_final, state.chunk_output,
                        parameters_.final_norm.value, residual_norm_variant(architecture()),
                        state.final_norm_saved, grad, parameters_.final_norm.grad);
}

}  // namespace dyncp::model
