// Every config.json field of the supported model types is classified, and a loaded config.json
// honours, refuses (exit 2 naming field and value) or range-checks what it holds.
#include "config/hf_config_fields.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/model_architecture.hpp"
#include "core/error.hpp"

using namespace dyncp::config;
namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

fs::path fixture(const std::string& name) {
  return fs::path(DYNCP_SOURCE_DIR) / "tests" / "fixtures" / "model" / name;
}

// Writes `config` as config.json in a fresh folder and loads it.
ModelArchitecture load(const nlohmann::json& config, const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("dyncp_hf_config_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump(1);
  return load_hf_model_config(dir.string());
}

void expect_refused(const nlohmann::json& config, const std::string& name,
                    const std::vector<std::string>& needles) {
  try {
    load(config, name);
    FAIL("config.json accepted: " << config.dump());
  } catch (const dyncp::core::Error& error) {
    CHECK(error.exit_code() == 2);
    for (const std::string& needle : needles) CHECK_THAT(error.what(), Catch::Contains(needle));
  }
}

}  // namespace

TEST_CASE("every field transformers defines for the supported model types is classified",
          "[config][hf_fields]") {
  const auto listed = read_json(fixture("hf_config_fields.json"));
  std::size_t fields = 0;
  for (const auto& [scope, names] : listed["scopes"].items()) {
    for (const auto& name : names) {
      // A vision tower's fields are covered by the classification of vision_config itself.
      const std::string field =
          scope.ends_with(".vision_config") ? "vision_config" : name.get<std::string>();
      INFO("unclassified config.json field " << scope << "." << name.get<std::string>()
                                             << ": add it to lib/config/hf_config_fields.cpp");
      CHECK(find_hf_config_field(field) != nullptr);
      ++fields;
    }
  }
  CHECK(fields > 150);
  for (const HfConfigField& field : hf_config_fields()) CHECK_FALSE(field.note.empty());
}

TEST_CASE("config.json fields that change the math are honoured or refused naming field and value",
          "[config][hf_fields]") {
  const auto base = read_json(fixture("qwen3_moe_a") / "config.json");
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    auto copy = base;
    copy[key] = value;
    return copy;
  };
  expect_refused(with("rope_scaling", {{"rope_type", "longrope"}, {"factor", 4.0}}), "longrope",
                 {"rope_scaling", "longrope", "not implemented"});
  expect_refused(with("rope_parameters", {{"rope_type", "linear"}, {"rope_theta", 1e6}}),
                 "linear_no_factor", {"rope_parameters", "linear", "needs a number 'factor'"});
  expect_refused(
      with("rope_parameters", {{"rope_type", "linear"}, {"factor", 2.0}, {"beta_fast", 3}}),
      "linear_key", {"rope_parameters", "beta_fast", "no meaning"});
  expect_refused(with("rope_parameters", {{"rope_type", "yarn"}, {"factor", 0.5}}), "yarn_factor",
                 {"factor", ">= 1"});
  expect_refused(with("rope_parameters", {{"rope_type", "llama3"},
                                          {"factor", 8.0},
                                          {"low_freq_factor", 4.0},
                                          {"high_freq_factor", 1.0}}),
                 "llama3_order", {"high_freq_factor > low_freq_factor"});
  auto window_by_layer = with("use_sliding_window", true);
  window_by_layer["max_window_layers"] = 2;
  expect_refused(window_by_layer, "window_layers", {"max_window_layers = 2", "4.x"});
  expect_refused(with("use_sliding_window", "yes"), "sliding_type", {"use_sliding_window"});
  expect_refused(with("pad_token_id", 512), "pad_range", {"pad_token_id = 512", "vocab_size"});
  expect_refused(with("attention_dropout", 0.1), "dropout", {"attention_dropout = 0.1"});
  expect_refused(with("hidden_act", "gelu"), "act", {"hidden_act = \"gelu\""});
  expect_refused(with("quantization_config", {{"quant_method", "fp8"}}), "quant",
                 {"quantization_config"});
  // Range checks: what would otherwise be a null loss or an out-of-memory failure.
  expect_refused(with("rms_norm_eps", 0.0), "eps", {"rms_norm_eps", "(0, 1)"});
  expect_refused(with("rms_norm_eps", -1e-6), "eps_negative", {"rms_norm_eps"});
  expect_refused(with("hidden_size", std::int64_t{1} << 40), "hidden",
                 {"hidden_size", "out of range"});
  expect_refused(with("vocab_size", 0), "vocab", {"vocab_size = 0"});
  expect_refused(with("num_experts_per_tok", 1000), "topk", {"num_experts_per_tok = 1000"});
  expect_refused(with("num_key_value_heads", 3), "gqa", {"num_key_value_heads"});
  expect_refused(with("rope_theta", -1.0), "theta", {"rope_theta"});
  expect_refused(with("head_dim", 7), "odd_rotary", {"rotary"});
  // Accepted: default RoPE spelled out, inert fields, and fields transformers does not define.
  auto accepted = with("rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5e5}});
  accepted["use_cache"] = false;
  accepted["initializer_range"] = 0.5;
  accepted["sliding_window"] = 128;  // read only with use_sliding_window
  accepted["some_future_field"] = 1;
  const ModelArchitecture architecture = load(accepted, "accepted");
  CHECK(architecture.rope_theta == 5e5);
  CHECK(architecture.sliding_window == 0);
  CHECK(architecture.pad_token_id == -1);
}

