#pragma once
// Reading a recipe: YAML file (or text) plus `key.path=value` overrides -> ConfigContainer.
// Order of precedence: defaults < model.hf_model_path's config.json < recipe < overrides.
// Every unknown key, type error and rejected value is collected and reported in one error.
// The result is not yet resolved or validated: call resolve_config (config/resolve.hpp).

#include <string>
#include <vector>

#include "config/config_container.hpp"

namespace dyncp::config {

ConfigContainer load_config_file(const std::string& path,
                                 const std::vector<std::string>& overrides);

// `source_name` names the text in messages (a file name, or "<string>").
ConfigContainer load_config_text(const std::string& yaml_text,
                                 const std::vector<std::string>& overrides,
                                 const std::string& source_name = "<string>");

// Every key of the key table as YAML, sections in table order. Fed back through
// load_config_text it gives the same configuration.
std::string dump_config_yaml(const ConfigContainer& config);

// The configuration as a Megatron-Bridge ConfigContainer dump (every field of every section,
// `_target_` markers, sorted keys), which this loader reads back to the same configuration in
// every key Bridge expresses; the others are listed in its header comment. Throws a config
// error for data Bridge has no class for (token_jsonl, mock lengths other than seq_length).
std::string dump_bridge_yaml(const ConfigContainer& config);

}  // namespace dyncp::config
