#pragma once
// Parameters of a Qwen3-MoE model: one owning allocation for all values and one for all
// gradients (the optimizer and gradient reductions can treat each as a flat buffer), cut into
// the tensors the layers compute with, plus a view per HF checkpoint tensor (qwen-moe.md §4.2).
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

namespace dyncp::model {

struct AttentionParams {
  Param q_proj;  // [Hq·d, h]
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

struct MoeParams {
  Param router;           // [E, h]
  ExpertWeights experts;  // gate_up [E, 2I, h], down [E, h, I]
};

struct DecoderLayerParams {
  Param input_norm;           // [h]
  Param post_attention_norm;  // [h]
  AttentionParams attention;
  bool is_moe = false;
  DenseMlpParams dense;  // when !is_moe
  MoeParams moe;         // when is_moe
};

// One HF checkpoint tensor: its name and the views holding its value and gradient.
struct HfTensor {
  std::string name;
  Tensor value;
  Tensor grad;
  bool is_expert = false;  // summed over the expert-data-parallel group, not the whole pool
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

class Qwen3MoeParameters {
 public:
  // Allocates (values zero, gradients zero). Throws a config error naming the field when the
  // architecture is not a usable Qwen3-MoE one or the expert range does not fit.
  explicit Qwen3MoeParameters(const config::ModelArchitecture& architecture,
                              ExpertRange experts = {});

  const config::ModelArchitecture& architecture() const { return architecture_; }
  const ExpertRange& expert_range() const { return expert_range_; }
  Param embed_tokens;  // [V, h]
  std::vector<DecoderLayerParams> layers;
  Param final_norm;  // [h]
  Param lm_head;     // [V, h]; aliases embed_tokens when tied

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
  std::int64_t num_parameters() const { return all_values_.numel(); }

  // Seeded initialisation from core::random_bits(seed, weight_init, tensor index, element):
  // matrices N(0, init_std), norm weights 1.
  void init_random(std::uint64_t seed, double init_std = 0.02) const;

 private:
  config::ModelArchitecture architecture_;
  ExpertRange expert_range_;
  Tensor all_values_;
  Tensor all_grads_;
  std::int64_t dense_numel_ = 0;
  std::vector<HfTensor> hf_tensors_;
};

// Throws config errors (key path `model.<field>`) for architectures this model cannot run.
void validate_qwen3_moe_architecture(const config::ModelArchitecture& architecture);

}  // namespace dyncp::model
