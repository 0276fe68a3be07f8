#pragma once
// Qwen3-MoE (qwen-moe.md §2.2) and the hybrid Qwen3-Next / Qwen3.5-MoE (§3) forward and
// backward over ONE packed THD bin:
//   embedding → per layer [RMSNorm → token mixer → residual → RMSNorm → router → experts
//   (ExpertDispatcher seam) (+ the gated shared expert of the hybrid family), or a dense SwiGLU
//   MLP on mlp_only / decoder_sparse_step layers → residual] → final norm → LM head +
//   cross-entropy (fused, chunked).
// Token mixer per layer_types: full attention (q/k/v proj → q/k norm → RoPE with global
// positions → AttentionContext seam → [σ(gate) for the hybrid's gated attention] → o_proj) or
// Gated DeltaNet (projections and gates → LinearAttentionContext seam → gated norm → out_proj).
// The hybrid family's residual, final and q/k norms are zero-centred (1 + w).
//
// The loss is the SUM of per-token cross-entropy over rows with a label >= 0 (and loss_mask 1),
// returned with the count of those rows; normalisation happens outside (the trainer divides by
// the global token count, dyncp-check by the batch's). Parameter gradients ACCUMULATE (+=)
// across calls, so micro-batches add up; call parameters().zero_grads() once per step.
//
// Activations come from grow-only arenas owned by the model (one set per microbatch a pipeline
// stage keeps in flight): after the first bins of the largest size no call allocates heap
// memory. With recompute (recompute_granularity = full) a
// recomputed layer keeps only its input during forward and re-runs its forward inside backward;
// every layer is recomputed, or only the first recompute_first_layers (block method). Selective
// recomputation (ModelOptions::selective) drops single tensors
// of every layer instead and rebuilds them in that layer's backward.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "config/recompute_modules.hpp"
#include "core/arena.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "model/seams.hpp"
#include "ops/moe_aux_loss.hpp"

