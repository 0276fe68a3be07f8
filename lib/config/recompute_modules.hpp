#pragma once
// Megatron's recompute_modules names (selective recomputation): which are built, and what the
// model drops for a config's list.

#include <string>
#include <string_view>

#include "config/config_container.hpp"

namespace dyncp::config {

// What selective recomputation leaves out of the saved activations (docs/model.md). core_attn,
// also built, has no flag: the flash-style attention keeps only its output and lse and its
// backward recomputes the probabilities already.
struct SelectiveRecompute {
  bool moe_act = false;         // the routed and shared experts' SwiGLU outputs
  bool layernorm = false;       // the two residual norms' outputs
  bool mlp = false;             // dense layers' MLPs keep only their input
  bool shared_experts = false;  // so does the hybrid's shared expert
};

// Every name Megatron's TransformerConfig accepts in recompute_modules, and those built here.
bool is_recompute_module(std::string_view module);
bool is_built_recompute_module(std::string_view module);
// "core_attn, moe_act, ...": all of Megatron's names, or the built ones, for messages.
std::string recompute_module_names(bool built_only);

// The flags `model` asks for: none unless recompute_granularity is selective.
SelectiveRecompute selective_recompute(const ModelConfig& model);
// The modules that drop tensors, "moe_act, layernorm" (empty when none).
std::string dropped_modules(const SelectiveRecompute& recompute);

}  // namespace dyncp::config
