#pragma once
// Every config.json field of the supported model types (qwen3_moe, qwen3_next, qwen3_5_moe and
// its text_config, qwen3_5_moe_text), classified: honoured (read into ModelArchitecture, held
// against transformers by the model golden tests), refused unless it has the value the model
// implements (exit 2 naming the field and value), or inert (proven not to change the training
// math, with the reason). The list transformers' config classes define is committed as
// tests/fixtures/model/hf_config_fields.json; a test fails on any field it has that this table
// lacks. Fields outside transformers' classes are read by neither transformers nor us; they
// are named in one warning.

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace dyncp::config {

enum class HfFieldHandling { honoured, refused_unless_supported, inert };

struct HfConfigField {
  std::string_view name;
  HfFieldHandling handling;
  std::string_view note;  // what is honoured, what is supported, or why it is inert
};

// The whole table (docs/model.md lists it).
const std::vector<HfConfigField>& hf_config_fields();
const HfConfigField* find_hf_config_field(std::string_view name);

// Checks every field of one config object (the top level, or text_config): refused fields
// must hold a supported value. Returns the names transformers does not define (for the
// warning). Throws a data error naming `file`, the field path and the value.
std::vector<std::string> check_hf_config_fields(const nlohmann::json& fields,
                                                const std::string& scope, const std::string& file);

}  // namespace dyncp::config