namespace dyncp::model {

// One packed bin as this rank holds it. All host i32 tensors. Labels are computed on whole
// sequences BEFORE a CP shard is cut, so the last row of a zigzag chunk keeps its next token even
// when that token lives on another rank.
struct PackedBin {
  Tensor token_ids;   // [T]
  Tensor labels;      // [T]: target of each row (the next token), negative = no loss
  Tensor positions;   // [T]: global position of each row inside its sequence (RoPE, causality)
  Tensor cu_seqlens;  // [S + 1]: local rows of sequence s are [cu[s], cu[s+1])
  Tensor loss_mask;   // u8 [T] or undefined (then every row with a label >= 0 counts)
  // u8 [T]: 1 for real tokens, 0 for alignment padding, or undefined (every row real). The MoE
  // aux-loss statistics count real tokens only, so padding (which differs between layouts)
  // never changes the loss.
  Tensor token_is_real;
  // The positions on the host when `positions` is a device tensor (undefined otherwise): the
  // seams' work counters and schedules read them on the host.
  Tensor host_positions;
  // i32 [S] on the host: real tokens of each whole sequence (the same on every rank of a CP
  // group), which dynamic RoPE's frequencies depend on. Undefined: each sequence's last real
  // row here + 1, which is the length when the bin holds whole sequences.
  Tensor sequence_lengths;
};

struct ModelOptions {
  bool recompute_full = false;  // recompute_granularity = full
  // With recompute_full: recompute only layers [0, n) (recompute_method = block); -1: every
  // layer (uniform).
  std::int64_t recompute_first_layers = -1;
  // recompute_granularity = selective (config/recompute_modules.hpp): what each layer leaves
  // out of its saved activations and rebuilds in its backward with the same ops, so loss and
  // gradients are bitwise those without.
  config::SelectiveRecompute selective;
  ExpertRange experts;  // experts held by this rank (default: all)
  // Tensor parallelism: this rank's piece of every split weight and whether the residual
  // stream is split by rows (tensor_parallel.hpp). run_bin then needs BinSeams::tensor_parallel
  // over the TP group.
  TensorParallelShape tensor_parallel;
  // The layers (embedding, head) held by this rank: one pipeline stage's (default: all).
  ModelPart part;
  // f32 (training) or f64 (finite-difference checks): parameters, gradients and activations.
  // HF checkpoints load into either; the per_token_loss / final_hidden outputs of BinOptions
  // must have the same dtype.
  core::DType dtype = core::DType::f32;
  // Where parameters, gradients and activations live and the ops run. On cuda the bin's
  // token_ids, labels, positions, loss_mask and token_is_real are device tensors and
  // cu_seqlens stays on the host; per_token_loss / final_hidden may be on either device.
  core::Device device = core::Device::cpu;
  // mixed_precision: bf16 makes the matrix products and attention read bf16-rounded weights and
  // activations (ops::ComputePrecision); parameters (the fp32 master weights), gradients (fp32
  // main_grad) and the element-wise ops stay in `dtype`, which must then be f32.
  ops::ComputePrecision precision = ops::ComputePrecision::fp32;
  // bf16 storage of activations under bf16 products (docs/precision.md, Megatron's bf16
  // activations): the layer inputs kept for backward and recompute, the MoE layers' y_perm and,
  // under EP, the rows the dispatcher sends and receives. The layers read the bf16-rounded
  // values they keep, so forward, recompute and backward see the same numbers. Unset: on for
  // bf16 products on the cuda device, off otherwise; true with fp32 products is refused.
  std::optional<bool> bf16_activations;
  ops::MoeAuxLossType aux_loss = ops::MoeAuxLossType::none;
  std::int64_t cross_entropy_token_chunk = 256;
  std::int64_t cross_entropy_vocab_chunk = 32768;
  // model.moe_grouped_gemm / model.moe_permute_fusion (LayerRunContext).
  bool moe_grouped_gemm = true;
  bool moe_permute_fusion = true;
  // model.moe_shared_expert_overlap: the shared expert runs while the expert dispatcher's rows
  // travel (ExpertDispatcher::forward_beside); the same numbers either way.
  bool moe_shared_expert_overlap = false;
  bool moe_router_force_load_balancing = false;  // model.moe_router_force_load_balancing
};

struct BinOptions {
  bool compute_gradients = true;
  // Multiplies the cross-entropy gradient (e.g. 1 / loss tokens for a token-mean loss).
  double loss_grad_scale = 1.0;
  // Aux loss: sequences in the global batch (its normaliser) and the gradient multiplier.
  std::int64_t aux_num_sequences_global = 1;
  double aux_loss_grad_scale = 1.0;
  Tensor per_token_loss;  // optional f32 [T] output (0 on rows without loss)
  // optional f32 [T, h] output: the normed hidden states before the head (every row, also
  // under sequence parallelism)
  Tensor final_hidden;
  // Called after each layer's backward with its index (ddp.overlap_grad_reduce starts the
  // buckets that layer finished, parallel/overlapped_gradient_reduce.hpp).
  std::function<void(std::int64_t layer)> after_layer_backward;
  // Called before the forward first reads a layer's parameters: -1 before the embedding, each
  // layer's index before it, num_hidden_layers before the final norm and LM head
  // (ddp.overlap_param_gather waits for the buckets holding them,
  // parallel/overlapped_parameter_gather.hpp).
  std::function<void(std::int64_t layer)> before_layer_forward;

  void before_forward_of(std::int64_t layer) const {
    if (before_layer_forward) before_layer_forward(layer);
  }
  void after_backward_of(std::int64_t layer) const {
    if (after_layer_backward) after_layer_backward(layer);
  }
};

struct BinResult {
  double loss_sum = 0.0;
  std::int64_t loss_tokens = 0;
  // Σ over MoE layers of coef / N_seq · Σ_s L_s over this bin's sequences (0 when aux is
  // none). Under CP every rank of the group reports the same value (statistics are reduced):
  // count it on one rank of the group only.
  double aux_loss = 0.0;
};

// One pass of a pipeline stage over one run of its layers (a virtual chunk): layers
// [first_layer, first_layer + num_layers) of the whole model, from the token ids (embedding)
// or from the previous stage's activation, to the next stage's activation or the loss.
struct ChunkPass {
  std::int64_t first_layer = 0;
  std::int64_t num_layers = 0;
  bool embedding = false;  // virtual stage 0: starts with the embedding
  bool loss = false;       // the last virtual stage: ends with the final norm, head and loss
};

// What one microbatch keeps on this rank from the forward of a chunk to its backward: its own
// arenas, saved activations and layer context (microbatch_state.hpp). A pipeline stage keeps
// several at once; the model owns them and reuses them from step to step.
class MicrobatchState;

class Qwen3MoeModel {
 public:
  Qwen3MoeModel(const config::ModelArchitecture& architecture, ModelOptions options = {});
  ~Qwen3MoeModel();
  Qwen3MoeModel(const Qwen3MoeModel&) = delete;
  Qwen3MoeModel& operator=(const Qwen3MoeModel&) = delete;

