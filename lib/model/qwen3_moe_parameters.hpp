#pragma once
// Parameters of a Qwen3-MoE model, or of the hybrid Qwen3-Next / Qwen3.5-MoE family (gated
// attention and Gated DeltaNet token mixers, shared experts): one owning allocation for all
// values and one for all gradients (the optimizer and gradient reductions can treat each as a
// flat buffer), cut into the tensors the layers compute with, plus a view per HF checkpoint
// tensor (qwen-moe.md §4.2-4.4).
//
// Experts are stored fused per layer (gate_up [E, 2I, h], down [E, h, I]); the HF names
// `mlp.experts.{e}.gate_proj.weight` / `up_proj` / `down_proj` are contiguous views into them.
// Dense MLP layers keep gate and up fused the same way ([2I, h]). With tied embeddings the LM
// head is the embedding table itself (one value, one gradient, one HF name).

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_architecture.hpp"
#include "model/seams.hpp"
#include "model/tensor_parallel.hpp"

namespace dyncp::model {

struct AttentionParams {
  Param q_proj;  // [Hq·d, h]: the query rows
  // Gated attention (hybrid family) only: [Hq·d, h], the output-gate rows. HF stores query and
  // gate interleaved per head in one q_proj [Hq·2d, h]; we keep them apart so each is one GEMM
  // into a contiguous [T, Hq, d] (the HF tensor is a row-ordered view, HfTensor::rows).
  Param q_gate_proj;
  Param k_proj;  // [Hkv·d, h]
  Param v_proj;  // [Hkv·d, h]
  Param o_proj;  // [h, Hq·d]
  Param q_norm;  // [d]
  Param k_norm;  // [d]
};

struct DenseMlpParams {
  Param gate_up;  // [2I, h]: rows [0, I) gate_proj, [I, 2I) up_proj
  Param down;     // [h, I]
};

// Gated DeltaNet token mixer (qwen-moe.md §3.4), sizes Hk / Hv heads, dk / dv head dims,
// key_dim = Hk·dk, value_dim = Hv·dv, conv_dim = 2·key_dim + value_dim, K = conv kernel.
// The four input projections are adjacent in memory (rows qkv | z | b | a), so Qwen3-Next's
// fused in_proj_qkvz / in_proj_ba are row-ordered views of the same storage.
struct GatedDeltaNetParams {
  Param in_proj_qkv;  // [conv_dim, h]: rows [q (all heads) | k | v], the conv's channel order
  Param in_proj_z;    // [value_dim, h]: output-gate input of the gated norm
  Param in_proj_b;    // [Hv, h]: β = σ(b)
  Param in_proj_a;    // [Hv, h]: decay input
  Param conv1d;       // [conv_dim, 1, K] (HF's shape; depthwise, no bias)
  Param A_log;        // [Hv]
  Param dt_bias;      // [Hv]
  Param norm;         // [dv]: gated RMSNorm weight, PLAIN (not 1 + w)
  Param out_proj;     // [h, value_dim]
};

struct MoeParams {
  Param router;           // [E, h]
  ExpertWeights experts;  // gate_up [E, 2I, h], down [E, h, I]
  // Hybrid family: a shared SwiGLU expert (gate_up [2·Is, h], down [h, Is]) behind a
  // per-token sigmoid gate. has_shared_expert is false for Qwen3-MoE.
  bool has_shared_expert = false;
  DenseMlpParams shared_expert;
  Param shared_expert_gate;  // [1, h]
};

struct DecoderLayerParams {
  Param input_norm;           // [h]
  Param post_attention_norm;  // [h]
  config::LayerMixer mixer = config::LayerMixer::full_attention;
  AttentionParams attention;             // when mixer == full_attention
  GatedDeltaNetParams linear_attention;  // when mixer == linear_attention
  bool is_moe = false;
  DenseMlpParams dense;  // when !is_moe
  MoeParams moe;         // when is_moe
};

// Which group holds the pieces of a tensor split by tensor parallelism.
enum class TensorSplit : std::uint8_t {
  whole,                   // every rank of the TP group holds all of it
  tensor_parallel,         // a 1/tp piece per TP rank (heads, FFN columns, vocabulary)
  expert_tensor_parallel,  // a 1/etp piece of an expert per expert-TP rank
};

// Local rows [row, row + count) of a tensor hold its HF rows [hf_row, hf_row + count).
struct HfRowRun {
  std::int64_t row = 0;
  std::int64_t hf_row = 0;
  std::int64_t count = 0;
};

// One HF checkpoint tensor: its name and the views holding its value and gradient.
// Names are the text model's (`model.` prefix, one tensor per expert); hf_checkpoint.cpp maps
// them to the on-disk layouts (Qwen3.5's `model.language_model.` prefix and fused experts).
//
// `value` holds the whole HF tensor or, under tensor parallelism, this rank's piece of it. As a
// matrix (first dimension rows, the rest columns) the piece is rows given by `row_runs` (empty:
// local row r is HF row r) and the columns [hf_column_first, hf_column_first + local columns):
// column-parallel pieces are rows, row-parallel ones columns. Row runs also map the tensors we
// store de-interleaved (the gated q_proj, Qwen3-Next's in_proj_qkvz / in_proj_ba) to HF order.
struct HfTensor {
  std::string name;
  Tensor value;
  Tensor grad;
  bool is_expert = false;  // summed over the expert-data-parallel group, not the whole pool
  std::vector<std::int64_t> hf_shape;  // the whole tensor's HF shape
  std::vector<HfRowRun> row_runs;
  std::int64_t hf_column_first = 0;
  TensorSplit split = TensorSplit::whole;
  // A whole tensor whose gradient on a TP rank is only that rank's part (it acts on the rank's
  // heads or rows): the gradient is summed over the TP group before anything else reads it.
  bool tp_partial_grad = false;

