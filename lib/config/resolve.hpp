#pragma once
// Validation and derivation, in one place. `resolve_config` checks every rule for a world size,
// collecting all problems (`key.path: value: rule (how to fix)`) into one config error, then
// fills the derived values: the packing scheduler, the alignment multiple, LR-schedule
// defaults, the model's derived dims, and `config.layout`. Resolving a resolved config is a
// no-op, so the --print-config dump round-trips.

#include <cstdint>
#include <string>
#include <vector>

#include "config/config_container.hpp"

namespace dyncp::config {

void resolve_config(ConfigContainer& config, std::int64_t world_size);

// Features the configuration asks for that are not built yet, one line each with the keys
// that ask for them: "activation recomputation (model.recompute_granularity=full, ...)".
std::vector<std::string> unbuilt_features(const ConfigContainer& config);

// Settings that are valid but probably not what the user wants, one line each (logged as
// warnings): RoPE positions beyond the checkpoint's context, evaluation that never runs, ...
std::vector<std::string> config_warnings(const ConfigContainer& config);

// Multi-line summary of the main settings (model, sequence, batch, data) for --dry-run.
std::string describe_run(const ConfigContainer& config);

// Multi-line summary for --dry-run: world, dp, cp, pool, ep, expert-dp, alignment, groups.
std::string describe_layout(const ConfigContainer& config);

}  // namespace dyncp::config