  Qwen3MoeParameters& parameters() { return parameters_; }
  const Qwen3MoeParameters& parameters() const { return parameters_; }
  const config::ModelArchitecture& architecture() const { return parameters_.architecture(); }
  const ModelOptions& options() const { return options_; }
  // first_layers: recompute only layers [0, first_layers) (block method); -1: every layer.
  void set_recompute_full(bool enabled, std::int64_t first_layers = -1) {
    options_.recompute_full = enabled;
    options_.recompute_first_layers = first_layers;
  }
  void set_recompute_selective(const config::SelectiveRecompute& selective) {
    options_.selective = selective;
  }

  // Forward (and backward when options.compute_gradients) over one bin through every layer.
  // Token ids outside the vocabulary and malformed bins are data errors. The model must hold
  // the whole model (ModelPart's default).
  BinResult run_bin(const PackedBin& bin, const BinSeams& seams, const BinOptions& options);

  // Pipeline stages run each microbatch chunk by chunk, forwards and backwards of different
  // microbatches interleaved (train/pipeline_executor.hpp). microbatch_state(i) is the i-th
  // state of this model (created on first use; each holds one microbatch's pass at a time).
  MicrobatchState& microbatch_state(std::size_t index);
  // Forward of `chunk` (layers this model holds) over `bin`: from the token ids
  // (chunk.embedding) or from `input` [stage_rows(bin), h]; writes the chunk's output of the
  // same shape to `output`, or with chunk.loss returns the loss (and, with compute_gradients,
  // accumulates the head's gradient now and keeps the final norm's output gradient). Only the
  // aux loss of the chunk's layers is in the result. `bin`, `seams` and `options` must stay
  // valid until backward_chunk; input and output may be reused at once.
  BinResult forward_chunk(MicrobatchState& state, const PackedBin& bin, const BinSeams& seams,
                          const BinOptions& options, const ChunkPass& chunk, const Tensor& input,
                          const Tensor& output);
  // Backward of the chunk `state` ran forward: from `output_grad` (or, for the loss chunk, the
  // kept gradient) to the chunk input's gradient, written to `input_grad` (or accumulated into
  // the embedding's). Parameter gradients accumulate.
  void backward_chunk(MicrobatchState& state, const Tensor& output_grad, const Tensor& input_grad);
  // Rows of the residual stream this rank holds for `bin`: the rows a stage passes on.
  std::int64_t stage_rows(const PackedBin& bin) const {
    const TensorParallelShape& tp = parameters_.tensor_parallel();
    return tp.active() && tp.sequence_parallel ? bin.token_ids.size(0) / tp.size
                                               : bin.token_ids.size(0);
  }

  // Bytes the arenas have reached (activation plan, logged by the trainer).
  std::size_t activation_high_water_bytes() const;
  // Whether saved activations are stored in bf16 (ModelOptions::bf16_activations, resolved).
  bool bf16_activations() const { return bf16_activations_; }

 private:
  // The embedding step (token ids -> the residual stream [T, h]) and its backward.
  void embedding_forward(const MicrobatchState& state, const Tensor& hidden) const;
  void embedding_backward(const MicrobatchState& state, const Tensor& grad) const;
  // The last step: final norm, LM head and cross-entropy over the stream [T, h] (the loss
  // into `result`), and the final norm's backward into the stream gradient `grad`.
  void head_and_loss_forward(MicrobatchState& state, core::Arena& stream_arena,
                             const Tensor& hidden, BinResult& result);
  void head_and_loss_backward(MicrobatchState& state, const Tensor& grad);
  // The positions in parameters().layers of `chunk`'s layers: [first, first + num_layers).
  std::size_t chunk_positions(const ChunkPass& chunk) const;

  Qwen3MoeParameters parameters_;
  ModelOptions options_;
  bool bf16_activations_ = false;
  core::Arena scratch_;  // temporaries, released by each layer / op
  // run_bin's state: the whole model's pass, bf16 residual stream in scratch.
  std::unique_ptr<MicrobatchState> single_pass_;
  std::vector<std::unique_ptr<MicrobatchState>> microbatch_states_;  // pipeline passes
};

}  // namespace dyncp::model