  std::int64_t hf_numel() const;
  bool holds_whole() const { return hf_numel() == value.numel(); }
  // Whether value is the whole tensor in HF order (a plain view, no runs to map).
  bool stored_in_hf_order() const;
  // Copies the held elements of value (or grad; f32 or f64) into / out of `hf`, the WHOLE
  // tensor in HF order (hf_numel() floats); elements other ranks hold are left untouched.
  void read_hf_order(const Tensor& source, float* hf) const;
  void write_hf_order(const float* hf, const Tensor& destination) const;
  // fn(local_row, hf_row, count) for every run (the identity run when row_runs is empty).
  template <typename Fn>
  void for_each_row_run(Fn&& fn) const {
    if (row_runs.empty()) return fn(std::int64_t{0}, std::int64_t{0}, value.size(0));
    for (const HfRowRun& run : row_runs) fn(run.row, run.hf_row, run.count);
  }
};

// The experts this rank holds: [first, first + count) of every MoE layer (count 0 = all).
// Expert parallelism gives each rank of an EP group a slice; the router stays whole.
struct ExpertRange {
  std::int64_t first = 0;
  std::int64_t count = 0;
  bool holds(std::int64_t expert, std::int64_t num_experts) const {
    return expert >= first && expert < first + (count > 0 ? count : num_experts);
  }
};

// The part of the whole model a rank holds: under pipeline parallelism one stage's layers (the
// layers of its virtual chunks), the embedding on the first stage and the final norm and LM
// head on the last. A tied LM head on a last stage without the embedding is a copy of the
// embedding, as Megatron keeps one (its gradient is summed with the embedding's over the
// embedding group, so both stay equal). The default is the whole model.
struct ModelPart {
  struct LayerRun {
    std::int64_t first = 0;
    std::int64_t count = 0;
  };
  std::vector<LayerRun> layers;  // ascending and disjoint; empty: every layer
  bool embedding = true;
  bool head = true;  // final norm + LM head
};

class Qwen3MoeParameters {
 public:
  // Allocates (values zero, gradients zero). Throws a config error naming the field when the
  // architecture is not a usable Qwen3-MoE one or the expert range does not fit.
  // dtype: f32, or f64 for finite-difference checks. On Device::cuda the buffers live in
  // device memory: host code (checkpoints, init) reaches them through a host copy
  // (copy_values_from / init_random upload one; checkpoint writers download one).
  // `tensor_parallel`: this rank's piece of every split tensor (tensor_parallel.hpp); `part`:
  // the layers (and embedding, head) held, `layers` then holds those only, in order.
  explicit Qwen3MoeParameters(const config::ModelArchitecture& architecture,
                              ExpertRange experts = {}, core::DType dtype = core::DType::f32,
                              core::Device device = core::Device::cpu,
                              TensorParallelShape tensor_parallel = {}, ModelPart part = {});

  // Elements the buffers of a model with this architecture and expert range take, without
  // allocating them (the memory estimate); `dense` receives the part before the experts.
  static std::int64_t count(const config::ModelArchitecture& architecture, ExpertRange experts,
                            std::int64_t* dense = nullptr,
                            TensorParallelShape tensor_parallel = {});
  // The elements of one pipeline stage's parameters (the memory estimate of a stage): the
  // tensors of layers [first_layer, first_layer + num_layers), the embedding when
  // `embedding`, the final norm and LM head when `head` (a tied head: the embedding, which the
  // last stage then holds a copy of, as Megatron does). `experts_out` receives the routed
  // experts' part. Alignment gaps are not counted.
  struct StageParts {
    std::int64_t first_layer = 0;
    std::int64_t num_layers = 0;
    bool embedding = false;
    bool head = false;
  };
  static std::int64_t count_stage(const config::ModelArchitecture& architecture,
                                  ExpertRange experts, const StageParts& parts,
                                  std::int64_t* experts_out = nullptr);