TEST_CASE("RoPE scaling, sliding windows and pad_token_id are read as transformers reads them",
          "[config][hf_fields]") {
  const auto base = read_json(fixture("qwen3_moe_a") / "config.json");
  auto yarn = base;
  yarn["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 0}};
  const ModelArchitecture a = load(yarn, "yarn");
  CHECK(a.rope_scaling.rope_type == "yarn");
  CHECK(a.rope_scaling.factor == 4.0);
  CHECK(a.rope_scaling.beta_fast == 32.0);  // transformers: `or 32`
  // No original context given: max_position_embeddings, as standardize_rope_params sets.
  CHECK(a.rope_scaling.original_max_position_embeddings == 256.0);
  // rope_scaling (4.x spelling) with "type"; transformers takes it over rope_parameters
  // when both are present, with the top-level rope_theta (10000 here), not rope_parameters'.
  auto old_name = base;
  old_name["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  CHECK(load(old_name, "rope_scaling").rope_scaling.rope_type == "linear");
  old_name["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  const ModelArchitecture both = load(old_name, "both");
  CHECK(both.rope_scaling.rope_type == "linear");
  CHECK(both.rope_theta == 10000.0);

  auto window = base;
  window["use_sliding_window"] = true;
  CHECK(load(window, "window_default").sliding_window == 4096);  // Qwen3MoeConfig's default
  window["sliding_window"] = 8;
  window["max_window_layers"] = 0;
  CHECK(load(window, "window").sliding_window == 8);
  window["sliding_window"] = nullptr;  // transformers: no window at all
  CHECK(load(window, "window_null").sliding_window == 0);
  window["use_sliding_window"] = false;
  window["sliding_window"] = 8;
  window["max_window_layers"] = 28;  // read only with use_sliding_window
  CHECK(load(window, "window_off").sliding_window == 0);

  auto pad = base;
  pad["pad_token_id"] = 3;
  CHECK(load(pad, "pad").pad_token_id == 3);

  // The export writes them back so a reload reads the same model.
  auto all = yarn;
  all["use_sliding_window"] = true;
  all["sliding_window"] = 8;
  all["pad_token_id"] = 3;
  const ModelArchitecture loaded = load(all, "all");
  const ModelArchitecture again = load(nlohmann::json::parse(to_hf_config_json(loaded)), "again");
  CHECK(again.rope_scaling.rope_type == "yarn");
  CHECK(again.rope_scaling.factor == 4.0);
  CHECK(again.rope_scaling.original_max_position_embeddings == 256.0);
  CHECK(again.sliding_window == 8);
  CHECK(again.pad_token_id == 3);
}

TEST_CASE("an odd rotary dimension is rotated rounded up to even, as transformers does",
          "[config][hf_fields]") {
  auto config = read_json(fixture("qwen3_5_moe_b") / "config.json");
  config["text_config"]["head_dim"] = 12;  // 12 * 0.25 = 3
  const ModelArchitecture a = load(config, "odd");
  CHECK(a.rope_frequency_dim() == 3);
  CHECK(a.rotary_dim() == 4);
  // YaRN's ramp has n/2 entries against ceil(n/2) frequencies: transformers fails, so do we.
  config["text_config"]["rope_parameters"]["rope_type"] = "yarn";
  config["text_config"]["rope_parameters"]["factor"] = 2.0;
  expect_refused(config, "odd_yarn", {"yarn", "odd rotary dimension 3"});
  // A hybrid attention has no window in transformers.
  config = read_json(fixture("qwen3_5_moe_b") / "config.json");
  config["text_config"]["use_sliding_window"] = true;
  expect_refused(config, "hybrid_window", {"use_sliding_window", "qwen3_5_moe_text"});
}

TEST_CASE("a nested Qwen3.5 config ties embeddings by its top-level flag", "[config][hf_fields]") {
  auto config = read_json(fixture("qwen3_5_moe_b") / "config.json");
  REQUIRE(config.contains("text_config"));
  config["tie_word_embeddings"] = true;
  config["text_config"]["tie_word_embeddings"] = false;
  CHECK(load(config, "tie_top").tie_word_embeddings);
  config["tie_word_embeddings"] = false;
  config["text_config"]["tie_word_embeddings"] = true;
  CHECK_FALSE(load(config, "tie_top_false").tie_word_embeddings);
  config.erase("tie_word_embeddings");
  CHECK(load(config, "tie_inner").tie_word_embeddings);
  // The nested config's own fields are checked too.
  config["text_config"]["rope_parameters"]["rope_type"] = "longrope";
  expect_refused(config, "nested_rope", {"text_config.rope_parameters", "longrope"});
}
