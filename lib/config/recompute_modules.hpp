#pragma once
// Megatron's recompute_modules names (selective recomputation), and which of them are built.

#include <algorithm>
#include <array>
#include <string_view>

namespace dyncp::config {

// Every name Megatron's TransformerConfig accepts in recompute_modules.
inline bool is_recompute_module(std::string_view module) {
  constexpr std::array<std::string_view, 7> names = {
      "core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"};
  return std::find(names.begin(), names.end(), module) != names.end();
}

// core_attn is built as a no-op: the flash-style attention keeps only its output and lse and
// its backward recomputes the probabilities already. moe_act, layernorm, mlp and
// shared_experts drop tensors.
inline constexpr std::string_view kBuiltRecomputeModules =
    "core_attn, moe_act, layernorm, mlp, shared_experts";
inline bool is_built_recompute_module(std::string_view module) {
  return module == "core_attn" || module == "moe_act" || module == "layernorm" || module == "mlp" ||
         module == "shared_experts";
}

}  // namespace dyncp::config