  // The whole model's architecture (HF names and shapes, config.json).
  const config::ModelArchitecture& architecture() const { return architecture_; }
  // The sizes this rank's layers compute with: the whole architecture's without tensor
  // parallelism, the rank's share of heads, FFN columns and vocabulary with it.
  const config::ModelArchitecture& local_architecture() const { return local_architecture_; }
  const TensorParallelShape& tensor_parallel() const { return tensor_parallel_; }
  const ExpertRange& expert_range() const { return expert_range_; }
  const ModelPart& part() const { return part_; }  // layers filled in: the held runs
  Param embed_tokens;  // [V, h]; undefined without the embedding (and without a tied copy)
  std::vector<DecoderLayerParams> layers;  // the held layers, in whole-model order
  Param final_norm;                        // [h]; undefined without the head
  Param lm_head;                           // [V, h]; aliases embed_tokens when tied
  // The whole-model index of layers[i], and the position in `layers` of a whole-model layer
  // (-1 when this part does not hold it).
  std::int64_t layer_id(std::size_t position) const { return layer_ids_[position]; }
  std::int64_t position_of_layer(std::int64_t layer) const;
  // A last stage's copy of a tied embedding (it is listed as model.embed_tokens.weight too).
  bool holds_tied_head_copy() const {
    return part_.head && !part_.embedding && architecture_.tie_word_embeddings;
  }

  const std::vector<HfTensor>& hf_tensors() const { return hf_tensors_; }
  const HfTensor* find(const std::string& hf_name) const;
  // Flat views over every value / gradient (for optimizers and reductions). Dense parameters
  // come first, then the experts: dense_*() and expert_*() split the same buffers in two.
  const Tensor& all_values() const { return all_values_; }
  const Tensor& all_grads() const { return all_grads_; }
  Tensor dense_values() const { return all_values_.slice(0, dense_numel_); }
  Tensor dense_grads() const { return all_grads_.slice(0, dense_numel_); }
  Tensor expert_values() const { return all_values_.slice(dense_numel_, all_values_.numel()); }
  Tensor expert_grads() const { return all_grads_.slice(dense_numel_, all_grads_.numel()); }
  void zero_grads() const { all_grads_.fill_zero(); }
  core::Device device() const { return all_values_.device(); }
  // Values from parameters of the same architecture, expert range and dtype on any device.
  void copy_values_from(const Qwen3MoeParameters& other) const;
  std::int64_t num_parameters() const { return all_values_.numel(); }

  // Seeded initialisation from core::random_bits(seed, weight_init, tensor index, element),
  // the index counted in the whole model's HF tensor list (an expert slice, a pipeline stage's
  // layers get the values the whole model has there): matrices N(0, init_std), norm weights at
  // their identity (1, or 0 for the hybrid family's zero-centred norms), DeltaNet A_log = log U(1,
  // 16) and dt_bias = 1.
  void init_random(std::uint64_t seed, double init_std = 0.02) const;

 private:
  void fill_initial_values(const std::string& name, std::size_t index, std::uint64_t seed,
                           double init_std, std::vector<float>& values) const;
  void add_hf_tensors();
  config::ModelArchitecture architecture_;
  config::ModelArchitecture local_architecture_;
  TensorParallelShape tensor_parallel_;
  ExpertRange expert_range_;
  ModelPart part_;
  std::vector<std::int64_t> layer_ids_;
  // Per hf_tensors_ entry: its index in the whole model's list (every layer, every expert),
  // which keys its seeded initial values.
  std::vector<std::size_t> whole_model_index_;
  Tensor all_values_;
  Tensor all_grads_;
  std::int64_t dense_numel_ = 0;
  std::vector<HfTensor> hf_tensors_;
};

// The row runs HF tensor `name` has in the whole model's parameters (no tensor parallelism):
// empty when they hold it in HF order, the de-interleaved tensors' runs otherwise (the gated
// q_proj, Qwen3-Next's in_proj_qkvz and in_proj_ba). What the whole model's storage order of a
// tensor is, without building the whole model (checkpoints that recorded it, format 1 of the
// sharded checkpoint index).
std::vector<HfRowRun> whole_model_row_runs(const config::ModelArchitecture& architecture,
                                           const std::string& name);

// Throws config errors (key path `model.<field>`) for architectures this model cannot run
// (Qwen3-MoE and the hybrid qwen3_next / qwen3_5_moe / qwen3_5_moe_text).
void validate_qwen3_moe_architecture(const config::ModelArchitecture& architecture);

}  // namespace dyncp::model
