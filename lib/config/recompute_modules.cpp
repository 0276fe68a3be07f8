#include "config/recompute_modules.hpp"

#include <algorithm>
#include <array>

namespace dyncp::config {
namespace {

struct ModuleName {
  std::string_view name;
  bool built;
};
constexpr std::array<ModuleName, 7> kModules = {{{"core_attn", true},
                                                 {"moe_act", true},
                                                 {"layernorm", true},
                                                 {"mla_up_proj", false},
                                                 {"mlp", true},
                                                 {"moe", false},
                                                 {"shared_experts", true}}};

const ModuleName* find_module(std::string_view module) {
  const auto it = std::find_if(kModules.begin(), kModules.end(),
                               [&](const ModuleName& m) { return m.name == module; });
  return it == kModules.end() ? nullptr : &*it;
}

void append(std::string& list, std::string_view name) {
  if (!list.empty()) list += ", ";
  list += name;
}

}  // namespace

bool is_recompute_module(std::string_view module) {
  return find_module(module) != nullptr;
}

bool is_built_recompute_module(std::string_view module) {
  const ModuleName* found = find_module(module);
  return found != nullptr && found->built;
}

std::string recompute_module_names(bool built_only) {
  std::string list;
  for (const ModuleName& m : kModules)
    if (m.built || !built_only) append(list, m.name);
  return list;
}

SelectiveRecompute selective_recompute(const ModelConfig& model) {
  SelectiveRecompute out;
  if (model.recompute_granularity != RecomputeGranularity::selective) return out;
  const auto asks = [&](std::string_view name) {
    return std::find(model.recompute_modules.begin(), model.recompute_modules.end(), name) !=
           model.recompute_modules.end();
  };
  out.moe_act = asks("moe_act");
  out.layernorm = asks("layernorm");
  out.mlp = asks("mlp");
  out.shared_experts = asks("shared_experts");
  return out;
}

std::string dropped_modules(const SelectiveRecompute& recompute) {
  std::string list;
  if (recompute.moe_act) append(list, "moe_act");
  if (recompute.layernorm) append(list, "layernorm");
  if (recompute.mlp) append(list, "mlp");
  if (recompute.shared_experts) append(list, "shared_experts");
  return list;
}

}  // namespace dyncp::config
